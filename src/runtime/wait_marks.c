/*
 * wait_marks.c
 *		wait_job's end marks (wait_marks.h).
 *
 * wait_job raises the slot's wait_requested; the worker marks the source's
 * end for it between batches and, once a checkpoint has committed all the
 * input up to the mark, raises wait_answered to what it took up and wakes
 * the waiters.  In a parallel job the request is subtask 0's; each other
 * subtask marks its own partitions and says in its own slot what it has
 * reached, and subtask 0 answers what all have.
 */
#include "postgres.h"

#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/spin.h"

#include "runtime/wait_marks.h"

void
wait_marks_take(Job *job)
{
	uint64		requested;

	SpinLockAcquire(&job->coordinator->mutex);
	requested = job->coordinator->wait_requested;
	SpinLockRelease(&job->coordinator->mutex);
	if (requested <= job->wait_pending)
		return;
	job->source->ops->mark_end(job->source);
	job->wait_pending = requested;
}

/*
 * Whether everything this worker's source had at the mark is committed,
 * and handed on: a Kafka sink's output published.
 */
static bool
reached(Job *job)
{
	if (job->wait_pending == 0 || job->uncommitted > 0 || job->publish_pending)
		return false;
	/* A source read to its end is answered by the final checkpoint, as finished. */
	if (job->parallelism == 1 && job->source->ops->finished(job->source) &&
		job->slot->live_state != JOB_LIVE_FINISHED)
		return false;
	return job->source->ops->reached_end(job->source);
}

void
wait_marks_answer(Job *job)
{
	uint64		answer;
	bool		raised;

	if (reached(job))
		job->wait_reached = job->wait_pending;
	answer = job->wait_reached;
	if (job->subtask > 0)
	{
		SpinLockAcquire(&job->slot->mutex);
		raised = job->slot->wait_answered < answer;
		if (raised)
			job->slot->wait_answered = answer;
		SpinLockRelease(&job->slot->mutex);
		if (raised)
			job_slot_wake(job->coordinator);
		return;
	}
	for (int k = 1; k < job->parallelism; k++)
	{
		JobSlot    *slot = job_slots_subtask(job->slot, k);

		if (slot == NULL)
			return;
		SpinLockAcquire(&slot->mutex);
		answer = Min(answer, slot->wait_answered);
		SpinLockRelease(&slot->mutex);
	}
	SpinLockAcquire(&job->slot->mutex);
	raised = job->slot->wait_answered < answer;
	if (raised)
		job->slot->wait_answered = answer;
	SpinLockRelease(&job->slot->mutex);
	if (raised)
		ConditionVariableBroadcast(&job->slot->progress_cv);
}
