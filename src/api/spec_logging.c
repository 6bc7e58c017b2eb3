/*
 * spec_logging.c
 *		Keep specs out of the server log and pg_stat_activity.
 *
 * While create_job or describe_job runs, the statement's text may hold
 * secrets (source.options): errors raised meanwhile are logged without it,
 * and pg_stat_activity shows a stand-in for it.  A transaction callback of
 * this file's own ends this when an error ends the statement.
 *
 * A statement that names one of the spec functions may hold a spec whether
 * the function runs or not: a spec that is not valid JSON fails before,
 * with its text in the error's context and detail, and a slow one is
 * logged whole by log_min_duration_statement.  For such a statement, every
 * message logged keeps neither the statement nor the JSON error's context
 * and detail, and a message that quotes the statement quotes a stand-in.
 */
#include "postgres.h"

#include "access/xact.h"
#include "pgstat.h"
#include "tcop/tcopprot.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"

#include "api/api.h"
#include "api/job_control.h"

static bool reading_spec = false;	/* a spec (maybe with secrets) is the statement's text */
static emit_log_hook_type prev_emit_log_hook = NULL;

static void hide_spec_statement(ErrorData *edata);
static void spec_logging_xact_callback(XactEvent event, void *arg);

void
api_install_hooks(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = hide_spec_statement;
}

#define HIDDEN_STATEMENT "<the statement is not shown: it may hold a mailer job's secrets>"

/* Whether the statement's text may hold a spec: it names a spec function. */
static bool
statement_may_hold_spec(const char *query)
{
	return query != NULL &&
		(strcasestr(query, "create_job") != NULL || strcasestr(query, "alter_job") != NULL ||
		 strcasestr(query, "describe_job") != NULL);
}

static void
hide_spec_statement(ErrorData *edata)
{
	if (reading_spec || statement_may_hold_spec(debug_query_string))
	{
		char	   *quoted;

		edata->hide_stmt = true;
		/* A JSON input error quotes the text around what it could not read. */
		if (edata->context && strstr(edata->context, "JSON data") != NULL)
		{
			edata->context = NULL;
			edata->detail = NULL;
		}
		/* log_min_duration_statement's "duration: ... statement: <the text>". */
		if (debug_query_string && debug_query_string[0] != '\0' && edata->message &&
			(quoted = strstr(edata->message, debug_query_string)) != NULL)
			edata->message = psprintf("%.*s%s%s", (int) (quoted - edata->message), edata->message,
									  HIDDEN_STATEMENT, quoted + strlen(debug_query_string));
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

void
begin_reading_spec(const char *function, const char *job_name)
{
	static bool callback_registered = false;

	reading_spec = true;
	/*
	 * pg_stat_activity keeps the last statement's text while the session is
	 * idle, too: it shows the call, by its job's name, without the spec.
	 */
	pgstat_report_activity(STATE_RUNNING,
						   psprintf("SELECT mailer.%s(%s%s<the spec is not shown: it may hold a job's secrets>)",
									function, job_name ? quote_literal_cstr(job_name) : "",
									job_name ? ", " : ""));
	/* The transaction's end resets the flag, also when an error ends the statement. */
	if (!callback_registered)
	{
		RegisterXactCallback(spec_logging_xact_callback, NULL);
		callback_registered = true;
	}
}

static void
spec_logging_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE)
		end_reading_spec();
}

void
end_reading_spec(void)
{
	reading_spec = false;
}
