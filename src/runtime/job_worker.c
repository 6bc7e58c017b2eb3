/*
 * job_worker.c
 *		The worker that runs one job: the background worker's entry, which
 *		claims the job's slot, connects, locks the job and starts it
 *		(restores its last checkpoint), then hands it to the batch loop
 *		(batch_loop.c) until it is stopped or, for a bounded source,
 *		finished.
 *
 * It connects as the job's owner, so every expression and every write to
 * the sink obeys that role's privileges and row-level security; only its
 * writes to mailer's own tables switch to the catalog's writer.  On a stop
 * request, or a SIGTERM while it waits for input, it takes a final
 * checkpoint and exits 0.  A SIGTERM while it works (a batch, a checkpoint)
 * gives that work mailer.termination_grace to end, and the final checkpoint
 * after it as long again (termination.c); past that, or at a second SIGTERM,
 * it is cancelled as a backend's statement is (die), the transaction rolls
 * back and the worker exits: the job resumes from its last checkpoint.  On
 * ERROR it leaves the error in its slot and exits non-zero; the launcher
 * restarts it.
 *
 * At most one worker runs a job: a worker claims its slot only for the
 * start the launcher made (the slot's generation), and takes the job's lock
 * (job_lock_try) before it reads the job's checkpoint, state or source; a
 * worker that cannot exits at once.
 *
 * Design: docs/ARCHITECTURE.md, "Job workers".
 */
#include "postgres.h"

#include <malloc.h>

#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/mailer.h"
#include "base/test_point.h"
#include "base/work_xact.h"
#include "jobs/catalog.h"
#include "operators/keyed.h"
#include "operators/watermark.h"
#include "base/key_groups.h"
#include "runtime/batch_loop.h"
#include "runtime/epoch_commit.h"
#include "runtime/exchange.h"
#include "runtime/shuffle.h"
#include "runtime/subtasks.h"
#include "runtime/checkpoint.h"
#include "runtime/cut_align.h"
#include "runtime/job.h"
#include "runtime/job_worker.h"
#include "runtime/termination.h"

/* While the worker connects: where a FATAL (say, owner cannot log in) is told. */
static JobSlot *connecting_slot = NULL;
static emit_log_hook_type prev_emit_log_hook = NULL;

static void keep_memory(void);
static void claim_slot(JobWorkerArgs *args, JobSlot *slot);
static void connect_as_owner(JobWorkerArgs *args, JobSlot *slot);
static void record_connection_error(ErrorData *edata);
static void lock_job(JobWorkerArgs *args, JobSlot *slot);
static void record_error(JobSlot *slot, Job *job);
static void worker_exit(int code, Datum arg);
static Job *job_start(JobWorkerArgs *args, JobSlot *slot);
static void start_parallel(JobWorkerArgs *args, Job *job);
static void wait_for_sink_table(Job *job);
static void set_live_state(JobSlot *slot, JobLiveState state);

void
job_worker_main(Datum main_arg)
{
	JobWorkerArgs args;
	JobSlot    *slot;
	Job		   *volatile job = NULL;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	slot = &mailer_shared->slots[args.slot];
	keep_memory();

	termination_install_handler();
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	/*
	 * A background worker ignores SIGHUP from its fork until the line
	 * above: a reload the postmaster signalled meanwhile is lost.  Read the
	 * configuration once now.
	 */
	ProcessConfigFile(PGC_SIGHUP);
	TEST_POINT("worker_before_claim");

	claim_slot(&args, slot);
	connect_as_owner(&args, slot);
	termination_start_timer();
	TEST_POINT("worker_before_lock");
	if (args.subtask == 0)
	{
		lock_job(&args, slot);

		/*
		 * A parallel job's previous run may have left prepared shares of
		 * an epoch: settle them before anything reads the checkpoints.
		 */
		subtasks_wait_for_previous(slot);
		epoch_resolve_prepared(slot->ext_oid, args.job_id);
	}

	PG_TRY();
	{
		job = job_start(&args, slot);
		batch_loop_run(job);
	}
	PG_CATCH();
	{
		/* Its subtask 0 ended the run on purpose: end with it, no error. */
		if (job && subtasks_run_ended(job))
		{
			FlushErrorState();
			ereport(LOG,
					(errmsg("subtask %d of job \"%s\" ends with subtask 0, which ended the run (a stop between barrier cuts, or a rewind to one)",
							job->subtask, job->name)));
			proc_exit(0);
		}
		record_error(slot, job);
		PG_RE_THROW();
	}
	PG_END_TRY();
	proc_exit(0);
}

/*
 * Each batch allocates and frees the same tens of megabytes (a JSON job's
 * batch of 10000 records takes about 30 MB).  Keep them in the process:
 * handing them back to the kernel and faulting them in again cost as much
 * as the work itself.  A trim threshold of 32 MB was not enough: whether a
 * batch's freed blocks ended at the top of the heap, and so went back, was
 * a matter of what else had been allocated above them (issue 16: a keyed
 * tumbling job at 1000 keys took 4.9 CPU-s per million records with 750k
 * page faults, 2.1 without).
 */
static void
keep_memory(void)
{
	mallopt(M_MMAP_THRESHOLD, 16 * 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024);
	/* RocksDB's threads would each keep an arena of their own. */
	mallopt(M_ARENA_MAX, 2);
}

/*
 * Take the slot for this start, or exit: the slot is no longer this
 * start's, or a stop request came before the worker started.
 */
static void
claim_slot(JobWorkerArgs *args, JobSlot *slot)
{
	bool		stopping;

	SpinLockAcquire(&slot->mutex);
	if (slot->job_id != args->job_id || slot->generation != args->generation || slot->pid != 0)
	{
		/*
		 * The slot is no longer this start's: the launcher that started us
		 * has gone and a new one forgot the slot, or gave it to another
		 * start.  Leave it alone.
		 */
		SpinLockRelease(&slot->mutex);
		proc_exit(0);
	}
	slot->pid = MyProcPid;
	slot->latch = MyLatch;
	slot->live_state = JOB_LIVE_STARTING;
	/* A parallel job's epochs are counted afresh by each run. */
	job_slot_reset_run(slot);
	slot->exit_kind = JOB_EXIT_NONE;
	slot->error[0] = '\0';
	stopping = slot->stop_requested;
	if (stopping)
		slot->exit_kind = JOB_EXIT_STOPPED;
	SpinLockRelease(&slot->mutex);
	before_shmem_exit(worker_exit, PointerGetDatum(slot));
	/* Stopped before it started: the last checkpoint stands as it is. */
	if (stopping)
		proc_exit(0);
}

/*
 * A failure to connect (the owner lost LOGIN or was dropped) is a FATAL
 * that no PG_CATCH sees: the log hook leaves its message in the slot, so
 * that mailer.jobs says why instead of "exited unexpectedly".
 */
static void
connect_as_owner(JobWorkerArgs *args, JobSlot *slot)
{
	connecting_slot = slot;
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = record_connection_error;
	BackgroundWorkerInitializeConnectionByOid(args->database, args->owner, 0);
	emit_log_hook = prev_emit_log_hook;
	connecting_slot = NULL;
}

static void
record_connection_error(ErrorData *edata)
{
	if (connecting_slot && edata->elevel >= ERROR)
	{
		SpinLockAcquire(&connecting_slot->mutex);
		connecting_slot->exit_kind = JOB_EXIT_ERROR;
		snprintf(connecting_slot->error, JOB_SLOT_ERROR_LEN,
				 "the job's worker could not connect as the job's owner: %s", edata->message);
		connecting_slot->error_at = GetCurrentTimestamp();
		SpinLockRelease(&connecting_slot->mutex);
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/*
 * The job's lock, held until the worker exits: no other worker runs the
 * job, and no restore_job or drop_job rewrites its checkpoints, while it
 * runs.  Without it, exit at once: the launcher tries again shortly.
 */
static void
lock_job(JobWorkerArgs *args, JobSlot *slot)
{
	work_xact_begin();
	if (!job_lock_try(slot->ext_oid, args->job_id, true))
	{
		work_xact_end();
		SpinLockAcquire(&slot->mutex);
		slot->exit_kind = JOB_EXIT_BUSY;
		SpinLockRelease(&slot->mutex);
		proc_exit(0);
	}
	work_xact_end();
}

/*
 * The error the job stops at, left in its slot for mailer.jobs, and whether
 * a restart may help.  Called in PG_CATCH: the error is still the current one.
 */
static void
record_error(JobSlot *slot, Job *job)
{
	ErrorData  *edata;
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	edata = CopyErrorData();
	MemoryContextSwitchTo(old);
	SpinLockAcquire(&slot->mutex);
	/* Failing per on_error, or state gone: retrying cannot help. */
	slot->exit_kind = (job && job->failing) || edata->sqlerrcode == ERRCODE_DATA_CORRUPTED ?
		JOB_EXIT_FAILED : JOB_EXIT_ERROR;
	/* A row of the sink another transaction held past the checkpoint's lock_timeout. */
	snprintf(slot->error, JOB_SLOT_ERROR_LEN, "%s%s%s%s",
			 edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE && job && job->stage &&
			 strcmp(job->stage, "checkpoint") == 0 ?
			 "the checkpoint waited too long for a lock another transaction holds, and restarts from the last one: " : "",
			 edata->message, edata->detail ? ": " : "", edata->detail ? edata->detail : "");
	slot->error_at = GetCurrentTimestamp();
	SpinLockRelease(&slot->mutex);
}

/* Whatever way the worker leaves, its slot says it has gone. */
static void
worker_exit(int code, Datum arg)
{
	JobSlot    *slot = (JobSlot *) DatumGetPointer(arg);

	SpinLockAcquire(&slot->mutex);
	/* Ended by a SIGTERM before a final checkpoint: terminated, not failed. */
	if (termination_signalled() && slot->exit_kind == JOB_EXIT_NONE)
		slot->exit_kind = JOB_EXIT_STOPPED;
	slot->pid = 0;
	slot->latch = NULL;
	/*
	 * No longer a worker that could run: stop_job and drop_job stop waiting
	 * now, not once the launcher has recorded the exit (the launcher may
	 * itself wait for their transaction, on a row of job_status).
	 */
	slot->registered = false;
	SpinLockRelease(&slot->mutex);
	job_slot_changed(slot);
	/* A parallel job's subtask 1..P-1: its slot was subtask 0's to lend. */
	if (slot->subtask > 0)
		subtasks_release(slot);
}

/*
 * A parallel job: the key groups this subtask owns, and for subtask 0 the
 * queues and the other subtasks, started before it restores its own
 * checkpoint so that all restore at once.
 */
static void
start_parallel(JobWorkerArgs *args, Job *job)
{
	job->parallelism = job->spec->parallelism;
	job->key_groups = job->spec->key_groups > 0 ? job->spec->key_groups : KEY_GROUPS_DEFAULT;
	key_group_range(job->subtask, job->parallelism, job->key_groups, &job->kg_lo, &job->kg_hi);
	if (job->parallelism == 1 || job->subtask > 0)
		return;
	job->slot->parallelism = job->parallelism;
	args->exchange = exchange_create(job->slot->ext_oid, job->job_id, job->parallelism);
	job->slot->exchange = args->exchange;
	subtasks_start(args, job, args->exchange);
}

static Job *
job_start(JobWorkerArgs *args, JobSlot *slot)
{
	MemoryContext job_context = AllocSetContextCreate(TopMemoryContext, "mailer job",
													  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(job_context);
	Job		   *job = palloc0(sizeof(Job));
	JobRow	   *row;

	job->job_id = args->job_id;
	job->owner = args->owner;
	job->slot = slot;
	job->subtask = args->subtask;
	job->coordinator = &mailer_shared->slots[slot->coordinator];
	SpinLockAcquire(&job->coordinator->mutex);
	job->coordinator_pid = job->coordinator->pid;
	SpinLockRelease(&job->coordinator->mutex);
	job->generation = args->generation;
	/* Subtask 0 gone before this subtask started, or another run's: this run is over. */
	if (job->coordinator_pid == 0 || job->coordinator->generation != args->generation)
		proc_exit(0);
	job->job_context = job_context;
	job->batch_context = AllocSetContextCreate(job_context, "mailer batch", ALLOCSET_DEFAULT_SIZES);

	/* What the job keeps is allocated in job_context: it outlives this transaction. */
	work_xact_begin();
	job->ext_oid = get_extension_oid(MAILER_EXTENSION, false);
	row = catalog_get_job(job->job_id, true, false);
	job->name = row->name;
	pgstat_report_appname(psprintf("mailer job %s", job->name));
	/* Names in the spec resolve as they did when the job was created. */
	SetConfigOption("search_path", row->search_path, PGC_USERSET, PGC_S_SESSION);

	job->spec = spec_parse(row->spec);
	/* The catalog may have been edited by hand: judge the owner's options again. */
	spec_set_owner(job->spec, job->owner);
	start_parallel(args, job);
	if (job->spec->sink.type == SINK_TABLE)
		wait_for_sink_table(job);
	job->plan = plan_compile(job->spec, false);
	job->rt = expr_runtime_create(job->plan->schema);
	job->out_rt = expr_runtime_create(job->plan->out_schema);
	plan_prepare_exprs(job->plan, job->rt, job->out_rt);

	{
		SinkOwner	owner = {job->ext_oid, job->job_id, job->subtask};

		job->sink = sink_buffer_create(job->plan, &owner, job_context, &job->failing);
	}
	/* What the outbox holds of committed epochs goes out before anything new. */
	job->publish_pending = true;
	job->dead_letters = dead_letter_buffer_create(job_context);
	/* Partition metrics count what this worker reads, not what the slot's last user did. */
	slot->npartitions = 0;
	for (int p = 0; p < JOB_SLOT_MAX_PARTITIONS; p++)
	{
		memset(&slot->partitions[p], 0, sizeof(PartitionMetrics));
		slot->partitions[p].watermark = DT_NOBEGIN;
	}
	checkpoint_restore(job);
	job->topic_datums = palloc(sizeof(Datum) * job->source->ntopics);
	for (int i = 0; i < job->source->ntopics; i++)
		job->topic_datums[i] = CStringGetTextDatum(job->source->topic_names[i]);
	if (job->plan->aggregated)
	{
		KeyedStageArgs keyed = {
			.job_name = job->name,
			.plan = job->plan,
			.state = job->state,
			.rt = job->rt,
			.out_rt = job->out_rt,
			.sink = job->sink,
			.dead_letters = job->dead_letters,
			.on_error = job->spec->on_error,
			.failing = &job->failing,
			.watermark = watermark_current(job->watermarks),
			.context = job_context,
		};

		job->keyed = keyed_create(&keyed);
	}
	if (job->parallelism > 1)
		job->shuffle = shuffle_create(job, exchange_attach(args->exchange, job->slot->ext_oid,
														  job->job_id, job->subtask, job->parallelism));
	work_xact_end();
	cut_align_start(job);

	/*
	 * "start": "latest" holds for a job's first start only: pin the offsets
	 * it resolved at once, or a restart before its first checkpoint would
	 * begin at the latest offsets of that moment, skipping what came in
	 * between.  A topic not positioned yet stays out of the checkpoint, so
	 * it still starts per the spec when it is.
	 */
	if (job->source->unpinned && job->parallelism == 1)
		checkpoint_take(job, false);

	job->rate_at = GetCurrentTimestamp();
	job->rate_records = job->counters[JC_RECORDS_IN];
	MemoryContextSwitchTo(old);
	set_live_state(slot, JOB_LIVE_RUNNING);
	return job;
}

/*
 * A worker that starts while no table has the sink table's name waits for
 * one, as a running worker does, instead of failing and restarting.
 */
static void
wait_for_sink_table(Job *job)
{
	bool		waited = false;

	while (!OidIsValid(plan_sink_relid(&job->spec->sink, AccessShareLock)))
	{
		/* The other subtasks cannot wait for this one: the run ends, and restarts with backoff. */
		if (job->parallelism > 1)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("the sink table \"%s\" of subtask %d does not exist",
							job->spec->sink.table, job->subtask),
					 errhint("Create the table; the job restarts by itself.")));
		work_xact_end();
		job_slot_set_waiting(job->slot, JOB_WAIT_TABLE,
							 psprintf("waiting for the sink table: table \"%s\" does not exist",
									  job->spec->sink.table));
		waited = true;
		if (job_stop_requested(job->slot))
		{
			/* Nothing read, nothing to commit: the job resumes where it was. */
			SpinLockAcquire(&job->slot->mutex);
			job->slot->exit_kind = JOB_EXIT_STOPPED;
			SpinLockRelease(&job->slot->mutex);
			proc_exit(0);
		}
		job_pause_briefly();
		work_xact_begin();
	}
	if (waited)
		set_live_state(job->slot, JOB_LIVE_STARTING);
}

static void
set_live_state(JobSlot *slot, JobLiveState state)
{
	bool		changed;

	SpinLockAcquire(&slot->mutex);
	changed = slot->live_state != state;
	slot->live_state = state;
	if (state != JOB_LIVE_WAITING)
		slot->waiting_for = JOB_WAIT_NONE;
	SpinLockRelease(&slot->mutex);
	if (changed)
		job_slot_changed(slot);
}
