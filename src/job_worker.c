/*
 * job_worker.c
 *		The worker that runs one job: restore, then loop over batches,
 *		checkpointing every checkpoint.interval, until stopped or, for a
 *		bounded source, finished.
 *
 * It connects as the job's owner, so every expression and every write to
 * the sink obeys that role's privileges and row-level security; only its
 * writes to mailer's own tables switch to the catalog's writer.  On SIGTERM
 * or a stop request it takes a final checkpoint and exits 0.  On ERROR it
 * leaves the error in its slot and exits non-zero; the launcher restarts it.
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
#include "utils/timestamp.h"

#include "mailer.h"
#include "catalog.h"
#include "checkpoint.h"
#include "job.h"
#include "job_worker.h"
#include "keyed.h"
#include "watermark.h"

static volatile sig_atomic_t got_sigterm = false;

/* While the worker connects: where a FATAL (say, owner cannot log in) is told. */
static JobSlot *connecting_slot = NULL;
static emit_log_hook_type prev_emit_log_hook = NULL;

static void handle_sigterm(SIGNAL_ARGS);
static void worker_exit(int code, Datum arg);
static Job *job_start(JobWorkerArgs *args, JobSlot *slot);
static void job_run(Job *job);
static bool stop_requested(Job *job);
static void take_wait_requests(Job *job);
static void answer_waits(Job *job);
static void set_live_state(JobSlot *slot, JobLiveState state);
static void advance_watermark(Job *job, bool finished);
static void record_connection_error(ErrorData *edata);

void
job_worker_main(Datum main_arg)
{
	JobWorkerArgs args;
	JobSlot    *slot;
	Job		   *volatile job = NULL;

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

	SpinLockAcquire(&slot->mutex);
	if (slot->job_id != args.job_id)
	{
		/* The launcher gave the slot to another job before we started. */
		SpinLockRelease(&slot->mutex);
		proc_exit(0);
	}
	slot->pid = MyProcPid;
	slot->latch = MyLatch;
	slot->live_state = JOB_LIVE_STARTING;
	slot->exit_kind = JOB_EXIT_NONE;
	slot->error[0] = '\0';
	SpinLockRelease(&slot->mutex);
	before_shmem_exit(worker_exit, PointerGetDatum(slot));

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
		snprintf(slot->error, JOB_SLOT_ERROR_LEN, "%s%s%s", edata->message,
				 edata->detail ? ": " : "", edata->detail ? edata->detail : "");
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

	got_sigterm = true;
	SetLatch(MyLatch);
	errno = save_errno;
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
	slot->pid = 0;
	slot->latch = NULL;
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
		job->keyed = keyed_create(job);
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
			checkpoint_take(job, true);
			answer_waits(job);
			SpinLockAcquire(&job->slot->mutex);
			job->slot->exit_kind = JOB_EXIT_STOPPED;
			SpinLockRelease(&job->slot->mutex);
			return;
		}
		take_wait_requests(job);

		if (capacity < mailer_batch_size)
		{
			msgs = repalloc(msgs, sizeof(SourceMessage) * mailer_batch_size);
			capacity = mailer_batch_size;
		}
		finished = job->source->ops->finished(job->source);
		if (!finished)
			n = job->source->ops->poll(job->source, msgs, Min(capacity, mailer_batch_size));
		/* Waiting on an outside fault shows in the state and the error, until it clears. */
		if (job->source->error)
			job_slot_set_error(job->slot, job->source->error);
		else if (job->slot->live_state == JOB_LIVE_WAITING)
			job_slot_set_error(job->slot, NULL);
		set_live_state(job->slot, job->source->error ? JOB_LIVE_WAITING : JOB_LIVE_RUNNING);
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
			checkpoint_take(job, true);
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
			(job->keyed ? keyed_pending(job->keyed) : 0) >= mailer_max_buffered_rows)
			due = true;
		/* A "latest" start resolved while the job runs (the broker was away) is pinned at once too. */
		if (job->source->unpinned)
			due = true;
		if (due)
			checkpoint_take(job, false);
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

static void
set_live_state(JobSlot *slot, JobLiveState state)
{
	bool		changed;

	SpinLockAcquire(&slot->mutex);
	changed = slot->live_state != state;
	slot->live_state = state;
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
}

void
job_transaction_end(void)
{
	MemoryContext ctx = CurrentMemoryContext;

	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(ctx);
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
