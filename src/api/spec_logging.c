/*
 * spec_logging.c
 *		Keep specs out of the server log.
 *
 * While create_job or describe_job runs, the statement's text may hold
 * secrets (source.options): errors raised meanwhile are logged without it.
 * A transaction callback of this file's own ends this when an error ends
 * the statement.
 */
#include "postgres.h"

#include "access/xact.h"

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

static void
hide_spec_statement(ErrorData *edata)
{
	if (reading_spec)
		edata->hide_stmt = true;
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

void
begin_reading_spec(void)
{
	static bool callback_registered = false;

	reading_spec = true;
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
