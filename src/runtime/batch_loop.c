/*
 * batch_loop.c
 *		The job worker's loop over batches (batch_loop.h).
 *
 * A round: answer a stop request, take up wait_job tickets, read a batch
 * and run it through the pipeline in a transaction of its own, move the
 * watermark, checkpoint when one is due, and sleep when there was nothing
 * to read.  While the sink table's name names no table, nothing more is
 * read and each round tries the checkpoint again.
 *
 * Design: docs/ARCHITECTURE.md, "The batch loop".
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/mailer.h"
#include "base/work_xact.h"
#include "operators/keyed.h"
#include "operators/watermark.h"
#include "runtime/accounting.h"
#include "runtime/batch_loop.h"
#include "runtime/checkpoint.h"
#include "runtime/cut_align.h"
#include "runtime/epoch_cut.h"
#include "runtime/pipeline.h"
#include "runtime/termination.h"
#include "runtime/wait_marks.h"

/* A round that read nothing on purpose looks again after this long at most. */
#define CUT_WAIT_MS 50

/* The table statistics go out at most this often (PGSTAT_MIN_INTERVAL's). */
#define STATS_INTERVAL_MS 1000

typedef struct BatchLoop
{
	Job		   *job;
	SourceMessage *msgs;		/* the batch read */
	int			capacity;		/* how many msgs holds */
	int64		interval_ms;	/* checkpoint.interval */
	bool		sink_waiting;	/* a checkpoint found no sink table: read nothing */
} BatchLoop;

static void stop(BatchLoop *loop);
static bool retry_sink(BatchLoop *loop);
static int	read_batch(BatchLoop *loop, bool finished);
static void advance_watermark(Job *job, bool finished);
static bool finish(BatchLoop *loop);
static bool checkpoint_due(BatchLoop *loop, long since);
static void wait_for_input(BatchLoop *loop, long since, bool cut_wait);
static bool waiting_for_lock(JobSlot *slot);
static void rewind_to_cut(BatchLoop *loop);
static bool stop_between_cuts(Job *job);
static void send_table_stats(void);

void
batch_loop_run(Job *job)
{
	BatchLoop	loop;
	MemoryContext loop_context = AllocSetContextCreate(job->job_context, "mailer loop",
													   ALLOCSET_DEFAULT_SIZES);

	loop.job = job;
	loop.msgs = MemoryContextAlloc(job->job_context, sizeof(SourceMessage) * mailer_batch_size);
	loop.capacity = mailer_batch_size;
	loop.interval_ms = job->spec->checkpoint_interval_us / 1000;
	loop.sink_waiting = false;

	for (;;)
	{
		int			n = 0;
		bool		finished;
		long		since;
		CutRound	cut_round;

		/* Whatever one round allocates in passing goes with it. */
		MemoryContextSwitchTo(loop_context);
		MemoryContextReset(loop_context);
		CHECK_FOR_INTERRUPTS();
		send_table_stats();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (stop_between_cuts(job))
		{
			stop(&loop);
			return;
		}
		if (job_stop_requested(job->slot))
		{
			if (job->shuffle == NULL)
			{
				stop(&loop);
				return;
			}
			/*
			 * All subtasks stop with one last epoch, cut in a round below;
			 * between barrier cuts, subtask 0 stops without one once the
			 * epoch being cut is committed (stop_between_cuts).
			 */
			if (job->subtask > 0 || cut_align_stop_checkpoints(job))
				epoch_cut_request_stop(job);
		}
		wait_marks_take(job);
		/*
		 * The sink cannot take the committed output now: read nothing until
		 * it can (back-pressure).  A parallel job's subtask goes on, so that
		 * the epochs' rounds and a stop are not held up; its outbox keeps
		 * what it cannot publish yet.
		 */
		if (job->publish_pending && !checkpoint_publish(job) && job->shuffle == NULL)
		{
			job_pause_briefly();
			continue;
		}
		if (loop.sink_waiting && !retry_sink(&loop))
		{
			job_pause_briefly();
			continue;
		}

		/* Hold at a barrier cut before reading: a batch could pass its markers. */
		cut_round = cut_align_round(job);
		if (cut_round == CUT_ROUND_REWIND)
		{
			rewind_to_cut(&loop);
			return;
		}
		finished = job->source->ops->finished(job->source);
		if (cut_round == CUT_ROUND_GO_ON)
			n = read_batch(&loop, finished);
		if (job->shuffle)
		{
			since = TimestampDifferenceMilliseconds(job->last_checkpoint, GetCurrentTimestamp());
			if (epoch_cut_round(job, finished, checkpoint_due(&loop, since)))
				return;
			if (n == 0)
				wait_for_input(&loop, since, cut_round == CUT_ROUND_WAIT);
			continue;
		}
		advance_watermark(job, finished);
		if (finished)
		{
			if (finish(&loop))
				return;
			continue;
		}

		/* The batch may have brought the partitions to the cut's markers. */
		if (cut_align_round(job) == CUT_ROUND_REWIND)
		{
			rewind_to_cut(&loop);
			return;
		}
		since = TimestampDifferenceMilliseconds(job->last_checkpoint, GetCurrentTimestamp());
		if (checkpoint_due(&loop, since) && !checkpoint_take(job, false))
		{
			loop.sink_waiting = true;
			continue;
		}
		wait_marks_answer(job);
		if (n == 0)
			wait_for_input(&loop, since, false);
	}
}

/* Asked to stop: the final checkpoint, then the worker exits. */
static void
stop(BatchLoop *loop)
{
	Job		   *job = loop->job;

	/*
	 * Waiting for a lock on the sink table: a final checkpoint would wait
	 * again.  The last checkpoint stands; the job resumes there.  Otherwise
	 * the final checkpoint has a grace of its own, after the batch's.
	 */
	termination_restart_grace();
	/*
	 * A job that checkpoints only at barrier cuts keeps its last cut's
	 * checkpoint, unless it is at a cut now.
	 */
	if ((!loop->sink_waiting || !waiting_for_lock(job->slot)) && cut_align_stop_checkpoints(job) &&
		job->shuffle == NULL)
		checkpoint_take(job, true);
	wait_marks_answer(job);
	SpinLockAcquire(&job->slot->mutex);
	job->slot->exit_kind = JOB_EXIT_STOPPED;
	/* A parallel job's subtask 0 between cuts: its subtasks end with it, quietly. */
	job->slot->cuts.ended = job->shuffle != NULL;
	SpinLockRelease(&job->slot->mutex);
}

/*
 * The sink table's name names no table: read nothing more, and try the
 * checkpoint again until a table has the name.  True once it has.
 */
static bool
retry_sink(BatchLoop *loop)
{
	Job		   *job = loop->job;

	if (!checkpoint_take(job, false))
		return false;
	loop->sink_waiting = false;
	job_slot_set_waiting(job->slot, JOB_WAIT_NONE, NULL);
	wait_marks_answer(job);
	return true;
}

/* Read a batch, unless the source is finished, and process it; how many read. */
static int
read_batch(BatchLoop *loop, bool finished)
{
	Job		   *job = loop->job;
	int			n = 0;

	if (loop->capacity < mailer_batch_size)
	{
		loop->msgs = repalloc(loop->msgs, sizeof(SourceMessage) * mailer_batch_size);
		loop->capacity = mailer_batch_size;
	}
	if (!finished)
		n = job->source->ops->poll(job->source, loop->msgs, Min(loop->capacity, mailer_batch_size));

	/*
	 * Waiting on the broker shows in the state until it clears; the error
	 * stays as the job's last one.
	 */
	job_slot_set_waiting(job->slot, job->source->error ? JOB_WAIT_BROKER : JOB_WAIT_NONE,
						 job->source->error);
	if (n > 0)
	{
		/* Before the pipeline, which may change what the messages hold. */
		if (job->spec->source.type == SOURCE_KAFKA)
			produce_latency_add(&job->produce_latency, loop->msgs, n);
		work_xact_begin();
		pipeline_process(job, loop->msgs, n);
		work_xact_end();
		job->uncommitted += n;
		job_publish_counters(job);
	}
	return n;
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

	wm = watermark_step(job->watermarks, job->source, finished,
						job->plan->window ? job->spec->max_drift_us : -1);
	if (job->keyed && job->plan->window && wm > before)
	{
		work_xact_begin();
		keyed_advance_watermark(job->keyed, wm);
		work_xact_end();
	}
	watermark_publish(job->watermarks, job->slot);
}

/*
 * Everything a bounded source holds is read: commit it all and end.  False:
 * the sink table is missing, and the loop waits for it.
 */
static bool
finish(BatchLoop *loop)
{
	Job		   *job = loop->job;

	if (!checkpoint_take(job, true))
	{
		loop->sink_waiting = true;
		return false;
	}
	/*
	 * Finished once the output is out.  A stop that gives up on it leaves
	 * the job stopped, not finished: the outbox keeps the records, and
	 * start_job publishes them.
	 */
	while (!checkpoint_publish(job) && !job_stop_requested(job->slot))
		job_pause_briefly();
	SpinLockAcquire(&job->slot->mutex);
	if (job->publish_pending)
		job->slot->exit_kind = JOB_EXIT_STOPPED;
	else
	{
		job->slot->live_state = JOB_LIVE_FINISHED;
		job->slot->exit_kind = JOB_EXIT_FINISHED;
	}
	SpinLockRelease(&job->slot->mutex);
	wait_marks_answer(job);
	return true;
}

/* since: milliseconds since the last checkpoint. */
static bool
checkpoint_due(BatchLoop *loop, long since)
{
	Job		   *job = loop->job;
	bool		due;

	/* Windows the watermark fired without new input (idle partitions) are output too. */
	due = (job->uncommitted > 0 || (job->keyed && keyed_pending(job->keyed) > 0)) &&
		since >= loop->interval_ms && cut_align_interval_applies(job);
	/* At a barrier cut: its checkpoint, at once. */
	if (cut_align_due(job))
		due = true;
	if (sink_buffer_rows(job->sink) + dead_letter_count(job->dead_letters) +
		(job->keyed ? keyed_pending(job->keyed) : 0) >= mailer_max_buffered_rows ||
		dead_letter_full(job->dead_letters) || sink_buffer_full(job->sink))
		due = true;
	/* A "latest" start resolved while the job runs (the broker was away) is pinned at once too. */
	if (job->source->unpinned)
		due = true;
	return due;
}

/*
 * Nothing was read: sleep until the source has input, the next checkpoint
 * is due, or the latch is set (a stop request, a wait_job ticket).
 * cut_wait: the round read nothing on purpose (cut_align_round said WAIT),
 * so the source's unread input would wake it at once: sleep on the latch
 * (subtask 0's word sets it) and look again shortly for the barrier
 * reader's progress.
 */
static void
wait_for_input(BatchLoop *loop, long since, bool cut_wait)
{
	Job		   *job = loop->job;
	long		timeout = 1000;
	long		source_wait = job->source->ops->wait_ms(job->source);
	pgsocket	fd = job->source->ops->event_fd(job->source);
	int			events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;

	if (job->uncommitted > 0 && cut_align_interval_applies(job))
		timeout = Max(loop->interval_ms - since, 0);
	/* A parallel job's subtask whose part of a bounded source is read waits for the others. */
	if (source_wait >= 0 && !job->source->ops->finished(job->source))
		timeout = Min(timeout, source_wait);
	if (cut_wait)
		timeout = Min(timeout, CUT_WAIT_MS);
	else if (fd != PGINVALID_SOCKET)
		events |= WL_SOCKET_READABLE;
	if (timeout > 0)
		(void) WaitLatchOrSocket(MyLatch, events, fd, timeout, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}

/*
 * The job read past a cut's markers before it learned of the cut: the
 * worker ends, to start again at once from its checkpoint (a parallel
 * job's subtasks end with subtask 0).
 */
static void
rewind_to_cut(BatchLoop *loop)
{
	Job		   *job = loop->job;

	SpinLockAcquire(&job->slot->mutex);
	job->slot->exit_kind = JOB_EXIT_REWIND;
	job->slot->cuts.ended = job->shuffle != NULL;
	SpinLockRelease(&job->slot->mutex);
}

/*
 * Subtask 0 of a parallel job that checkpoints only at barrier cuts, and
 * is not at one, asked to stop (itself, or by another subtask's SIGTERM):
 * it stops without a last epoch (as one worker stops without a last
 * checkpoint), once no epoch is being cut, and its subtasks end with it.
 */
static bool
stop_between_cuts(Job *job)
{
	return job->shuffle && job->subtask == 0 && !cut_align_stop_checkpoints(job) &&
		pg_atomic_read_u64(&job->slot->barrier_epoch) <= (uint64) job->epoch &&
		(job_stop_requested(job->slot) || pg_atomic_read_u32(&job->slot->final_wanted) != 0);
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

/*
 * Send the table statistics of the rounds since the last time, at most
 * once a second, as a backend does when it goes idle: without them
 * autovacuum never learns of the dead rows the sink's upserts and the
 * memory state leave, and never vacuums nor analyzes those tables while
 * the job runs.  Forced, on the loop's own clock: unforced, pgstat takes
 * "now" from the last transaction's end, so an idle worker's rounds, which
 * run none, would hold the last ones back until the next input.
 */
static void
send_table_stats(void)
{
	static TimestampTz sent;
	TimestampTz now = GetCurrentTimestamp();

	/* (a clock set back sends at once, not once it caught up) */
	if (now >= sent && !TimestampDifferenceExceeds(sent, now, STATS_INTERVAL_MS))
		return;
	pgstat_report_stat(true);
	sent = now;
}
