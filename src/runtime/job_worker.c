/*
 * job_worker.c
 *		The worker that runs one job: restore, then loop over batches,
 *		checkpointing every checkpoint.interval, until stopped or, for a
 *		bounded source, finished.
 *
 * It connects as the job's owner, so every expression and every write to
 * the sink obeys that role's privileges and row-level security; only its
 * writes to mailer's own tables switch to the catalog's writer.  On a stop
 * request, or a SIGTERM while it waits for input, it takes a final
 * checkpoint and exits 0.  A SIGTERM while it works (a batch, a checkpoint)
 * gives that work mailer.termination_grace to end, and the final checkpoint
 * after it as long again; past that, or at a second SIGTERM,
 * it is cancelled as a backend's statement is (die), the transaction rolls
 * back and the worker exits: the job resumes from its last checkpoint.  On
 * ERROR it leaves the error in its slot and exits non-zero; the launcher
 * restarts it.
 *
 * At most one worker runs a job: a worker claims its slot only for the
 * start the launcher made (the slot's generation), and takes the job's lock
 * (job_lock_try) before it reads the job's checkpoint, state or source; a
 * worker that cannot exits at once.
 */
#include "postgres.h"

#include <malloc.h>

#include "access/xact.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "base/mailer.h"
#include "jobs/catalog.h"
#include "runtime/checkpoint.h"
#include "runtime/job.h"
#include "runtime/job_worker.h"
#include "operators/keyed.h"
#include "base/test_point.h"
#include "operators/watermark.h"

/* How long work in progress may go on after a SIGTERM, counted in ticks of the timer. */
#define TERM_TICK_MS		500

static volatile sig_atomic_t got_sigterm = false;
static volatile sig_atomic_t term_ticks = 0;
static TimeoutId term_timeout;

/* While the worker connects: where a FATAL (say, owner cannot log in) is told. */
static JobSlot *connecting_slot = NULL;
static emit_log_hook_type prev_emit_log_hook = NULL;

static void handle_sigterm(SIGNAL_ARGS);
static void term_tick(void);
static void end_work_now(void);
static void worker_exit(int code, Datum arg);
static Job *job_start(JobWorkerArgs *args, JobSlot *slot);
static void job_run(Job *job);
static bool stop_requested(Job *job);
static void take_wait_requests(Job *job);
static void answer_waits(Job *job);
static void set_live_state(JobSlot *slot, JobLiveState state);
static bool waiting_for_lock(JobSlot *slot);
static void advance_watermark(Job *job, bool finished);
static void wait_for_sink_table(Job *job);
static void pause_briefly(void);
static void record_connection_error(ErrorData *edata);

void
job_worker_main(Datum main_arg)
{
	JobWorkerArgs args;
	JobSlot    *slot;
	Job		   *volatile job = NULL;
	bool		stopping;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	slot = &mailer_shared->slots[args.slot];

	/*
	 * Each batch allocates and frees the same few megabytes.  Keep them in
	 * the process: handing them back to the kernel and faulting them in
	 * again cost as much as the work itself.
	 */
	mallopt(M_MMAP_THRESHOLD, 16 * 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 32 * 1024 * 1024);
	/* RocksDB's threads would each keep an arena of their own. */
	mallopt(M_ARENA_MAX, 2);

	pqsignal(SIGTERM, handle_sigterm);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	TEST_POINT("worker_before_claim");

	SpinLockAcquire(&slot->mutex);
	if (slot->job_id != args.job_id || slot->generation != args.generation || slot->pid != 0)
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

	/*
	 * A failure to connect (the owner lost LOGIN or was dropped) is a FATAL
	 * that no PG_CATCH sees: the log hook leaves its message in the slot, so
	 * that mailer.jobs says why instead of "exited unexpectedly".
	 */
	connecting_slot = slot;
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = record_connection_error;
	BackgroundWorkerInitializeConnectionByOid(args.database, args.owner, 0);
	emit_log_hook = prev_emit_log_hook;
	connecting_slot = NULL;
	term_timeout = RegisterTimeout(USER_TIMEOUT, term_tick);
	TEST_POINT("worker_before_lock");

	/*
	 * The job's lock, held until the worker exits: no other worker runs the
	 * job, and no restore_job or drop_job rewrites its checkpoints, while it
	 * runs.  Without it, exit at once: the launcher tries again shortly.
	 */
	job_transaction_begin();
	if (!job_lock_try(slot->ext_oid, args.job_id, true))
	{
		job_transaction_end();
		SpinLockAcquire(&slot->mutex);
		slot->exit_kind = JOB_EXIT_BUSY;
		SpinLockRelease(&slot->mutex);
		proc_exit(0);
	}
	job_transaction_end();

	PG_TRY();
	{
		job = job_start(&args, slot);
		job_run(job);
	}
	PG_CATCH();
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
		PG_RE_THROW();
	}
	PG_END_TRY();
	proc_exit(0);
}

static void
handle_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	/* A second SIGTERM does not wait for the work to end. */
	if (got_sigterm)
		end_work_now();
	got_sigterm = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * Ticks while the worker is in a transaction: once a SIGTERM has waited
 * mailer.termination_grace for the work to end, end it.  (Signal context.)
 */
static void
term_tick(void)
{
	if (got_sigterm && ++term_ticks >= Max(mailer_termination_grace_ms / TERM_TICK_MS, 1))
		end_work_now();
}

/*
 * As die() does: the next CHECK_FOR_INTERRUPTS, in a lock wait, a sleep or
 * the executor, ends the worker with FATAL; the transaction rolls back.
 */
static void
end_work_now(void)
{
	ProcDiePending = true;
	InterruptPending = true;
	SetLatch(MyLatch);
}

/*
 * Move the watermark (idle partitions stop holding it back as time passes)
 * and let the keyed stage fire the windows it passed.  A finished bounded
 * source moves it past every window.
 */
static void
advance_watermark(Job *job, bool finished)
{
	TimestampTz before = watermark_current(job->watermarks);
	TimestampTz wm;

	/* Partitions restored from the checkpoint show their watermarks before any record. */
	watermark_sync_partitions(job->watermarks, job->source);
	if (finished)
		watermark_finish(job->watermarks);
	wm = watermark_advance(job->watermarks, GetCurrentTimestamp());
	if (job->keyed && job->plan->window && wm > before)
	{
		job_transaction_begin();
		keyed_advance_watermark(job->keyed, wm);
		job_transaction_end();
	}
	watermark_publish(job->watermarks, job->slot);
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
		job_transaction_end();
		job_slot_set_waiting(job->slot, JOB_WAIT_TABLE,
							 psprintf("waiting for the sink table: table \"%s\" does not exist",
									  job->spec->sink.table));
		waited = true;
		if (stop_requested(job))
		{
			/* Nothing read, nothing to commit: the job resumes where it was. */
			SpinLockAcquire(&job->slot->mutex);
			job->slot->exit_kind = JOB_EXIT_STOPPED;
			SpinLockRelease(&job->slot->mutex);
			proc_exit(0);
		}
		pause_briefly();
		job_transaction_begin();
	}
	if (waited)
		set_live_state(job->slot, JOB_LIVE_STARTING);
}

/* A second's wait (less when the latch is set) before looking again. */
static void
pause_briefly(void)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1000,
					 PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
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

/* Whatever way the worker leaves, its slot says it has gone. */
static void
worker_exit(int code, Datum arg)
{
	JobSlot    *slot = (JobSlot *) DatumGetPointer(arg);

	SpinLockAcquire(&slot->mutex);
	/* Ended by a SIGTERM before a final checkpoint: terminated, not failed. */
	if (got_sigterm && slot->exit_kind == JOB_EXIT_NONE)
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
	ConditionVariableBroadcast(&slot->progress_cv);
	job_slots_wake_launcher();
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
	job->job_context = job_context;
	job->batch_context = AllocSetContextCreate(job_context, "mailer batch", ALLOCSET_DEFAULT_SIZES);

	/* What the job keeps is allocated in job_context: it outlives this transaction. */
	job_transaction_begin();
	job->ext_oid = get_extension_oid("mailer", false);
	row = catalog_get_job(job->job_id, true, false);
	job->name = row->name;
	pgstat_report_appname(psprintf("mailer job %s", job->name));
	/* Names in the spec resolve as they did when the job was created. */
	SetConfigOption("search_path", row->search_path, PGC_USERSET, PGC_S_SESSION);

	job->spec = spec_parse(row->spec);
	/* The catalog may have been edited by hand: judge the owner's options again. */
	job->spec->source.kafka.owner = job->owner;
	wait_for_sink_table(job);
	job->plan = plan_compile(job->spec, false);
	job->rt = expr_runtime_create(job->plan->schema);
	job->out_rt = expr_runtime_create(job->plan->out_schema);
	expr_prepare(job->plan->event_time, job->rt);
	for (int i = 0; i < job->plan->nsteps; i++)
	{
		StatelessStep *st = job->plan->steps[i];

		expr_prepare(st->expr, job->rt);
		for (int j = 0; j < st->nexprs; j++)
			expr_prepare(st->exprs[j], job->rt);
	}
	for (int i = 0; i < job->plan->naggs; i++)
		expr_prepare(job->plan->aggs[i]->arg, job->rt);
	for (int i = 0; i < job->plan->sink->ncolumns; i++)
		expr_prepare(job->plan->sink->columns[i].cast, job->out_rt);

	job->sink = sink_buffer_create(job->plan, job_context, &job->failing);
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
	job_transaction_end();

	/*
	 * "start": "latest" holds for a job's first start only: pin the offsets
	 * it resolved at once, or a restart before its first checkpoint would
	 * begin at the latest offsets of that moment, skipping what came in
	 * between.  A topic not positioned yet stays out of the checkpoint, so
	 * it still starts per the spec when it is.
	 */
	if (job->source->unpinned)
		checkpoint_take(job, false);

	job->rate_at = GetCurrentTimestamp();
	job->rate_records = job->counters[JC_RECORDS_IN];
	MemoryContextSwitchTo(old);
	set_live_state(slot, JOB_LIVE_RUNNING);
	return job;
}

static void
job_run(Job *job)
{
	SourceMessage *msgs = MemoryContextAlloc(job->job_context,
											 sizeof(SourceMessage) * mailer_batch_size);
	int			capacity = mailer_batch_size;
	int64		interval_ms = job->spec->checkpoint_interval_us / 1000;
	MemoryContext loop_context = AllocSetContextCreate(job->job_context, "mailer loop",
													   ALLOCSET_DEFAULT_SIZES);
	bool		sink_waiting = false;

	for (;;)
	{
		int			n = 0;
		bool		finished;
		bool		due;
		long		since;

		/* Whatever one round allocates in passing goes with it. */
		MemoryContextSwitchTo(loop_context);
		MemoryContextReset(loop_context);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (stop_requested(job))
		{
			/*
			 * Waiting for a lock on the sink table: a final checkpoint would
			 * wait again.  The last checkpoint stands; the job resumes there.
			 * Otherwise the final checkpoint has a grace of its own, after
			 * the batch's.
			 */
			term_ticks = 0;
			if (!sink_waiting || !waiting_for_lock(job->slot))
				checkpoint_take(job, true);
			answer_waits(job);
			SpinLockAcquire(&job->slot->mutex);
			job->slot->exit_kind = JOB_EXIT_STOPPED;
			SpinLockRelease(&job->slot->mutex);
			return;
		}
		take_wait_requests(job);

		/*
		 * The sink table's name names no table: read nothing more, and try
		 * the checkpoint again until a table has the name.
		 */
		if (sink_waiting)
		{
			if (!checkpoint_take(job, false))
			{
				pause_briefly();
				continue;
			}
			sink_waiting = false;
			job_slot_set_waiting(job->slot, JOB_WAIT_NONE, NULL);
			answer_waits(job);
		}

		if (capacity < mailer_batch_size)
		{
			msgs = repalloc(msgs, sizeof(SourceMessage) * mailer_batch_size);
			capacity = mailer_batch_size;
		}
		finished = job->source->ops->finished(job->source);
		if (!finished)
			n = job->source->ops->poll(job->source, msgs, Min(capacity, mailer_batch_size));
		/*
		 * Waiting on the broker shows in the state until it clears; the
		 * error stays as the job's last one.
		 */
		job_slot_set_waiting(job->slot, job->source->error ? JOB_WAIT_BROKER : JOB_WAIT_NONE,
							 job->source->error);
		if (n > 0)
		{
			job_transaction_begin();
			pipeline_process(job, msgs, n);
			job_transaction_end();
			job->uncommitted += n;
			job_publish_counters(job);
		}

		advance_watermark(job, finished);
		if (finished)
		{
			/* Everything read: commit it all and end. */
			if (!checkpoint_take(job, true))
			{
				sink_waiting = true;
				continue;
			}
			SpinLockAcquire(&job->slot->mutex);
			job->slot->live_state = JOB_LIVE_FINISHED;
			job->slot->exit_kind = JOB_EXIT_FINISHED;
			SpinLockRelease(&job->slot->mutex);
			answer_waits(job);
			return;
		}

		since = TimestampDifferenceMilliseconds(job->last_checkpoint, GetCurrentTimestamp());
		/* Windows the watermark fired without new input (idle partitions) are output too. */
		due = (job->uncommitted > 0 || (job->keyed && keyed_pending(job->keyed) > 0)) &&
			since >= interval_ms;
		if (sink_buffer_rows(job->sink) + dead_letter_count(job->dead_letters) +
			(job->keyed ? keyed_pending(job->keyed) : 0) >= mailer_max_buffered_rows ||
			dead_letter_full(job->dead_letters) || sink_buffer_full(job->sink))
			due = true;
		/* A "latest" start resolved while the job runs (the broker was away) is pinned at once too. */
		if (job->source->unpinned)
			due = true;
		if (due && !checkpoint_take(job, false))
		{
			sink_waiting = true;
			continue;
		}
		answer_waits(job);

		if (n == 0)
		{
			long		timeout = 1000;
			long		source_wait = job->source->ops->wait_ms(job->source);
			pgsocket	fd = job->source->ops->event_fd(job->source);
			int			events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;

			if (job->uncommitted > 0)
				timeout = Max(interval_ms - since, 0);
			if (source_wait >= 0)
				timeout = Min(timeout, source_wait);
			if (fd != PGINVALID_SOCKET)
				events |= WL_SOCKET_READABLE;
			if (timeout > 0)
				(void) WaitLatchOrSocket(MyLatch, events, fd, timeout, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

static bool
stop_requested(Job *job)
{
	bool		requested;

	SpinLockAcquire(&job->slot->mutex);
	requested = job->slot->stop_requested;
	SpinLockRelease(&job->slot->mutex);
	return requested || got_sigterm;
}

/* A new wait_job ticket: note the input there is now. */
static void
take_wait_requests(Job *job)
{
	uint64		requested;

	SpinLockAcquire(&job->slot->mutex);
	requested = job->slot->wait_requested;
	SpinLockRelease(&job->slot->mutex);
	if (requested > job->wait_pending)
	{
		job->source->ops->mark_end(job->source);
		job->wait_pending = requested;
	}
}

/* Answer the tickets once everything up to the marked end is committed. */
static void
answer_waits(Job *job)
{
	bool		answer;

	if (job->wait_pending == 0 || job->uncommitted > 0)
		return;
	/* A source read to its end is answered by the final checkpoint, as finished. */
	if (job->source->ops->finished(job->source) && job->slot->live_state != JOB_LIVE_FINISHED)
		return;
	answer = job->source->ops->reached_end(job->source);
	if (!answer)
		return;
	SpinLockAcquire(&job->slot->mutex);
	answer = job->slot->wait_answered < job->wait_pending;
	if (answer)
		job->slot->wait_answered = job->wait_pending;
	SpinLockRelease(&job->slot->mutex);
	if (answer)
		ConditionVariableBroadcast(&job->slot->progress_cv);
}

static bool
waiting_for_lock(JobSlot *slot)
{
	bool		waiting;

	SpinLockAcquire(&slot->mutex);
	waiting = slot->live_state == JOB_LIVE_WAITING && slot->waiting_for == JOB_WAIT_LOCK;
	SpinLockRelease(&slot->mutex);
	return waiting;
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
	{
		ConditionVariableBroadcast(&slot->progress_cv);
		job_slots_wake_launcher();
	}
}

void
job_transaction_begin(void)
{
	MemoryContext ctx = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	MemoryContextSwitchTo(ctx);
	/* Work in progress: a SIGTERM now gives it mailer.termination_grace to end. */
	enable_timeout_every(term_timeout, TimestampTzPlusMilliseconds(GetCurrentTimestamp(), TERM_TICK_MS),
						 TERM_TICK_MS);
}

void
job_transaction_abort(void)
{
	MemoryContext ctx = CurrentMemoryContext;

	AbortCurrentTransaction();
	MemoryContextSwitchTo(ctx);
	disable_timeout(term_timeout, false);
}

void
job_transaction_end(void)
{
	MemoryContext ctx = CurrentMemoryContext;

	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(ctx);
	disable_timeout(term_timeout, false);
}

void
job_publish_counters(Job *job)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms = TimestampDifferenceMilliseconds(job->rate_at, now);

	for (int c = 0; c < JC_NUM_COUNTERS; c++)
		pg_atomic_write_u64(&job->slot->counters[c], job->counters[c]);
	if (ms >= 1000)
	{
		double		rate = (job->counters[JC_RECORDS_IN] - job->rate_records) * 1000.0 / ms;

		/* Smoothed over a few seconds, so one slow batch does not show as a stall. */
		job->slot->input_rate = job->slot->input_rate == 0 ? rate :
			0.5 * job->slot->input_rate + 0.5 * rate;
		job->rate_records = job->counters[JC_RECORDS_IN];
		job->rate_at = now;
	}
}

void
job_record_failed(Job *job, SourceMessage *msg, const char *stage, const char *error)
{
	const char *topic = job->source->topic_names[msg->topic];

	switch (job->spec->on_error)
	{
		case ON_ERROR_DEAD_LETTER:
			dead_letter_add(job->dead_letters, topic, msg->partition, msg->offset,
							msg->key, msg->key_len, msg->value, msg->value_len, stage, error);
			job->counters[JC_RECORDS_DEAD_LETTERED]++;
			break;
		case ON_ERROR_SKIP:
			job->counters[JC_RECORDS_SKIPPED]++;
			break;
		case ON_ERROR_FAIL:
			job->failing = true;
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("record at %s partition %d offset " INT64_FORMAT " failed at %s: %s",
							topic, msg->partition, msg->offset, stage, error),
					 errhint("The job's on_error is \"fail\". Fix the input or the job, then mailer.start_job('%s').",
							 job->name)));
	}
}

void
job_record_late(Job *job, SourceMessage *msg, TimestampTz event_time)
{
	job->counters[JC_RECORDS_LATE]++;
	if (job->spec->on_error == ON_ERROR_DEAD_LETTER)
		dead_letter_add(job->dead_letters, job->source->topic_names[msg->topic], msg->partition,
						msg->offset, msg->key, msg->key_len, msg->value, msg->value_len, "late",
						psprintf("event time %s is too late: every window it belongs to closed at watermark %s, allowed lateness included",
								 timestamptz_to_str(event_time),
								 timestamptz_to_str(watermark_current(job->watermarks))));
}
