/*
 * job_slots.c
 *		Shared memory for running jobs: allocation and the small helpers
 *		that every process touching a slot uses.
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/shmem.h"
#include "utils/fmgrprotos.h"

#include "base/mailer.h"
#include "jobs/job_slots.h"

MailerShared *mailer_shared = NULL;

const char *const job_counter_names[JC_NUM_COUNTERS] = {
	"records_in",
	"records_accepted",
	"records_filtered",
	"records_dead_lettered",
	"records_skipped",
	"records_late",
	"records_out",
	"checkpoints"
};

const char *const job_wait_for_names[] = {NULL, "broker", "table", "lock"};

Datum
job_counters_jsonb(const uint64 *counters)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int c = 0; c < JC_NUM_COUNTERS; c++)
		appendStringInfo(&buf, "%s\"%s\": " UINT64_FORMAT, c ? ", " : "", job_counter_names[c],
						 counters[c]);
	appendStringInfoChar(&buf, '}');
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
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
	mailer_shared = ShmemInitStruct("mailer", job_slots_shmem_size(), &found);
	if (!found)
	{
		memset(mailer_shared, 0, job_slots_shmem_size());
		mailer_shared->lock = &(GetNamedLWLockTranche("mailer"))->lock;
		mailer_shared->nslots = mailer_max_jobs;
		for (int i = 0; i < mailer_max_jobs; i++)
		{
			JobSlot    *slot = &mailer_shared->slots[i];

			SpinLockInit(&slot->mutex);
			for (int c = 0; c < JC_NUM_COUNTERS; c++)
				pg_atomic_init_u64(&slot->counters[c], 0);
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
			(ext_oid == InvalidOid || mailer_shared->slots[i].ext_oid == ext_oid))
			return &mailer_shared->slots[i];
	}
	return NULL;
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
	{
		ConditionVariableBroadcast(&slot->progress_cv);
		job_slots_wake_launcher();
	}
}

bool
job_lock_try(Oid ext_oid, int64 job_id, bool session)
{
	LOCKTAG		tag;

	/* Job ids above 2^32 share a lock with a smaller one: a needless wait, never a second worker. */
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, ext_oid, (uint32) job_id, JOB_LOCK_CLASS);
	return LockAcquire(&tag, ExclusiveLock, session, true) != LOCKACQUIRE_NOT_AVAIL;
}
