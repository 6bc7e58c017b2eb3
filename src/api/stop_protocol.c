/*
 * stop_protocol.c
 *		How the SQL functions wait for the launcher and a job's worker.
 *
 * stop_job and drop_job ask the worker, through its slot, to take a final
 * checkpoint and exit, and wait for it; start_job and restore_job wait for
 * the launcher to record the exit of the last worker before they write what
 * it would otherwise write over; drop_job and restore_job hold the job's
 * lock so that no worker runs the job until they commit.
 *
 * Design: docs/ARCHITECTURE.md, "The job lock".
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "api/job_control.h"
#include "base/mailer.h"
#include "jobs/job_slots.h"

static void wait_a_moment(void);

void
request_stop_and_wait(JobRow *job, long timeout_ms)
{
	JobSlot    *slot;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	Oid			ext_oid = get_extension_oid(MAILER_EXTENSION, false);
	TransactionId xid = GetTopTransactionId();

	slot = job_slot_lock(job->job_id, ext_oid);
	if (slot == NULL)
		return;
	job_slot_request_stop(slot, xid);
	job_slot_unlock(slot);

	job_control_remember_stop(job->job_id, ext_oid);
	job_control_wake_launcher_after_commit();

	for (;;)
	{
		bool		alive;
		long		remaining;

		/* A worker registered but not started yet could still run: wait for it too. */
		SpinLockAcquire(&slot->mutex);
		alive = slot->job_id == job->job_id && slot->ext_oid == ext_oid &&
			(slot->pid != 0 || slot->registered);
		SpinLockRelease(&slot->mutex);
		if (!alive)
			break;
		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (remaining <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("job \"%s\" did not stop within %ld ms", job->name, timeout_ms),
					 errhint("Its final checkpoint may be slow; try again with a longer timeout: mailer.stop_job('%s', '5 minutes').",
							 job->name)));
		(void) ConditionVariableTimedSleep(&slot->progress_cv, Min(remaining, 1000),
										   PG_WAIT_EXTENSION);
		CHECK_FOR_INTERRUPTS();
	}
	ConditionVariableCancelSleep();
}

/*
 * A worker that has exited leaves its slot as it was until the launcher has
 * recorded why it exited.  Were start_job to commit first, the launcher
 * would then record the old exit over it ('finished' or 'failed': the job
 * never starts again) or, after a stop, could not tell the stop request
 * left in the slot from a stop_job still in progress and would keep the
 * slot, with no worker, for good.  So wait for the launcher here, before
 * writing anything it would have to wait for.  A stop requested in this
 * very transaction cannot finish before it commits: starting the job again
 * withdraws it.  restore_job waits the same way for a worker's exit to be
 * recorded (or the launcher would write 'finished' over the restored job's
 * 'stopped'), but leaves stop requests alone.
 */
void
wait_for_launcher_to_settle(JobRow *job, bool starting, long timeout_ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	Oid			ext_oid = get_extension_oid(MAILER_EXTENSION, false);
	bool		ours = starting && job_control_stopped_here(job->job_id);

	for (;;)
	{
		JobSlot    *slot = job_slot_lock(job->job_id, ext_oid);
		bool		leftover = false;

		if (slot)
		{
			if (ours)
				slot->stop_requested = false;

			/*
			 * A worker that has finished is about to exit: that exit, too.
			 * Before a restore, so is one registered and not started yet.
			 */
			leftover = slot->live_state == JOB_LIVE_FINISHED ||
				(!starting && slot->registered) ||
				(slot->pid == 0 &&
				 ((starting && slot->stop_requested) || slot->live_state != JOB_LIVE_NONE ||
				  slot->exit_kind != JOB_EXIT_NONE));
			job_slot_unlock(slot);
		}
		if (!leftover)
			return;
		if (TimestampDifferenceExceeds(deadline, GetCurrentTimestamp(), 0))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("job \"%s\" cannot be %s yet", job->name, starting ? "started" : "restored"),
					 errdetail("Its last worker has exited but the launcher has not recorded it, or a stop of the job has not committed."),
					 errhint("Commit any transaction that stops the job, check that the mailer launcher runs, then try again.")));
		job_slots_wake_launcher();
		wait_a_moment();
	}
}

bool
job_lock_wait(JobRow *job, Oid ext_oid, long timeout_ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	while (!job_lock_try(ext_oid, job->job_id, false))
	{
		if (TimestampDifferenceExceeds(deadline, GetCurrentTimestamp(), 0))
			return false;
		wait_a_moment();
	}
	return true;
}

bool
job_worker_alive(JobRow *job, Oid ext_oid)
{
	JobSlot    *slot = job_slot_lock(job->job_id, ext_oid);
	bool		alive = false;

	if (slot)
	{
		alive = slot->pid != 0 || slot->registered;
		job_slot_unlock(slot);
	}
	return alive;
}

/* 10 ms, or less if our latch is set; then answer interrupts. */
static void
wait_a_moment(void)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
					 PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}
