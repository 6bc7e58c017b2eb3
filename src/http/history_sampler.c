/*
 * history_sampler.c
 *		Once a second, the jobs' history ring takes a sample of every job
 *		(jobs/job_history).  The slots do not know how often the launcher
 *		restarted a job, so the catalog's counts are passed in first.
 */
#include "postgres.h"

#include "commands/extension.h"
#include "executor/spi.h"
#include "utils/memutils.h"

#include "base/mailer.h"
#include "http/history_sampler.h"
#include "http/http_xact.h"
#include "jobs/job_history.h"

#define RESTARTS_SQL "SELECT job_id, restarts FROM mailer.job_status"
#define Anum_restarts_job_id	1
#define Anum_restarts_restarts	2

static MemoryContext sampler_context;
static HttpQuery restarts_query = {RESTARTS_SQL};

static void
note_restarts(void *arg)
{
	Oid			ext_oid = get_extension_oid(MAILER_EXTENSION, true);

	if (!OidIsValid(ext_oid))
		return;
	SPI_connect();
	http_query_run(&restarts_query, NULL);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		HeapTuple	row = SPI_tuptable->vals[r];
		int64		job_id = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc,
														 Anum_restarts_job_id, &isnull));
		Datum		restarts = SPI_getbinval(row, SPI_tuptable->tupdesc,
											 Anum_restarts_restarts, &isnull);

		job_history_note_restarts(ext_oid, job_id, isnull ? 0 : DatumGetInt32(restarts));
	}
	SPI_finish();
}

void
history_sampler_tick(TimestampTz now)
{
	MemoryContext old;

	if (sampler_context == NULL)
		sampler_context = AllocSetContextCreate(TopMemoryContext, "mailer http sampler",
												ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(sampler_context);
	/* On an error (logged), the samples keep the counts last noted. */
	(void) http_xact_run(note_restarts, NULL, "reading the jobs' restart counts");
	job_history_sample(now);
	MemoryContextSwitchTo(old);
	MemoryContextReset(sampler_context);
}
