/*
 * metrics.c
 *		The live half of mailer.jobs, mailer.metrics and
 *		mailer.partition_metrics: what running workers keep in shared memory.
 */
#include "postgres.h"

#include "commands/extension.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/tuplestore.h"

#include "mailer.h"
#include "job_slots.h"

PG_FUNCTION_INFO_V1(mailer_live_jobs);
PG_FUNCTION_INFO_V1(mailer_live_partitions);

static const char *const live_state_names[] = {NULL, "starting", "running", "waiting", "finished"};

Datum
mailer_live_jobs(PG_FUNCTION_ARGS)
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
		Datum		values[15];
		bool		nulls[15] = {0};
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
		values[3] = CStringGetTextDatum(copy.error);
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
