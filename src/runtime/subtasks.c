/*
 * subtasks.c
 *		Starting and watching a parallel job's subtasks (subtasks.h).
 *
 * The launcher knows jobs, not subtasks: it starts subtask 0 in the job's
 * slot as for any job.  Subtask 0 claims a slot for each other subtask and
 * registers its worker, which connects as the owner and attaches to the
 * queues subtask 0 made.  A subtask that stops, for whatever reason,
 * detaches from the queues; the others fail at their next send, receive
 * or check, and the launcher restarts the job from its last committed
 * epoch with all its subtasks.
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"

#include "base/mailer.h"
#include "runtime/subtasks.h"

/* How long subtask 0 waits for the subtasks of an earlier run to exit. */
#define PREVIOUS_RUN_WAIT_MS	30000

/* Subtask 0: the workers it registered, by subtask (one job per process). */
static BackgroundWorkerHandle **handles = NULL;
static int	nhandles = 0;
static int	coordinator_index = -1;

static void stop_subtasks(int code, Datum arg);

static bool
previous_left(JobSlot *coordinator)
{
	bool		left = false;

	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	for (int i = 0; i < mailer_shared->nslots && !left; i++)
	{
		JobSlot    *slot = &mailer_shared->slots[i];

		left = slot->job_id == coordinator->job_id && slot->ext_oid == coordinator->ext_oid &&
			slot->subtask > 0;
	}
	LWLockRelease(mailer_shared->lock);
	return left;
}

void
subtasks_wait_for_previous(JobSlot *coordinator)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PREVIOUS_RUN_WAIT_MS);

	while (previous_left(coordinator))
	{
		if (GetCurrentTimestamp() > until)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("subtasks of the job's previous run are still running")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

void
subtasks_start(const JobWorkerArgs *args, Job *job, dsm_handle exchange)
{
	int			coordinator = job->slot - mailer_shared->slots;

	handles = MemoryContextAllocZero(TopMemoryContext, sizeof(BackgroundWorkerHandle *) * job->parallelism);
	nhandles = job->parallelism;
	coordinator_index = coordinator;
	/* However subtask 0 leaves, its subtasks go with it, as a parallel query's workers do. */
	before_shmem_exit(stop_subtasks, (Datum) 0);
	for (int k = 1; k < job->parallelism; k++)
	{
		BackgroundWorker worker;
		JobWorkerArgs child = *args;
		int			i = job_slots_claim_subtask(coordinator, k);
		JobSlot    *slot;

		if (i < 0)
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("no free job slot for subtask %d of %d", k, job->parallelism),
					 errhint("A job takes one slot per subtask: raise mailer.max_jobs, or lower the job's parallelism.")));
		slot = &mailer_shared->slots[i];
		SpinLockAcquire(&slot->mutex);
		slot->parallelism = job->parallelism;
		slot->generation = args->generation;
		slot->registered = true;
		SpinLockRelease(&slot->mutex);

		child.slot = i;
		child.subtask = k;
		child.exchange = exchange;
		memset(&worker, 0, sizeof(worker));
		worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
		worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
		worker.bgw_restart_time = BGW_NEVER_RESTART;
		worker.bgw_notify_pid = MyProcPid;
		strlcpy(worker.bgw_library_name, MAILER_EXTENSION, BGW_MAXLEN);
		strlcpy(worker.bgw_function_name, "job_worker_main", BGW_MAXLEN);
		snprintf(worker.bgw_name, BGW_MAXLEN, "mailer job %s subtask %d", job->name, k);
		strlcpy(worker.bgw_type, "mailer job", BGW_MAXLEN);
		memcpy(worker.bgw_extra, &child, sizeof(child));
		if (!RegisterDynamicBackgroundWorker(&worker, &handles[k]))
		{
			subtasks_release(slot);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("could not start subtask %d of %d: no free background worker", k, job->parallelism),
					 errhint("Raise max_worker_processes: it counts every subtask of every running job.")));
		}
	}
}

bool
subtasks_coordinator_alive(Job *job)
{
	bool		alive;

	/* The same subtask 0 of the same run: a new run's may have taken its slot since. */
	SpinLockAcquire(&job->coordinator->mutex);
	alive = job->coordinator->pid == job->coordinator_pid &&
		job->coordinator->job_id == job->job_id &&
		job->coordinator->generation == job->generation;
	SpinLockRelease(&job->coordinator->mutex);
	return alive;
}

void
subtasks_ask(Job *job, bool stop)
{
	JobSlot    *coordinator = job->coordinator;
	pg_atomic_uint32 *flag = stop ? &coordinator->final_wanted : &coordinator->checkpoint_wanted;
	bool		first = false;

	/* Under the slot's lock a new run's subtask 0 resets it with: never into another run's. */
	SpinLockAcquire(&coordinator->mutex);
	if (coordinator->pid == job->coordinator_pid && coordinator->job_id == job->job_id &&
		coordinator->generation == job->generation)
		first = pg_atomic_exchange_u32(flag, 1) == 0;
	SpinLockRelease(&coordinator->mutex);
	if (first)
		job_slot_wake(coordinator);
}

bool
subtasks_run_ended(Job *job)
{
	bool		ended;

	if (job->subtask == 0)
		return false;
	SpinLockAcquire(&job->coordinator->mutex);
	ended = job->coordinator->job_id == job->job_id && job->coordinator->generation == job->generation &&
		job->coordinator->cuts.ended;
	SpinLockRelease(&job->coordinator->mutex);
	return ended;
}

void
subtasks_wake_all(Job *job)
{
	for (int k = 0; k < job->parallelism; k++)
	{
		JobSlot    *slot = job_slots_subtask(job->coordinator, k);

		if (slot)
			job_slot_wake(slot);
	}
}

void
subtasks_check(Job *job)
{
	if (job->subtask != 0)
	{
		if (!subtasks_coordinator_alive(job))
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("subtask 0 of the job has stopped")));
		return;
	}
	for (int k = 1; k < job->parallelism; k++)
	{
		JobSlot    *slot = job_slots_subtask(job->slot, k);
		bool		alive = false;
		pid_t		pid;

		if (slot)
		{
			SpinLockAcquire(&slot->mutex);
			alive = slot->registered || slot->pid != 0;
			SpinLockRelease(&slot->mutex);
		}
		/* Registered, but the postmaster could not start it, or it died before it said so. */
		if (alive && handles && handles[k] &&
			GetBackgroundWorkerPid(handles[k], &pid) == BGWH_STOPPED)
			alive = false;
		if (!alive)
		{
			char		error[JOB_SLOT_ERROR_LEN];

			SpinLockAcquire(&job->slot->mutex);
			strlcpy(error, job->slot->error, sizeof(error));
			SpinLockRelease(&job->slot->mutex);
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("subtask %d of the job has stopped%s%s", k, error[0] ? ": " : "", error),
					 errdetail("The job restarts from its last committed checkpoint with all its subtasks.")));
		}
	}
}

/*
 * Subtask 0 exits: ask its subtasks to stop (they would fail at their next
 * look at the queues anyway), and free the slot of any whose worker never
 * started, which nobody else would.
 */
static void
stop_subtasks(int code, Datum arg)
{
	for (int k = 1; k < nhandles; k++)
	{
		JobSlot    *slot;

		if (handles[k] == NULL)
			continue;
		TerminateBackgroundWorker(handles[k]);

		/*
		 * A worker that has not claimed its slot yet never will: the slot
		 * is freed now, and a late start finds it no longer its own.
		 */
		slot = job_slots_subtask(&mailer_shared->slots[coordinator_index], k);
		if (slot)
			subtasks_release(slot);
	}
}

void
subtasks_release(JobSlot *slot)
{
	JobSlot    *coordinator = &mailer_shared->slots[slot->coordinator];
	bool		mine;

	LWLockAcquire(mailer_shared->lock, LW_EXCLUSIVE);
	SpinLockAcquire(&slot->mutex);
	/* Not claimed by a worker (or by this exiting one), and still a subtask's: free it. */
	mine = slot->job_id != 0 && slot->subtask > 0 && (slot->pid == 0 || slot->pid == MyProcPid);
	if (mine)
	{
		SpinLockAcquire(&coordinator->mutex);
		/* Why the run ended, unless subtask 0 has said so already, or has gone. */
		if (slot->error[0] && coordinator->job_id == slot->job_id && coordinator->subtask == 0 &&
			coordinator->pid != 0 && coordinator->generation == slot->generation &&
			coordinator->error[0] == '\0')
		{
			snprintf(coordinator->error, JOB_SLOT_ERROR_LEN, "subtask %d: %s", slot->subtask, slot->error);
			coordinator->error_at = slot->error_at;
		}
		SpinLockRelease(&coordinator->mutex);
		slot->job_id = 0;
		slot->subtask = 0;
		slot->pid = 0;
		slot->registered = false;
	}
	SpinLockRelease(&slot->mutex);
	LWLockRelease(mailer_shared->lock);
	if (mine)
		job_slot_wake(coordinator);
}
