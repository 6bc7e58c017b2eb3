/*
 * job_view.c
 *		A job's live state read from its slots (job_view.h), for the views
 *		(api/metrics.c) and the one-second history (jobs/job_history.c),
 *		so that both sum a parallel job's subtasks the same way.
 */
#include "postgres.h"

#include "jobs/job_view.h"

void
job_view_read(JobSlot *slot, JobView *v)
{
	SpinLockAcquire(&slot->mutex);
	v->job_id = slot->job_id;
	v->subtask = slot->subtask;
	v->pid = slot->pid;
	v->live_state = slot->live_state;
	v->waiting_for = slot->waiting_for;
	/* A finished worker may be gone before the launcher records it. */
	v->live = slot->live_state != JOB_LIVE_NONE &&
		(slot->pid != 0 || slot->live_state == JOB_LIVE_FINISHED);
	/* A worker's last error (it may quote a record) is the launcher's to record. */
	v->no_error = slot->error[0] == '\0' || slot->pid == 0 || slot->exit_kind != JOB_EXIT_NONE;
	strlcpy(v->error, slot->error, sizeof(v->error));
	v->error_at = slot->error_at;
	SpinLockRelease(&slot->mutex);
	for (int c = 0; c < JC_NUM_COUNTERS; c++)
		v->counters[c] = pg_atomic_read_u64(&slot->counters[c]);
	v->input_rate = slot->input_rate;
	v->last_checkpoint_epoch = slot->last_checkpoint_epoch;
	v->last_checkpoint_at = slot->last_checkpoint_at;
	v->last_checkpoint_ms = slot->last_checkpoint_ms;
	v->watermark = slot->watermark;
	v->state_bytes = slot->state_bytes;
	v->consumer_lag = slot->consumer_lag;
	v->state_checkpoint_ms = slot->state_checkpoint_ms;
	v->state_restore_ms = slot->state_restore_ms;
}

/* A sum of quantities where a negative one is unknown: unknown only if both are. */
static int64
add_known(int64 a, int64 b)
{
	return a < 0 ? b : b < 0 ? a : a + b;
}

void
job_view_add_subtask(JobView *v, const JobView *sub)
{
	for (int c = 0; c < JC_NUM_COUNTERS; c++)
		if (c != JC_CHECKPOINTS)
			v->counters[c] += sub->counters[c];
	v->input_rate += sub->input_rate;
	/* Unknown while one subtask's is: a sum of the others would look caught up. */
	v->consumer_lag = v->consumer_lag < 0 || sub->consumer_lag < 0 ? -1 : v->consumer_lag + sub->consumer_lag;
	v->state_bytes = add_known(v->state_bytes, sub->state_bytes);
	v->state_checkpoint_ms = Max(v->state_checkpoint_ms, sub->state_checkpoint_ms);
	v->state_restore_ms = Max(v->state_restore_ms, sub->state_restore_ms);
	/* A subtask without a watermark yet holds the job's back. */
	if (TIMESTAMP_NOT_FINITE(sub->watermark) || sub->watermark < v->watermark)
		v->watermark = sub->watermark;
	/* The job waits while one of its subtasks does, and says why. */
	if (v->live_state == JOB_LIVE_RUNNING && sub->live && sub->live_state == JOB_LIVE_WAITING)
	{
		v->live_state = JOB_LIVE_WAITING;
		v->waiting_for = sub->waiting_for;
		if (!sub->no_error)
		{
			v->no_error = false;
			strlcpy(v->error, sub->error, sizeof(v->error));
			v->error_at = sub->error_at;
		}
	}
	else if (v->no_error && !sub->no_error)
	{
		v->no_error = false;
		strlcpy(v->error, sub->error, sizeof(v->error));
		v->error_at = sub->error_at;
	}
}

void
job_view_read_job(JobSlot *coordinator, JobView *v)
{
	JobView		sub;

	job_view_read(coordinator, v);
	for (int k = 1; k < coordinator->parallelism; k++)
	{
		JobSlot    *slot = job_slots_subtask(coordinator, k);

		if (slot == NULL)
			continue;
		job_view_read(slot, &sub);
		job_view_add_subtask(v, &sub);
	}
}
