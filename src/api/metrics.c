/*
 * metrics.c
 *		The live half of mailer.jobs, mailer.metrics,
 *		mailer.partition_metrics and mailer.subtasks: what running workers
 *		keep in shared memory.
 *
 * A parallel job has a slot per subtask.  The views show a job as one row
 * whatever its parallelism: the coordinator's (subtask 0's) slot speaks for
 * the job, with the counters, rate, lag and state size summed over the
 * subtasks and the least of their watermarks (docs/ARCHITECTURE.md,
 * "Parallel jobs").
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
#include "jobs/job_view.h"

PG_FUNCTION_INFO_V1(mailer_live_jobs);
PG_FUNCTION_INFO_V1(mailer_live_partitions);

/* The columns of mailer._live_jobs (OUT parameters, in order). */
#define Anum_live_job_id				1
#define Anum_live_live_state			2
#define Anum_live_pid					3
#define Anum_live_error					4
#define Anum_live_error_at				5
#define Anum_live_counters				6
#define Anum_live_input_rate			7
#define Anum_live_last_checkpoint_epoch 8
#define Anum_live_last_checkpoint_at	9
#define Anum_live_last_checkpoint_ms	10
#define Anum_live_watermark				11
#define Anum_live_state_bytes			12
#define Anum_live_consumer_lag			13
#define Anum_live_state_checkpoint_ms	14
#define Anum_live_state_restore_ms		15
#define Anum_live_waiting_for			16
#define Natts_live_jobs					16
#define Anum_live_subtask				17	/* 0.2.0 on */
#define Natts_live_jobs_subtask			17

/* The columns of mailer._live_partitions; those of 0.1.0 first, in its order. */
#define Anum_live_partition_job_id		1
#define Anum_live_partition_topic		2
#define Anum_live_partition_partition	3
#define Anum_live_partition_position	4
#define Anum_live_partition_end_offset	5
#define Anum_live_partition_records_in	6
#define Anum_live_partition_watermark	7
#define Anum_live_partition_idle		8
#define Anum_live_partition_offsets_skipped 9
#define Anum_live_partition_subtask		10
#define Anum_live_partition_ahead		11
#define Natts_live_partitions			11


/* The columns of jobs_of_caller's statement. */
#define Anum_caller_job_id				1
#define Anum_caller_owner				2

/* A column's value (or null) in a row being built: by attribute number. */
#define SET_COLUMN(values, nulls, anum, datum, isnull) \
	do { \
		(values)[(anum) - 1] = (datum); \
		(nulls)[(anum) - 1] = (isnull); \
	} while (0)

/* The jobs whose live error the caller may see. */
typedef struct VisibleJobs
{
	bool		all;			/* a superuser's: every job */
	int			n;
	int64	   *ids;			/* sorted */
} VisibleJobs;

static void jobs_of_caller(VisibleJobs *visible);
static bool job_visible(int64 job_id, const VisibleJobs *visible);
static void add_partition_rows(ReturnSetInfo *rsinfo, JobSlot *slot);

/*
 * The jobs whose owner the caller has the privileges of: the live error of
 * others (it may quote a record) is masked, as mailer.jobs masks
 * last_error.  Read before taking the slots' lock: no SPI under an LWLock.
 * A job created since is masked.
 */
static void
jobs_of_caller(VisibleJobs *visible)
{
	MemoryContext ctx = CurrentMemoryContext;

	visible->all = superuser();
	visible->n = 0;
	visible->ids = NULL;
	if (visible->all)
		return;
	SPI_connect();
	catalog_exec("SELECT job_id, owner::pg_catalog.oid FROM mailer.job ORDER BY job_id",
				 0, NULL, NULL, NULL, true);
	visible->ids = MemoryContextAlloc(ctx, sizeof(int64) * (SPI_processed + 1));
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		Oid			owner = DatumGetObjectId(catalog_value(r, Anum_caller_owner, NULL));

		if (has_privs_of_role(GetUserId(), owner))
			visible->ids[visible->n++] = DatumGetInt64(catalog_value(r, Anum_caller_job_id, NULL));
	}
	SPI_finish();
}

static int
compare_job_ids(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : x > y;
}

static bool
job_visible(int64 job_id, const VisibleJobs *visible)
{
	return visible->all ||
		bsearch(&job_id, visible->ids, visible->n, sizeof(int64), compare_job_ids) != NULL;
}

/* A row of _live_jobs of a job, or of a subtask. */
static void
put_live_row(Datum *values, bool *nulls, const JobView *v, const VisibleJobs *visible)
{
	bool		no_checkpoint = v->last_checkpoint_epoch == 0;

	SET_COLUMN(values, nulls, Anum_live_job_id, Int64GetDatum(v->job_id), false);
	if (v->live)
		SET_COLUMN(values, nulls, Anum_live_live_state,
				   CStringGetTextDatum(job_state_name((JobState) v->live_state)), false);
	else
		SET_COLUMN(values, nulls, Anum_live_live_state, (Datum) 0, true);
	SET_COLUMN(values, nulls, Anum_live_pid, Int32GetDatum(v->pid), v->pid == 0);
	SET_COLUMN(values, nulls, Anum_live_error,
			   CStringGetTextDatum(job_visible(v->job_id, visible) ?
								   v->error : "<insufficient privilege>"),
			   v->no_error);
	SET_COLUMN(values, nulls, Anum_live_error_at, TimestampTzGetDatum(v->error_at), v->no_error);
	SET_COLUMN(values, nulls, Anum_live_counters, job_counters_jsonb(v->counters), false);
	SET_COLUMN(values, nulls, Anum_live_input_rate, Float8GetDatum(v->input_rate), false);
	SET_COLUMN(values, nulls, Anum_live_last_checkpoint_epoch,
			   Int64GetDatum(v->last_checkpoint_epoch), no_checkpoint);
	SET_COLUMN(values, nulls, Anum_live_last_checkpoint_at,
			   TimestampTzGetDatum(v->last_checkpoint_at), no_checkpoint);
	SET_COLUMN(values, nulls, Anum_live_last_checkpoint_ms,
			   Int64GetDatum(v->last_checkpoint_ms), no_checkpoint);
	SET_COLUMN(values, nulls, Anum_live_watermark, TimestampTzGetDatum(v->watermark),
			   TIMESTAMP_NOT_FINITE(v->watermark));
	SET_COLUMN(values, nulls, Anum_live_state_bytes, Int64GetDatum(v->state_bytes),
			   v->state_bytes < 0);
	SET_COLUMN(values, nulls, Anum_live_consumer_lag, Int64GetDatum(v->consumer_lag),
			   v->consumer_lag < 0);
	SET_COLUMN(values, nulls, Anum_live_state_checkpoint_ms,
			   Float8GetDatum(v->state_checkpoint_ms), v->state_checkpoint_ms < 0);
	SET_COLUMN(values, nulls, Anum_live_state_restore_ms,
			   Float8GetDatum(v->state_restore_ms), v->state_restore_ms < 0);
	/* What it waits for, only while it does */
	if (v->live && v->live_state == JOB_LIVE_WAITING && v->waiting_for != JOB_WAIT_NONE)
		SET_COLUMN(values, nulls, Anum_live_waiting_for,
				   CStringGetTextDatum(job_wait_for_names[v->waiting_for]), false);
	else
		SET_COLUMN(values, nulls, Anum_live_waiting_for, (Datum) 0, true);
	SET_COLUMN(values, nulls, Anum_live_subtask, Int32GetDatum(v->subtask), false);
}

/*
 * mailer._live_jobs(per_subtask): a row per job, or with per_subtask a row
 * per subtask with a live worker (mailer.subtasks).  The catalog of 0.1.0
 * declares it without the argument, and without the later columns.
 */
Datum
mailer_live_jobs(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		per_subtask = PG_NARGS() > 0 && PG_GETARG_BOOL(0);
	Oid			ext_oid = get_extension_oid(MAILER_EXTENSION, false);
	VisibleJobs visible;
	JobSlot    *coordinator;
	int			pos = -1;
	JobView   *v = palloc(sizeof(JobView));
	JobView   *sub = palloc(sizeof(JobView));

	InitMaterializedSRF(fcinfo, 0);
	if (mailer_shared == NULL)
		return (Datum) 0;

	jobs_of_caller(&visible);
	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	while ((coordinator = job_slots_next(ext_oid, &pos)) != NULL)
	{
		Datum		values[Natts_live_jobs_subtask] = {0};
		bool		nulls[Natts_live_jobs_subtask] = {0};

		job_view_read(coordinator, v);
		for (int k = per_subtask ? 0 : 1; k < coordinator->parallelism; k++)
		{
			JobSlot    *slot = job_slots_subtask(coordinator, k);

			if (slot == NULL)
				continue;
			job_view_read(slot, sub);
			if (!per_subtask)
				job_view_add_subtask(v, sub);
			else if (sub->live)
			{
				put_live_row(values, nulls, sub, &visible);
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
			}
		}
		if (!per_subtask)
		{
			put_live_row(values, nulls, v, &visible);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	LWLockRelease(mailer_shared->lock);
	return (Datum) 0;
}


Datum
mailer_live_partitions(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			ext_oid = get_extension_oid(MAILER_EXTENSION, false);
	JobSlot    *coordinator;
	int			pos = -1;

	InitMaterializedSRF(fcinfo, 0);
	if (mailer_shared == NULL)
		return (Datum) 0;

	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	while ((coordinator = job_slots_next(ext_oid, &pos)) != NULL)
	{
		for (int k = 0; k < coordinator->parallelism; k++)
		{
			JobSlot    *slot = job_slots_subtask(coordinator, k);

			if (slot == NULL || slot->pid == 0)
				continue;
			add_partition_rows(rsinfo, slot);
		}
	}
	LWLockRelease(mailer_shared->lock);
	return (Datum) 0;
}

/* The rows of _live_partitions of one subtask's slot. */
static void
add_partition_rows(ReturnSetInfo *rsinfo, JobSlot *slot)
{
	for (int p = 0; p < slot->npartitions && p < JOB_SLOT_MAX_PARTITIONS; p++)
	{
		PartitionMetrics *pm = &slot->partitions[p];
		Datum		values[Natts_live_partitions] = {0};
		bool		nulls[Natts_live_partitions] = {0};

		SET_COLUMN(values, nulls, Anum_live_partition_job_id, Int64GetDatum(slot->job_id), false);
		SET_COLUMN(values, nulls, Anum_live_partition_topic, CStringGetTextDatum(pm->topic), false);
		SET_COLUMN(values, nulls, Anum_live_partition_partition, Int32GetDatum(pm->partition), false);
		SET_COLUMN(values, nulls, Anum_live_partition_position, Int64GetDatum(pm->position),
				   pm->position < 0);
		SET_COLUMN(values, nulls, Anum_live_partition_end_offset, Int64GetDatum(pm->end_offset),
				   pm->end_offset < 0);
		SET_COLUMN(values, nulls, Anum_live_partition_records_in, Int64GetDatum(pm->records_in),
				   false);
		SET_COLUMN(values, nulls, Anum_live_partition_watermark, TimestampTzGetDatum(pm->watermark),
				   TIMESTAMP_NOT_FINITE(pm->watermark));
		SET_COLUMN(values, nulls, Anum_live_partition_idle, BoolGetDatum(pm->idle), false);
		/* Read only where the SQL function declares them (0.2.0 on). */
		SET_COLUMN(values, nulls, Anum_live_partition_offsets_skipped,
				   Int64GetDatum(pm->offsets_skipped), false);
		SET_COLUMN(values, nulls, Anum_live_partition_subtask, Int32GetDatum(slot->subtask), false);
		SET_COLUMN(values, nulls, Anum_live_partition_ahead, BoolGetDatum(pm->ahead), false);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}
