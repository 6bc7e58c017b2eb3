/*
 * wait_marks.c
 *		wait_job's end marks (wait_marks.h).
 *
 * wait_job raises the slot's wait_requested; the worker marks the source's
 * end for it between batches and, once a checkpoint has committed all the
 * input up to the mark, raises wait_answered to what it took up and wakes
 * the waiters.
 */
#include "postgres.h"

#include "storage/condition_variable.h"
#include "storage/spin.h"

#include "runtime/wait_marks.h"

void
wait_marks_take(Job *job)
{
	uint64		requested;

	SpinLockAcquire(&job->slot->mutex);
	requested = job->slot->wait_requested;
	SpinLockRelease(&job->slot->mutex);
	if (requested <= job->wait_pending)
		return;
	job->source->ops->mark_end(job->source);
	job->wait_pending = requested;
}

void
wait_marks_answer(Job *job)
{
	bool		answer;

	if (job->wait_pending == 0 || job->uncommitted > 0)
		return;
	/* A source read to its end is answered by the final checkpoint, as finished. */
	if (job->source->ops->finished(job->source) && job->slot->live_state != JOB_LIVE_FINISHED)
		return;
	if (!job->source->ops->reached_end(job->source))
		return;
	SpinLockAcquire(&job->slot->mutex);
	answer = job->slot->wait_answered < job->wait_pending;
	if (answer)
		job->slot->wait_answered = job->wait_pending;
	SpinLockRelease(&job->slot->mutex);
	if (answer)
		ConditionVariableBroadcast(&job->slot->progress_cv);
}
