/*
 * job_slots.c
 *		Shared memory for running jobs: allocation and the small helpers
 *		that every process touching a slot uses.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/shmem.h"

#include "base/mailer.h"
#include "jobs/job_slots.h"

MailerShared *mailer_shared = NULL;

const char *const job_wait_for_names[] = {NULL, "broker", "table", "lock"};

void
mailer_require_preload(void)
{
	if (mailer_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("mailer is not loaded through shared_preload_libraries"),
				 errhint("Add 'mailer' to shared_preload_libraries in postgresql.conf and restart the server.")));
}

Size
job_slots_shmem_size(void)
{
	return add_size(offsetof(MailerShared, slots),
					mul_size(sizeof(JobSlot), mailer_max_jobs));
}

void
job_slots_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	mailer_shared = ShmemInitStruct(MAILER_EXTENSION, job_slots_shmem_size(), &found);
	if (!found)
	{
		memset(mailer_shared, 0, job_slots_shmem_size());
		mailer_shared->lock = &(GetNamedLWLockTranche(MAILER_EXTENSION))->lock;
		mailer_shared->nslots = mailer_max_jobs;
		for (int i = 0; i < mailer_max_jobs; i++)
		{
			JobSlot    *slot = &mailer_shared->slots[i];

			SpinLockInit(&slot->mutex);
			for (int c = 0; c < JC_NUM_COUNTERS; c++)
				pg_atomic_init_u64(&slot->counters[c], 0);
			pg_atomic_init_u64(&slot->barrier_epoch, 0);
			pg_atomic_init_u64(&slot->committed_epoch, 0);
			pg_atomic_init_u64(&slot->prepared_epoch, 0);
			pg_atomic_init_u32(&slot->checkpoint_wanted, 0);
			pg_atomic_init_u32(&slot->final_wanted, 0);
			pg_atomic_init_u64(&slot->final_epoch, 0);
			job_histogram_init(&slot->checkpoint_duration);
			job_histogram_init(&slot->produce_to_commit);
			ConditionVariableInit(&slot->progress_cv);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

JobSlot *
job_slots_find(int64 job_id, Oid ext_oid)
{
	for (int i = 0; i < mailer_shared->nslots; i++)
	{
		if (mailer_shared->slots[i].job_id == job_id &&
			mailer_shared->slots[i].subtask == 0 &&
			(ext_oid == InvalidOid || mailer_shared->slots[i].ext_oid == ext_oid))
			return &mailer_shared->slots[i];
	}
	return NULL;
}

JobSlot *
job_slot_lock(int64 job_id, Oid ext_oid)
{
	JobSlot    *slot;

	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	slot = job_slots_find(job_id, ext_oid);
	if (slot == NULL)
	{
		LWLockRelease(mailer_shared->lock);
		return NULL;
	}
	SpinLockAcquire(&slot->mutex);
	return slot;
}

void
job_slot_unlock(JobSlot *slot)
{
	SpinLockRelease(&slot->mutex);
	LWLockRelease(mailer_shared->lock);
}

JobSlot *
job_slots_next(Oid ext_oid, int *pos)
{
	while (++(*pos) < mailer_shared->nslots)
	{
		JobSlot    *slot = &mailer_shared->slots[*pos];

		/* Free slots, and workers of a dropped installation of mailer, are skipped. */
		if (slot->job_id != 0 && slot->ext_oid == ext_oid && slot->subtask == 0)
			return slot;
	}
	return NULL;
}

/* A free slot made ready for a worker of job_id; the caller holds the lock. */
static void
slot_reset(JobSlot *slot, int64 job_id, Oid ext_oid, int subtask, int coordinator)
{
	slot->job_id = job_id;
	slot->ext_oid = ext_oid;
	slot->subtask = subtask;
	slot->parallelism = 1;
	slot->coordinator = coordinator;
	slot->exchange = DSM_HANDLE_INVALID;
	slot->pid = 0;
	slot->latch = NULL;
	slot->live_state = JOB_LIVE_NONE;
	slot->exit_kind = JOB_EXIT_NONE;
	slot->stop_requested = false;
	slot->registered = false;
	slot->error[0] = '\0';
	slot->wait_requested = slot->wait_answered = 0;
	slot->npartitions = 0;
	slot->last_checkpoint_epoch = 0;
	slot->watermark = DT_NOBEGIN;
	slot->state_bytes = -1;
	slot->state_checkpoint_ms = slot->state_restore_ms = -1;
	slot->consumer_lag = -1;
	slot->input_rate = 0;
	slot->cut_rewinds_unsaved = 0;
	for (int c = 0; c < JC_NUM_COUNTERS; c++)
		pg_atomic_write_u64(&slot->counters[c], 0);
	job_slot_reset_run(slot);
}

void
job_slot_reset_run(JobSlot *slot)
{
	pg_atomic_write_u64(&slot->barrier_epoch, 0);
	pg_atomic_write_u64(&slot->committed_epoch, 0);
	pg_atomic_write_u64(&slot->prepared_epoch, 0);
	pg_atomic_write_u64(&slot->final_epoch, 0);
	pg_atomic_write_u32(&slot->checkpoint_wanted, 0);
	pg_atomic_write_u32(&slot->final_wanted, 0);
	slot->final_finished = false;
	slot->source_finished = false;
	memset(&slot->cuts, 0, sizeof(slot->cuts));
	/* A worker's histograms count since it started (Prometheus sees a reset). */
	job_histogram_reset(&slot->checkpoint_duration);
	job_histogram_reset(&slot->produce_to_commit);
}

static int
claim(int64 job_id, Oid ext_oid, int subtask, int coordinator)
{
	int			found = -1;

	LWLockAcquire(mailer_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < mailer_shared->nslots && found < 0; i++)
	{
		if (mailer_shared->slots[i].job_id != 0)
			continue;
		found = i;
		slot_reset(&mailer_shared->slots[i], job_id, ext_oid, subtask,
				   coordinator >= 0 ? coordinator : i);
	}
	LWLockRelease(mailer_shared->lock);
	return found;
}

int
job_slots_claim(int64 job_id, Oid ext_oid)
{
	return claim(job_id, ext_oid, 0, -1);
}

/* A slot for the coordinator's subtask; -1 when none is free. */
int
job_slots_claim_subtask(int coordinator, int subtask)
{
	JobSlot    *c = &mailer_shared->slots[coordinator];

	return claim(c->job_id, c->ext_oid, subtask, coordinator);
}

/* A running subtask's slot of the coordinator's job; NULL when it has none. */
JobSlot *
job_slots_subtask(JobSlot *coordinator, int subtask)
{
	int			ci = coordinator - mailer_shared->slots;

	if (subtask == 0)
		return coordinator;
	for (int i = 0; i < mailer_shared->nslots; i++)
	{
		JobSlot    *slot = &mailer_shared->slots[i];

		if (slot->job_id == coordinator->job_id && slot->ext_oid == coordinator->ext_oid &&
			slot->coordinator == ci && slot->subtask == subtask)
			return slot;
	}
	return NULL;
}

void
job_slot_request_stop(JobSlot *slot, TransactionId xid)
{
	slot->stop_requested = true;
	slot->stop_xid = xid;
	job_slot_wake(slot);
}

bool
job_stop_requested(JobSlot *slot)
{
	bool		requested;

	if (ShutdownRequestPending)
		return true;
	SpinLockAcquire(&slot->mutex);
	requested = slot->stop_requested;
	SpinLockRelease(&slot->mutex);
	return requested;
}

void
job_slot_wake(JobSlot *slot)
{
	Latch	   *latch = slot->latch;

	if (latch)
		SetLatch(latch);
}

void
job_slot_changed(JobSlot *slot)
{
	ConditionVariableBroadcast(&slot->progress_cv);
	job_slots_wake_launcher();
}

void
job_slots_wake_launcher(void)
{
	Latch	   *latch = mailer_shared->launcher_latch;

	if (latch != NULL)
		SetLatch(latch);
}

void
job_slot_set_error(JobSlot *slot, const char *msg)
{
	SpinLockAcquire(&slot->mutex);
	strlcpy(slot->error, msg ? msg : "", JOB_SLOT_ERROR_LEN);
	slot->error_at = msg ? GetCurrentTimestamp() : 0;
	SpinLockRelease(&slot->mutex);
}

void
job_slot_set_waiting(JobSlot *slot, JobWaitFor what, const char *why)
{
	bool		changed;

	SpinLockAcquire(&slot->mutex);
	if (what != JOB_WAIT_NONE)
	{
		changed = slot->live_state != JOB_LIVE_WAITING || slot->waiting_for != what;
		slot->live_state = JOB_LIVE_WAITING;
		slot->waiting_for = what;
		/* The time the wait began, not the time it was last seen. */
		if (why && strncmp(slot->error, why, JOB_SLOT_ERROR_LEN - 1) != 0)
		{
			strlcpy(slot->error, why, JOB_SLOT_ERROR_LEN);
			slot->error_at = GetCurrentTimestamp();
			changed = true;
		}
	}
	else
	{
		changed = slot->live_state == JOB_LIVE_WAITING;
		if (changed)
			slot->live_state = JOB_LIVE_RUNNING;
		slot->waiting_for = JOB_WAIT_NONE;
	}
	SpinLockRelease(&slot->mutex);
	if (changed)
		job_slot_changed(slot);
}

bool
job_lock_try(Oid ext_oid, int64 job_id, bool session)
{
	LOCKTAG		tag;

	/* Job ids above 2^32 share a lock with a smaller one: a needless wait, never a second worker. */
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, ext_oid, (uint32) job_id, JOB_LOCK_CLASS);
	return LockAcquire(&tag, ExclusiveLock, session, true) != LOCKACQUIRE_NOT_AVAIL;
}
