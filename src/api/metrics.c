/*
 * metrics.c
 *		The live half of mailer.jobs, mailer.metrics and
 *		mailer.partition_metrics: what running workers keep in shared memory.
 */
#include "postgres.h"

#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/tuplestore.h"

#include "base/mailer.h"
#include "jobs/catalog.h"
#include "jobs/job_slots.h"

PG_FUNCTION_INFO_V1(mailer_live_jobs);
PG_FUNCTION_INFO_V1(mailer_live_partitions);

static const char *const live_state_names[] = {NULL, "starting", "running", "waiting", "finished"};

static int64 *jobs_of_caller(int *n);
static bool job_in(int64 job_id, int64 *jobs, int n);

/*
 * The jobs whose owner the caller has the privileges of (n -1: all): the
 * live error of others (it may quote a record) is masked, as mailer.jobs
 * masks last_error.  Read before taking the slots' lock: no SPI under an
 * LWLock.  A job created since is masked.
 */
static int64 *
jobs_of_caller(int *n)
{
	MemoryContext ctx = CurrentMemoryContext;
	int64	   *jobs = NULL;

	*n = -1;
	if (superuser())
		return NULL;
	*n = 0;
	SPI_connect();
	catalog_exec("SELECT job_id, owner::pg_catalog.oid FROM mailer.job", 0, NULL, NULL, NULL, true);
	jobs = MemoryContextAlloc(ctx, sizeof(int64) * (SPI_processed + 1));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		HeapTuple	tup = SPI_tuptable->vals[i];
		Oid			owner = DatumGetObjectId(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull));

		if (has_privs_of_role(GetUserId(), owner))
			jobs[(*n)++] = DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_finish();
	return jobs;
}

static bool
job_in(int64 job_id, int64 *jobs, int n)
{
	if (n < 0)
		return true;
	for (int i = 0; i < n; i++)
		if (jobs[i] == job_id)
			return true;
	return false;
}

Datum
mailer_live_jobs(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			ext_oid = get_extension_oid("mailer", false);
	int			nvisible;
	int64	   *visible;

	InitMaterializedSRF(fcinfo, 0);
	if (mailer_shared == NULL)
		return (Datum) 0;

	visible = jobs_of_caller(&nvisible);
	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	for (int i = 0; i < mailer_shared->nslots; i++)
	{
		JobSlot    *slot = &mailer_shared->slots[i];
		Datum		values[16];
		bool		nulls[16] = {0};
		uint64		counters[JC_NUM_COUNTERS];
		JobSlot		copy;

		/* Free, or a worker of a dropped installation of mailer. */
		if (slot->job_id == 0 || slot->ext_oid != ext_oid)
			continue;
		SpinLockAcquire(&slot->mutex);
		memcpy(&copy, slot, offsetof(JobSlot, counters));
		SpinLockRelease(&slot->mutex);
		for (int c = 0; c < JC_NUM_COUNTERS; c++)
			counters[c] = pg_atomic_read_u64(&slot->counters[c]);

		values[0] = Int64GetDatum(copy.job_id);
		/* A finished worker may be gone before the launcher records it. */
		if (copy.live_state != JOB_LIVE_NONE && (copy.pid != 0 || copy.live_state == JOB_LIVE_FINISHED))
			values[1] = CStringGetTextDatum(live_state_names[copy.live_state]);
		else
			nulls[1] = true;
		values[2] = Int32GetDatum(copy.pid);
		nulls[2] = copy.pid == 0;
		values[3] = CStringGetTextDatum(job_in(copy.job_id, visible, nvisible) ?
										copy.error : "<insufficient privilege>");
		/* A worker's last error (it may quote a record) is the launcher's to record. */
		nulls[3] = copy.error[0] == '\0' || copy.pid == 0 || copy.exit_kind != JOB_EXIT_NONE;
		values[4] = TimestampTzGetDatum(copy.error_at);
		nulls[4] = nulls[3];
		values[5] = job_counters_jsonb(counters);
		values[6] = Float8GetDatum(slot->input_rate);
		values[7] = Int64GetDatum(slot->last_checkpoint_epoch);
		nulls[7] = slot->last_checkpoint_epoch == 0;
		values[8] = TimestampTzGetDatum(slot->last_checkpoint_at);
		nulls[8] = nulls[7];
		values[9] = Int64GetDatum(slot->last_checkpoint_ms);
		nulls[9] = nulls[7];
		values[10] = TimestampTzGetDatum(slot->watermark);
		nulls[10] = TIMESTAMP_NOT_FINITE(slot->watermark);
		values[11] = Int64GetDatum(slot->state_bytes);
		nulls[11] = slot->state_bytes < 0;
		values[12] = Int64GetDatum(slot->consumer_lag);
		nulls[12] = slot->consumer_lag < 0;
		values[13] = Float8GetDatum(slot->state_checkpoint_ms);
		nulls[13] = slot->state_checkpoint_ms < 0;
		values[14] = Float8GetDatum(slot->state_restore_ms);
		nulls[14] = slot->state_restore_ms < 0;
		/* What it waits for, only while it does */
		nulls[15] = nulls[1] || copy.live_state != JOB_LIVE_WAITING ||
			copy.waiting_for == JOB_WAIT_NONE;
		if (!nulls[15])
			values[15] = CStringGetTextDatum(job_wait_for_names[copy.waiting_for]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(mailer_shared->lock);
	return (Datum) 0;
}

Datum
mailer_live_partitions(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			ext_oid = get_extension_oid("mailer", false);

	InitMaterializedSRF(fcinfo, 0);
	if (mailer_shared == NULL)
		return (Datum) 0;

	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	for (int i = 0; i < mailer_shared->nslots; i++)
	{
		JobSlot    *slot = &mailer_shared->slots[i];

		if (slot->job_id == 0 || slot->ext_oid != ext_oid || slot->pid == 0)
			continue;
		for (int p = 0; p < slot->npartitions && p < JOB_SLOT_MAX_PARTITIONS; p++)
		{
			PartitionMetrics *pm = &slot->partitions[p];
			Datum		values[9];
			bool		nulls[9] = {0};

			values[0] = Int64GetDatum(slot->job_id);
			values[1] = CStringGetTextDatum(pm->topic);
			values[2] = Int32GetDatum(pm->partition);
			values[3] = Int64GetDatum(pm->position);
			nulls[3] = pm->position < 0;
			values[4] = Int64GetDatum(pm->end_offset);
			nulls[4] = pm->end_offset < 0;
			values[5] = Int64GetDatum(pm->records_in);
			values[6] = TimestampTzGetDatum(pm->watermark);
			nulls[6] = TIMESTAMP_NOT_FINITE(pm->watermark);
			values[7] = BoolGetDatum(pm->idle);
			/* Read only where the SQL function declares it (0.2.0 on). */
			values[8] = Int64GetDatum(pm->offsets_skipped);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	LWLockRelease(mailer_shared->lock);
	return (Datum) 0;
}
