/*
 * checkpoint.c
 *		Take and restore checkpoints (checkpoint.h).
 *
 * Epoch E: the keyed stage hands its due rows to the sink and writes its
 * changed state; then one transaction writes the sink rows, the dead
 * letters, the state snapshot's reference (RocksDB: a checkpoint directory
 * made now; memory: the changed keys) and the row of mailer.checkpoints
 * with every partition's position.  Its COMMIT is the commit point: a crash
 * before it replays from E-1, a crash after it from E.  Only then are
 * offsets published to the broker and old snapshots dropped.
 *
 * Design: docs/ARCHITECTURE.md, "The checkpoint transaction".
 */
#include "postgres.h"

#include <malloc.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/mailer.h"
#include "base/test_point.h"
#include "base/work_xact.h"
#include "jobs/catalog.h"
#include "operators/keyed.h"
#include "operators/keyed_state.h"
#include "operators/watermark.h"
#include "runtime/accounting.h"
#include "runtime/checkpoint.h"
#include "runtime/cut_align.h"
#include "runtime/epoch_commit.h"
#include "runtime/shuffle.h"

/*
 * Give the memory the job freed back to the system once more than
 * free_bytes of it lie free: glibc would keep it.  Trimming after every
 * checkpoint also handed back the pages every batch uses again
 * (librdkafka's fetch buffers, the record context), which were then
 * faulted in anew: 15% of a passthrough job's CPU (issue 16).
 */
#define FREE_AFTER_CHECKPOINT	((size_t) 64 * 1024 * 1024)

/*
 * A keyed job's checkpoint frees the rows it emitted and, past its bound,
 * cache entries (all of them for running totals), then runs the sink
 * statement, which takes memory anew, while RocksDB's sort and file
 * thread (started by the state's prepare) runs.  Without a trim between
 * the stage and the sink the worker holds both: at 5M keys the median of
 * its memory samples was 54 MB higher (BENCHMARKS.md, "The worker's
 * memory at 5M keys").  mallinfo2's free bytes count the arenas' tops and
 * what an earlier trim handed back too, so a keyed job trims here at
 * nearly every checkpoint: measured, 2% to 20% more page faults and no
 * change in CPU beyond the rounds' spread.
 */
#define FREE_BEFORE_SINK		((size_t) 8 * 1024 * 1024)

static void
give_back_memory(size_t free_bytes)
{
	struct mallinfo2 mi = mallinfo2();

	if (mi.fordblks > free_bytes)
		malloc_trim(0);
}

/*
 * How long a checkpoint's statements wait for a lock another transaction
 * holds (a user's LOCK TABLE or open UPDATE of the sink table) before the
 * job says it waits, or, past its first step, restarts from its last
 * checkpoint: never blocked for good while it looks healthy.
 */
#define CHECKPOINT_LOCK_TIMEOUT		"3s"

/* One checkpoint being taken. */
typedef struct CheckpointRun
{
	Job		   *job;
	int64		epoch;
	bool		final;
	TimestampTz start;
	TimestampTz watermark;		/* as it was when the checkpoint began */
	double		state_ms;		/* the state's share of the time taken */
	char	   *state_ref;		/* the state snapshot's reference, if any */
	int64		cut_epoch;		/* the barrier cut it is at, 0 none */
	int64	   *retained;		/* a job at barrier cuts: the epochs of its retained checkpoints */
	int			nretained;
} CheckpointRun;

static void counters_from_jsonb(Job *job, Jsonb *counters);
static void checkpoint_begin(Job *job);
static void force_synchronous_commit(void);
static bool bind_sink(Job *job);
static void flush_outputs(CheckpointRun *run);
static void retain_cut_checkpoints(CheckpointRun *run);
static void insert_checkpoint_row(CheckpointRun *run);
static void checkpoint_committed(CheckpointRun *run);

/*
 * A bounded source read to its end: by this worker, or in a parallel job
 * by every subtask (said by subtask 0 with the last epoch).
 */
static bool
input_all_read(Job *job)
{
	if (job->parallelism > 1)
	{
		pg_read_barrier();
		return job->coordinator->final_finished;
	}
	return job->source->ops->finished(job->source);
}

static double
ms_since(TimestampTz start)
{
	return (double) (GetCurrentTimestamp() - start) / 1000.0;
}

/* The columns of restore_rows' statement. */
#define Anum_restore_subtask				1
#define Anum_restore_parallelism			2
#define Anum_restore_counters				3
#define Anum_restore_state_ref				4
#define Anum_restore_watermark				5
#define Anum_restore_state_layout			6
#define Anum_restore_positions				7
#define Anum_restore_partition_watermarks	8
#define Anum_restore_epoch					9
#define Anum_restore_partition_records_in	10

/*
 * What the job's last committed epoch holds for this subtask.  At
 * parallelism P an epoch has a row per subtask; the epoch is committed
 * when subtask 0's row is (docs/ARCHITECTURE.md, "Parallel jobs").  A
 * subtask takes every row's positions and partition watermarks, merged
 * per topic (its source keeps the partitions it owns), the state
 * references of all (a rescaled subtask reads its key groups from each),
 * and the smallest watermark.
 */
typedef struct Restored
{
	int64		epoch;			/* 0: none yet */
	int			parallelism;	/* the epoch's */
	char	  **state_refs;		/* [parallelism] */
	char	   *state_layout;
	TimestampTz watermark;
	Jsonb	   *positions;
	Jsonb	   *partition_watermarks;
	Jsonb	   *partition_records_in;
} Restored;

/* The per-topic merge of one jsonb column over the epoch's rows. */
#define MERGED_BY_TOPIC(col) \
	"(SELECT pg_catalog.jsonb_object_agg(s.t, s.v) FROM (" \
	"  SELECT e.key AS t, pg_catalog.jsonb_object_agg(p.key, p.value) AS v " \
	"    FROM r, pg_catalog.jsonb_each(r." col ") e, " \
	"         pg_catalog.jsonb_each(CASE WHEN pg_catalog.jsonb_typeof(e.value) OPERATOR(pg_catalog.=) 'object' " \
	"                               THEN e.value ELSE '{}' END) p " \
	"   GROUP BY e.key " \
	"  UNION ALL " \
	"  SELECT e.key, e.value FROM r, pg_catalog.jsonb_each(r." col ") e " \
	"   WHERE pg_catalog.jsonb_typeof(e.value) OPERATOR(pg_catalog.<>) 'object') s)"

static void
restore_rows(Job *job, Restored *restored)
{
	Oid			type = INT8OID;
	Datum		value = Int64GetDatum(job->job_id);
	MemoryContext ctx = CurrentMemoryContext;
	bool		sum_counters;

	memset(restored, 0, sizeof(Restored));
	restored->watermark = DT_NOBEGIN;
	restored->parallelism = job->parallelism;
	SPI_connect();
	catalog_exec("WITH r AS (SELECT * FROM " MAILER_SCHEMA ".checkpoints "
				 "  WHERE job_id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.=) "
				 "  (SELECT pg_catalog.max(epoch) FROM " MAILER_SCHEMA ".checkpoints "
				 "    WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) 0)) "
				 "SELECT subtask, parallelism, counters, state_ref, watermark, state_layout, "
				 MERGED_BY_TOPIC("positions") ", " MERGED_BY_TOPIC("partition_watermarks") ", epoch, "
				 MERGED_BY_TOPIC("partition_records_in") " "
				 "FROM r ORDER BY subtask",
				 1, &type, &value, NULL, true);
	if (SPI_processed == 0)
	{
		SPI_finish();
		return;
	}

	MemoryContextSwitchTo(ctx);
	restored->epoch = DatumGetInt64(catalog_value(0, Anum_restore_epoch, NULL));
	restored->parallelism = DatumGetInt32(catalog_value(0, Anum_restore_parallelism, NULL));

	/*
	 * An epoch is whole or not at all: a subtask's row missing would restart
	 * its partitions from the spec's start and count their records twice.
	 */
	for (uint64 i = 0; i < SPI_processed || i < (uint64) restored->parallelism; i++)
		if (i >= SPI_processed || i >= (uint64) restored->parallelism ||
			DatumGetInt32(catalog_value(i, Anum_restore_subtask, NULL)) != (int) i)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("checkpoint " INT64_FORMAT " of job \"%s\" does not have one row per subtask",
							restored->epoch, job->name),
					 errdetail("It was taken at parallelism %d and has %d rows in mailer.checkpoints.",
							   restored->parallelism, (int) SPI_processed),
					 errhint("Rewind the job to an earlier checkpoint with mailer.restore_job.")));
	restored->state_refs = palloc0(sizeof(char *) * Max(restored->parallelism, SPI_processed));
	restored->state_layout = catalog_text(0, Anum_restore_state_layout);
	/* The same at every row: merged over all of them. */
	{
		bool		isnull;
		Datum		d;

		d = catalog_value(0, Anum_restore_positions, &isnull);
		restored->positions = isnull ? NULL : DatumGetJsonbPCopy(d);
		d = catalog_value(0, Anum_restore_partition_watermarks, &isnull);
		restored->partition_watermarks = isnull ? NULL : DatumGetJsonbPCopy(d);
		d = catalog_value(0, Anum_restore_partition_records_in, &isnull);
		restored->partition_records_in = isnull ? NULL : DatumGetJsonbPCopy(d);
	}

	/*
	 * Counters are per subtask; after a rescale, subtask 0 carries on with
	 * the epoch's totals, so that the job's sums stay right.
	 */
	sum_counters = restored->parallelism != job->parallelism;
	memset(job->counters, 0, sizeof(job->counters));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		int			subtask = DatumGetInt32(catalog_value(i, Anum_restore_subtask, NULL));
		bool		isnull;
		TimestampTz wm;

		if (subtask < restored->parallelism)
			restored->state_refs[subtask] = catalog_text(i, Anum_restore_state_ref);
		wm = DatumGetTimestampTz(catalog_value(i, Anum_restore_watermark, &isnull));
		if (!isnull && (i == 0 || wm < restored->watermark))
			restored->watermark = wm;
		else if (isnull)
			restored->watermark = DT_NOBEGIN;
		if (sum_counters ? job->subtask == 0 : subtask == job->subtask)
			counters_from_jsonb(job, DatumGetJsonbP(catalog_value(i, Anum_restore_counters, NULL)));
	}
	SPI_finish();
}

void
checkpoint_restore(Job *job)
{
	Restored	restored;

	restore_rows(job, &restored);
	job->epoch = restored.epoch;
	/* Read the checkpoint, not opened its state yet. */
	TEST_POINT("worker_before_open_state");

	if (job->plan->keyed && job->plan->aggregated)
	{
		TimestampTz open_start = GetCurrentTimestamp();

		/*
		 * The expressions were resolved again by name: state written with
		 * other types must not be read as today's.  The layout also says
		 * the state's format version: state of 0.1.0 is upgraded.
		 */
		int			format = keyed_check_state_layout(job->name, restored.state_layout, job->plan);
		StateOpenArgs args = {
			.job_id = job->job_id,
			.subtask = job->subtask,
			.parallelism = job->parallelism,
			.key_groups = job->key_groups,
			.kg_lo = job->kg_lo,
			.kg_hi = job->kg_hi,
			.epoch = job->epoch,
			.old_parallelism = restored.parallelism,
			.old_refs = restored.state_refs,
			.key_group_of = keyed_state_key_group,
		};

		job->state = job->spec->state_backend == STATE_ROCKSDB ?
			state_rocksdb_open(&args) : state_memory_open(&args);
		keyed_upgrade_state(job->state, format);
		job->slot->state_restore_ms = ms_since(open_start);
	}

	if (job->spec->source.type == SOURCE_GENERATOR)
		job->source = generator_source_open(&job->spec->source.generator, restored.positions,
											job->slot, job->subtask, job->parallelism);
	else if (job->spec->source.type == SOURCE_PULSAR)
		job->source = pulsar_source_open(&job->spec->source.pulsar, restored.positions,
										 restored.partition_records_in, job->slot, job->subtask,
										 job->parallelism);
	else
		job->source = kafka_source_open(&job->spec->source.kafka, job->name, restored.positions,
										restored.partition_records_in, job->slot, job->subtask,
										job->parallelism);

	job->watermarks = watermark_create(job->spec->max_out_of_orderness_us, job->spec->idle_timeout_us);
	/* Each subtask's tracker holds the partitions its source reads. */
	watermark_restore(job->watermarks, job->source, restored.partition_watermarks,
					  restored.watermark,
					  job->parallelism > 1 || restored.parallelism > 1 ?
					  job->source->ops->positions(job->source) : NULL);

	job->last_checkpoint = GetCurrentTimestamp();
	job->slot->last_checkpoint_epoch = job->epoch;
	job_publish_counters(job);
}

bool
checkpoint_take(Job *job, bool final)
{
	CheckpointRun run = {0};

	run.job = job;
	run.epoch = job->epoch + 1;
	run.final = final;
	run.start = GetCurrentTimestamp();
	run.watermark = job->shuffle ? shuffle_watermark(job) : watermark_current(job->watermarks);

	job->stage = "checkpoint";
	checkpoint_begin(job);

	/*
	 * The spec names the sink table: its name is resolved at each
	 * checkpoint.  While it names no table nothing commits, so the rows and
	 * the positions wait for it, and a table made again under the name
	 * receives them.
	 */
	if (!bind_sink(job))
	{
		job->stage = NULL;
		/* The other subtasks cannot wait for this one's table: the run ends. */
		if (job->parallelism > 1)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("subtask %d could not write to the sink table \"%s\"",
							job->subtask, job->spec->sink.table),
					 errdetail("%s", job->slot->error)));
		return false;
	}
	flush_outputs(&run);
	insert_checkpoint_row(&run);
	/* Durable, whatever an expression of the job set meanwhile (set_config). */
	force_synchronous_commit();
	epoch_commit(job, run.epoch);
	checkpoint_committed(&run);
	job->stage = NULL;
	return true;
}

static void
force_synchronous_commit(void)
{
	(void) set_config_option("synchronous_commit", "on", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * The checkpoint's transaction, in which the extension the job belongs to
 * is known to stand until the commit.
 */
static void
checkpoint_begin(Job *job)
{
	work_xact_begin();

	/*
	 * The commit must be durable before the older snapshots are deleted
	 * below, whatever synchronous_commit the owner's role sets: a commit
	 * lost in a crash would leave the job at a deleted snapshot.
	 */
	force_synchronous_commit();
	(void) set_config_option("lock_timeout", CHECKPOINT_LOCK_TIMEOUT, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);

	/*
	 * Job ids start again at 1 when the extension is dropped and created
	 * again: a worker of the old installation must not write into the new
	 * one's tables, where its id may be another job's.  The extension's
	 * lock, held until the commit, keeps a DROP EXTENSION waiting until
	 * then, or shows it done before the check.
	 */
	if (!catalog_lock_extension(job->ext_oid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the mailer extension job \"%s\" belongs to was dropped", job->name),
				 errdetail("The job's worker exits without a last checkpoint.")));
	TEST_POINT("checkpoint_after_ext_check");
}

/*
 * What the epoch commits, written in its transaction: the keyed stage's due
 * rows and changed state, the sink rows, the dead letters and the state's
 * snapshot.
 */
static void
flush_outputs(CheckpointRun *run)
{
	Job		   *job = run->job;
	int64		written;
	int64		rejected;

	/* The state's share of the checkpoint, as mailer.metrics shows it */
	if (job->keyed)
	{
		keyed_prepare_checkpoint(job->keyed);
		if (job->state && job->state->ops->prepare)
			job->state->ops->prepare(job->state, run->epoch);
		run->state_ms = ms_since(run->start);
		give_back_memory(FREE_BEFORE_SINK);
	}
	written = sink_buffer_flush(job->sink, job->dead_letters, job->spec->on_error,
								run->final && input_all_read(job), run->epoch, &rejected);
	job->counters[JC_RECORDS_OUT] += written;
	if (!job->plan->aggregated)
	{
		/* Each row is a record: one the table refused was not accepted after all. */
		job->counters[JC_RECORDS_ACCEPTED] -= rejected;
		job->counters[job->spec->on_error == ON_ERROR_SKIP ?
					  JC_RECORDS_SKIPPED : JC_RECORDS_DEAD_LETTERED] += rejected;
	}
	dead_letter_flush(job->dead_letters, job->job_id, run->epoch);
	if (job->state)
	{
		TimestampTz snapshot_start = GetCurrentTimestamp();

		run->state_ref = job->state->ops->checkpoint(job->state, run->epoch, run->final);
		run->state_ms += ms_since(snapshot_start);
	}
	job->counters[JC_CHECKPOINTS]++;
}

/*
 * The row of mailer.checkpoints that makes the epoch restorable, and the
 * end of those past checkpoint.retain.
 */
static void
insert_checkpoint_row(CheckpointRun *run)
{
	Job		   *job = run->job;
	Oid			types[14] = {INT8OID, INT8OID, JSONBOID, TEXTOID, JSONBOID, FLOAT8OID, BOOLOID,
	TIMESTAMPTZOID, JSONBOID, TEXTOID, INT4OID, INT4OID, JSONBOID, INT8OID};
	Datum		values[14];
	char		nulls[14] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	char	   *state_layout;

	SPI_connect();
	/* Before the counters are stored: a cut's checkpoint counts it. */
	run->cut_epoch = cut_align_record(job, run->epoch);
	values[0] = Int64GetDatum(job->job_id);
	values[1] = Int64GetDatum(run->epoch);
	values[2] = JsonbPGetDatum(job->source->ops->positions(job->source));
	values[3] = run->state_ref ? CStringGetTextDatum(run->state_ref) : (Datum) 0;
	nulls[3] = run->state_ref ? ' ' : 'n';
	values[4] = job_counters_jsonb(job->counters);
	values[5] = Float8GetDatum(ms_since(run->start));
	values[6] = BoolGetDatum(run->final);
	values[7] = TimestampTzGetDatum(run->watermark);
	nulls[7] = TIMESTAMP_NOT_FINITE(run->watermark) ? 'n' : ' ';
	values[8] = JsonbPGetDatum(watermark_save(job->watermarks, job->source));
	state_layout = keyed_state_layout(job->plan);
	values[9] = state_layout ? CStringGetTextDatum(state_layout) : (Datum) 0;
	nulls[9] = state_layout ? ' ' : 'n';
	values[10] = Int32GetDatum(job->subtask);
	values[11] = Int32GetDatum(job->parallelism);
	if (job->source->ops->records_in)
		values[12] = JsonbPGetDatum(job->source->ops->records_in(job->source));
	else
		nulls[12] = 'n';
	values[13] = Int64GetDatum(run->cut_epoch);
	nulls[13] = run->cut_epoch ? ' ' : 'n';

	catalog_exec("INSERT INTO " MAILER_SCHEMA ".checkpoints (job_id, epoch, positions, state_ref, "
				 "counters, duration_ms, final, watermark, partition_watermarks, state_layout, "
				 "subtask, parallelism, partition_records_in, cut_epoch) "
				 "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
				 14, types, values, nulls, false);

	/*
	 * Only the newest checkpoint.retain checkpoints stay restorable.  Each
	 * subtask deletes its own rows, so that no two subtasks' transactions
	 * touch the same row (one of them is prepared, and would hold the
	 * other until the epoch commits); subtask 0 also deletes the rows of
	 * subtasks a rescale left behind.  A job at barrier cuts keeps the
	 * newest checkpoint.retain_cuts at cuts apart.
	 */
	if (job->cut_align)
		retain_cut_checkpoints(run);
	else
	{
		values[1] = Int64GetDatum(run->epoch - job->spec->checkpoint_retain);
		catalog_exec("DELETE FROM " MAILER_SCHEMA ".checkpoints WHERE job_id OPERATOR(pg_catalog.=) $1 "
					 "AND epoch OPERATOR(pg_catalog.<=) $2 AND (subtask OPERATOR(pg_catalog.=) $11 "
					 "  OR ($11 OPERATOR(pg_catalog.=) 0 AND subtask OPERATOR(pg_catalog.>=) $12))",
					 12, types, values, nulls, false);
	}
	/*
	 * A bounded source's last checkpoint: the job is finished as soon as it
	 * commits, so mailer.jobs says so before wait_job returns, not only once
	 * the launcher has seen the worker exit.  A sink that publishes after
	 * the commit (Kafka) is finished once it has: the launcher says so.
	 */
	if (run->final && job->subtask == 0 && input_all_read(job) && !sink_buffer_publishes(job->sink))
		catalog_exec("UPDATE " MAILER_SCHEMA ".job_status SET state = 'finished', pid = NULL, "
					 "changed_at = pg_catalog.now() WHERE job_id OPERATOR(pg_catalog.=) $1",
					 1, types, values, NULL, false);
	SPI_finish();
}

/*
 * A job at barrier cuts keeps two sets of checkpoints: the newest
 * checkpoint.retain_cuts taken at cuts, and the newest checkpoint.retain
 * of the others.  The state keeps the snapshots of both (run->retained).
 */
static void
retain_cut_checkpoints(CheckpointRun *run)
{
	Oid			types[7] = {INT8OID, INT8OID, INT4OID, INT4OID, INT4OID, INT4OID, BOOLOID};
	Datum		values[7];
	ArrayType  *kept;
	Datum	   *epochs;

	values[0] = Int64GetDatum(run->job->job_id);
	values[1] = Int64GetDatum(run->epoch);
	values[2] = Int32GetDatum(run->job->spec->checkpoint_retain);
	values[3] = Int32GetDatum(run->job->spec->checkpoint_retain_cuts);
	values[4] = Int32GetDatum(run->job->subtask);
	values[5] = Int32GetDatum(run->job->parallelism);
	values[6] = BoolGetDatum(run->cut_epoch != 0);

	/*
	 * The epochs the job keeps, judged by subtask 0's rows (the epochs'
	 * decisions; this epoch's is not visible to the other subtasks yet):
	 * every subtask keeps the same ones, and its state keeps their
	 * snapshots even where it has no row of its own (a subtask a rescale
	 * added shares key groups' memory-state undo with older epochs).
	 */
	catalog_exec("WITH e AS (SELECT epoch, cut_epoch IS NOT NULL AS at_cut FROM " MAILER_SCHEMA ".checkpoints "
				 "  WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) 0 "
				 "  AND epoch OPERATOR(pg_catalog.<) $2 UNION ALL SELECT $2, $7) "
				 "SELECT pg_catalog.array_agg(epoch ORDER BY epoch) FROM ("
				 "  (SELECT epoch FROM e WHERE NOT at_cut ORDER BY epoch DESC LIMIT $3) UNION "
				 "  (SELECT epoch FROM e WHERE at_cut ORDER BY epoch DESC LIMIT $4)) k",
				 7, types, values, NULL, true);
	kept = DatumGetArrayTypePCopy(catalog_value(0, 1, NULL));
	deconstruct_array(kept, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &epochs, NULL, &run->nretained);
	run->retained = MemoryContextAlloc(run->job->job_context, sizeof(int64) * Max(run->nretained, 1));
	for (int i = 0; i < run->nretained; i++)
		run->retained[i] = DatumGetInt64(epochs[i]);

	/*
	 * Each subtask deletes its own rows (and subtask 0 those of subtasks a
	 * rescale retired), so that no two subtasks' transactions touch a row.
	 */
	values[1] = PointerGetDatum(kept);
	types[1] = INT8ARRAYOID;
	values[2] = Int64GetDatum(run->epoch);
	types[2] = INT8OID;
	catalog_exec("DELETE FROM " MAILER_SCHEMA ".checkpoints WHERE job_id OPERATOR(pg_catalog.=) $1 "
				 "AND epoch OPERATOR(pg_catalog.<) $3 AND epoch OPERATOR(pg_catalog.<>) ALL ($2) "
				 "AND (subtask OPERATOR(pg_catalog.=) $5 "
				 "  OR ($5 OPERATOR(pg_catalog.=) 0 AND subtask OPERATOR(pg_catalog.>=) $6))",
				 6, types, values, NULL, false);
}

/*
 * Committed: the epoch is what a restart resumes from.  Only now may the
 * state drop its older snapshots and the source publish its offsets.
 */
static void
checkpoint_committed(CheckpointRun *run)
{
	Job		   *job = run->job;
	TimestampTz committed_at = GetCurrentTimestamp();

	job->epoch = run->epoch;
	job->uncommitted = 0;
	if (job->state)
	{
		TimestampTz release_start = GetCurrentTimestamp();

		job->state->ops->committed(job->state, run->epoch,
								   run->retained ? run->epoch : run->epoch - job->spec->checkpoint_retain + 1,
								   run->retained, run->nretained);
		run->state_ms += ms_since(release_start);
	}
	if (run->retained)
		pfree(run->retained);
	job->source->ops->committed(job->source);
	cut_align_committed(job);
	/* Committed, and the snapshots it replaced removed. */
	TEST_POINT("checkpoint_after_commit");
	job->publish_pending = true;
	checkpoint_publish(job);

	give_back_memory(FREE_AFTER_CHECKPOINT);

	job->last_checkpoint = GetCurrentTimestamp();
	job->slot->last_checkpoint_epoch = run->epoch;
	job->slot->last_checkpoint_at = job->last_checkpoint;
	job->slot->last_checkpoint_ms = (job->last_checkpoint - run->start) / 1000;
	job_histogram_observe(&job->slot->checkpoint_duration,
						  (double) (job->last_checkpoint - run->start) / USECS_PER_SEC, 1);
	/* The records' commit, before the offsets and any output were handed on. */
	produce_latency_commit(&job->produce_latency, &job->slot->produce_to_commit, committed_at);
	job->slot->state_bytes = job->state ? job->state->ops->size(job->state) : -1;
	job->slot->state_checkpoint_ms = job->state ? run->state_ms : -1;
	job_publish_counters(job);
}

#define PUBLISH_RETRY_MS 1000
#define PUBLISH_RETRY_MAX_MS 30000

bool
checkpoint_publish(Job *job)
{
	char	   *error;

	TimestampTz now = GetCurrentTimestamp();

	if (!job->publish_pending)
		return true;
	/* A failed attempt is tried again a second later, not at every round. */
	if (now < job->publish_retry_at)
		return false;
	if (!sink_buffer_publish(job->sink, &error))
	{
		/*
		 * An attempt may wait for the broker up to a few seconds: while it
		 * stays away, try less often (a parallel job's subtask 0 also runs
		 * the epochs' rounds).
		 */
		job_slot_set_waiting(job->slot, JOB_WAIT_BROKER, error);
		job->publish_failures++;
		job->publish_retry_at = TimestampTzPlusMilliseconds(now,
															Min(PUBLISH_RETRY_MS << Min(job->publish_failures - 1, 5),
																PUBLISH_RETRY_MAX_MS));
		return false;
	}
	job->publish_pending = false;
	job->publish_retry_at = 0;
	job->publish_failures = 0;
	return true;
}

/*
 * Resolve the sink table's name and lock the table for the checkpoint's
 * writes (sink_buffer_bind).  The first thing the checkpoint does, before
 * it takes rows from the buffers.  False, the transaction ended and the job
 * waiting, keeping everything it holds: no table has the name, or another
 * transaction holds the table past lock_timeout.
 */
static bool
bind_sink(Job *job)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool bound = false;
	ErrorData  *volatile busy = NULL;

	PG_TRY();
	{
		bound = sink_buffer_bind(job->sink, job->plan);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		if (geterrcode() != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		busy = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
	if (busy)
	{
		work_xact_abort();
		job_slot_set_waiting(job->slot, JOB_WAIT_LOCK,
							 psprintf("waiting for a lock on the sink table \"%s\": another transaction holds it (%s)",
									  job->spec->sink.table, busy->message));
		FreeErrorData(busy);
		return false;
	}
	if (!bound)
	{
		work_xact_end();
		job_slot_set_waiting(job->slot, JOB_WAIT_TABLE,
							 psprintf("waiting for the sink table: table \"%s\" does not exist",
									  job->spec->sink.table));
	}
	return bound;
}

/* Add a checkpoint row's counters to the job's: those a restart carries over. */
static void
counters_from_jsonb(Job *job, Jsonb *counters)
{
	for (int c = 0; c < JC_FIRST_LIVE; c++)
	{
		JsonbValue *v = getKeyJsonValueFromContainer(&counters->root, job_counter_names[c],
													 strlen(job_counter_names[c]), NULL);

		if (v && v->type == jbvNumeric)
			job->counters[c] += DatumGetInt64(DirectFunctionCall1(numeric_int8,
																 NumericGetDatum(v->val.numeric)));
	}
}
