/*
 * spec_logging.c
 *		Keep specs out of the server log.
 *
 * While create_job or describe_job runs, the statement's text may hold
 * secrets (source.options): errors raised meanwhile are logged without it.
 * The transaction callback (job_control_xact.c) ends this when an error
 * ends the statement.
 */
#include "postgres.h"

#include "api/api.h"
#include "api/job_control.h"

static bool reading_spec = false;	/* a spec (maybe with secrets) is the statement's text */
static emit_log_hook_type prev_emit_log_hook = NULL;

static void hide_spec_statement(ErrorData *edata);

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
	reading_spec = true;
	/* The abort callback resets the flag when an error ends the statement. */
	job_control_register_callback();
}

void
end_reading_spec(void)
{
	reading_spec = false;
}
