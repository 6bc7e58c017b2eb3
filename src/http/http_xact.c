/*
 * http_xact.c
 *		Run a piece of the HTTP worker's work in a transaction of its own.
 *
 * libmicrohttpd's frames may be on the stack below (a request handler):
 * an ereport(ERROR) must never unwind through them, so the work runs
 * inside PG_TRY, and an error is logged and rolled back here.  The
 * transaction is read-only (the worker's default_transaction_read_only),
 * reads one snapshot, and its statements together have a few seconds:
 * a request must not hang, nor hold what a job worker needs.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"

#include "http/http_xact.h"
#include "jobs/catalog.h"

#define HTTP_STATEMENT_TIMEOUT_MS 5000


bool
http_xact_run(void (*work) (void *arg), void *arg, const char *what)
{
	MemoryContext context = CurrentMemoryContext;
	volatile bool ok = false;

	/* A cancel that came between requests was for none of them. */
	QueryCancelPending = false;
	pgstat_report_activity(STATE_RUNNING, what);
	PG_TRY();
	{
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		enable_timeout_after(STATEMENT_TIMEOUT, HTTP_STATEMENT_TIMEOUT_MS);
		/*
		 * The extension locked first, as the launcher locks it: a request
		 * reads several of its tables in one statement, and would otherwise
		 * deadlock with a DROP EXTENSION that has locked some of them
		 * (docs/ARCHITECTURE.md, "The launcher").
		 */
		(void) catalog_lock_installed_extension();
		MemoryContextSwitchTo(context);
		work(arg);
		disable_timeout(STATEMENT_TIMEOUT, false);
		PopActiveSnapshot();
		CommitTransactionCommand();
		ok = true;
	}
	PG_CATCH();
	{
		ErrorData  *error;

		MemoryContextSwitchTo(context);
		error = CopyErrorData();
		FlushErrorState();
		disable_timeout(STATEMENT_TIMEOUT, false);
		AbortCurrentTransaction();
		ereport(LOG,
				(errcode(error->sqlerrcode),
				 errmsg("mailer http worker: %s failed: %s", what, error->message)));
		FreeErrorData(error);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(context);
	pgstat_report_activity(STATE_IDLE, NULL);
	return ok;
}

void
http_query_run(HttpQuery *query, Datum *args)
{
	Oid			types[1] = {TEXTOID};

	Assert(query->nargs <= 1);
	if (query->plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(query->sql, query->nargs, types);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed (%s): %s",
				 SPI_result_code_string(SPI_result), query->sql);
		SPI_keepplan(plan);
		query->plan = plan;
	}
	if (SPI_execute_plan(query->plan, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_plan failed: %s", query->sql);
}
