/*
 * epoch_cut.c
 *		Rounds and aligned checkpoints of a parallel job (epoch_cut.h).
 *
 * Subtask 0 coordinates: when a checkpoint is due at any subtask (its
 * interval passed with input, a buffer is full) or a stop or the end of
 * a bounded source asks for the last one, it raises barrier_epoch to E and
 * wakes the others.  Each subtask, between two batches, then cuts E:
 *
 * 1. it sends barrier E down each of its queues, after every record it
 *    read up to its positions (which the epoch will store);
 * 2. it takes in its inputs until each has delivered barrier E, reading no
 *    more from an input once it has (alignment), and reads nothing from
 *    its source meanwhile;
 * 3. its keyed state now holds exactly the records before every
 *    subtask's cut: it writes its share of E, and epoch_commit commits
 *    all shares together.
 *
 * A barrier E that arrives before this subtask saw barrier_epoch raised
 * starts the cut just as well.  No cut waits on a queue that cannot move:
 * a subtask that sends takes in its own inputs while its queue is full,
 * and a subtask aligning sends nothing.
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "base/work_xact.h"
#include "operators/keyed.h"
#include "operators/watermark.h"
#include "runtime/checkpoint.h"
#include "runtime/cut_align.h"
#include "runtime/epoch_cut.h"
#include "runtime/shuffle.h"
#include "runtime/subtasks.h"
#include "runtime/wait_marks.h"

/* Subtask 0: ask every subtask to cut the next epoch. */
static void
request_epoch(Job *job)
{
	uint64		next = job->epoch + 1;

	if (pg_atomic_read_u64(&job->slot->barrier_epoch) >= next)
		return;
	/* Before the barrier is raised: whether the epoch is at a barrier cut. */
	cut_align_mark_epoch(job, next);
	pg_atomic_write_u64(&job->slot->barrier_epoch, next);
	subtasks_wake_all(job);
}

void
epoch_cut_request_stop(Job *job)
{
	if (job->subtask > 0)
	{
		/* Subtask 0 decides when: it stops every subtask with one last epoch. */
		subtasks_ask(job, true);
		return;
	}
	if (pg_atomic_read_u64(&job->slot->final_epoch) <= (uint64) job->epoch)
	{
		/* Said before the epoch is: every subtask's last share knows whether the input is all read. */
		job->slot->final_finished = job->all_finished;
		pg_write_barrier();
		pg_atomic_write_u64(&job->slot->final_epoch, job->epoch + 1);
		pg_memory_barrier();
	}
	request_epoch(job);
}

/* Subtask 0: every subtask's part of a bounded source is read. */
static bool
all_finished(Job *job)
{
	for (int k = 0; k < job->parallelism; k++)
	{
		JobSlot    *slot = job_slots_subtask(job->slot, k);

		if (slot == NULL || !slot->source_finished)
			return false;
	}
	return true;
}

/*
 * This subtask's source watermark to the others, and the keyed stage's
 * windows that the smallest of the inputs' watermarks has passed.
 */
static void
advance_watermark(Job *job, bool finished)
{
	TimestampTz source_wm;
	TimestampTz wm;

	source_wm = watermark_step(job->watermarks, job->source, finished,
							   job->plan->window ? job->spec->max_drift_us : -1);
	shuffle_send_watermark(job, source_wm, watermark_idle(job->watermarks));
	work_xact_begin();
	shuffle_flush(job);
	wm = shuffle_watermark(job);
	if (job->keyed && job->plan->window)
		keyed_advance_watermark(job->keyed, wm);
	work_xact_end();
	watermark_publish(job->watermarks, job->slot);
	job->slot->watermark = wm;
}

/* Cut epoch: barrier, alignment, this subtask's share, the common commit. */
static bool
cut(Job *job, int64 epoch)
{
	bool		final;
	bool		final_seen;

	pg_memory_barrier();
	final = pg_atomic_read_u64(&job->coordinator->final_epoch) == (uint64) epoch;
	work_xact_begin();
	shuffle_send_barrier(job, epoch, final);
	for (;;)
	{
		shuffle_drain(job);
		if (shuffle_aligned(job))
			break;
		subtasks_check(job);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 100,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	if (job->keyed && job->plan->window)
		keyed_advance_watermark(job->keyed, shuffle_watermark(job));
	work_xact_end();
	(void) shuffle_barrier_seen(job, &final_seen);
	final |= final_seen;

	(void) checkpoint_take(job, final);
	shuffle_end_alignment(job);
	wait_marks_answer(job);
	if (!final)
		return false;

	SpinLockAcquire(&job->slot->mutex);
	if (job->subtask == 0 && job->all_finished)
	{
		job->slot->live_state = JOB_LIVE_FINISHED;
		job->slot->exit_kind = JOB_EXIT_FINISHED;
	}
	else
		job->slot->exit_kind = JOB_EXIT_STOPPED;
	SpinLockRelease(&job->slot->mutex);
	wait_marks_answer(job);
	return true;
}

bool
epoch_cut_round(Job *job, bool finished, bool checkpoint_due)
{
	JobSlot    *coordinator = job->coordinator;
	int64		next = job->epoch + 1;

	work_xact_begin();
	shuffle_drain(job);
	work_xact_end();
	subtasks_check(job);
	if (finished && !job->slot->source_finished)
	{
		job->slot->source_finished = true;
		job_slot_wake(coordinator);
	}
	advance_watermark(job, finished);

	if (job->subtask == 0)
	{
		if (pg_atomic_exchange_u32(&job->slot->checkpoint_wanted, 0) != 0)
			checkpoint_due = true;
		/* Known now: once cut, the others exit and free their slots. */
		if (!job->all_finished && all_finished(job))
			job->all_finished = true;
		/*
		 * A job at barrier cuts between cuts stops without a last epoch:
		 * the batch loop's next round ends it (cut_align_stop_checkpoints).
		 */
		if ((pg_atomic_read_u32(&job->slot->final_wanted) != 0 && cut_align_stop_checkpoints(job)) ||
			job->all_finished)
			epoch_cut_request_stop(job);
		else if (checkpoint_due)
			request_epoch(job);
	}
	else if (checkpoint_due && pg_atomic_read_u64(&coordinator->barrier_epoch) < (uint64) next)
		subtasks_ask(job, false);

	wait_marks_answer(job);
	if (pg_atomic_read_u64(&coordinator->barrier_epoch) >= (uint64) next ||
		shuffle_barrier_seen(job, NULL) >= next)
		return cut(job, next);
	return false;
}
