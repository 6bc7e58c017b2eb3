/*
 * job_history.c
 *		The rings of per-job samples behind the dashboard's charts
 *		(job_history.h).
 *
 * A ring belongs to a job (installation of mailer and job id) from its
 * first sample until another job needs it: a stopped job's history stays
 * on view until then, and the ring sampled least recently is the one
 * taken.  There are as many rings as slots, so every job with a slot has
 * one.
 */
#include "postgres.h"

#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "base/mailer.h"
#include "jobs/job_history.h"
#include "jobs/job_slots.h"
#include "jobs/job_view.h"

#define JOB_HISTORY_TRANCHE "mailer history"

typedef struct JobHistoryRing
{
	int64		job_id;			/* 0: never used */
	Oid			ext_oid;
	int32		restarts;		/* as last noted */
	int			head;			/* index of the oldest sample */
	int			count;
	JobHistorySample samples[JOB_HISTORY_SECONDS];
} JobHistoryRing;

typedef struct JobHistoryShared
{
	LWLock	   *lock;			/* protects the rings */
	int			nrings;
	JobHistoryRing rings[FLEXIBLE_ARRAY_MEMBER];
} JobHistoryShared;

static JobHistoryShared *job_history = NULL;

/* A job's sample as read from its slots, before it goes into its ring. */
typedef struct Sampled
{
	Oid			ext_oid;
	int64		job_id;
	JobHistorySample s;
} Sampled;

bool
job_history_enabled(void)
{
	/* Only the HTTP worker samples and reads the rings. */
	return mailer_http_port > 0;
}

Size
job_history_shmem_size(void)
{
	return add_size(offsetof(JobHistoryShared, rings),
					mul_size(sizeof(JobHistoryRing), mailer_max_jobs));
}

void
job_history_request_locks(void)
{
	RequestNamedLWLockTranche(JOB_HISTORY_TRANCHE, 1);
}

void
job_history_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	job_history = ShmemInitStruct(JOB_HISTORY_TRANCHE, job_history_shmem_size(), &found);
	if (!found)
	{
		memset(job_history, 0, job_history_shmem_size());
		job_history->lock = &(GetNamedLWLockTranche(JOB_HISTORY_TRANCHE))->lock;
		job_history->nrings = mailer_max_jobs;
	}
	LWLockRelease(AddinShmemInitLock);
}

static int64
unix_seconds(TimestampTz t)
{
	return t / USECS_PER_SEC +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY;
}

/*
 * The sample of the job whose subtask 0 has the slot coordinator, its
 * subtasks summed as mailer.metrics sums them (jobs/job_view.c).  Caller
 * holds mailer_shared->lock.
 */
static void
sample_job(JobSlot *coordinator, TimestampTz now, JobHistorySample *s)
{
	JobView		v;

	job_view_read_job(coordinator, &v);
	memset(s, 0, sizeof(*s));
	s->at = unix_seconds(now);
	s->records_in = v.counters[JC_RECORDS_IN];
	s->records_out = v.counters[JC_RECORDS_OUT];
	s->records_dead_lettered = v.counters[JC_RECORDS_DEAD_LETTERED];
	s->records_late = v.counters[JC_RECORDS_LATE];
	s->consumer_lag = v.consumer_lag;
	s->watermark_delay_ms = TIMESTAMP_NOT_FINITE(v.watermark) ? -1 :
		Max(now - v.watermark, 0) / 1000;
	s->last_checkpoint_ms = v.last_checkpoint_epoch == 0 ? -1 : v.last_checkpoint_ms;
	s->state = v.live ? v.live_state : -1;
}

/* The job's ring, or NULL; caller holds job_history->lock. */
static JobHistoryRing *
find_ring(Oid ext_oid, int64 job_id)
{
	for (int i = 0; i < job_history->nrings; i++)
	{
		JobHistoryRing *ring = &job_history->rings[i];

		if (ring->job_id == job_id && ring->ext_oid == ext_oid)
			return ring;
	}
	return NULL;
}

/* The job's ring, taken from the job sampled least recently if it has none. */
static JobHistoryRing *
ring_for(Oid ext_oid, int64 job_id)
{
	JobHistoryRing *ring = find_ring(ext_oid, job_id);
	int64		oldest = PG_INT64_MAX;

	if (ring != NULL)
		return ring;
	for (int i = 0; i < job_history->nrings; i++)
	{
		JobHistoryRing *r = &job_history->rings[i];
		int64		last = r->count == 0 ? PG_INT64_MIN :
			r->samples[(r->head + r->count - 1) % JOB_HISTORY_SECONDS].at;

		if (last < oldest)
		{
			oldest = last;
			ring = r;
		}
	}
	ring->job_id = job_id;
	ring->ext_oid = ext_oid;
	ring->restarts = 0;
	ring->head = ring->count = 0;
	return ring;
}

/* Add the sample s to the ring: the newest of its second replaces another of the same. */
static void
ring_put(JobHistoryRing *ring, JobHistorySample *s)
{
	int			newest = (ring->head + ring->count - 1) % JOB_HISTORY_SECONDS;
	JobHistorySample *prev = ring->count > 0 ? &ring->samples[newest] : NULL;

	s->restarts = ring->restarts;

	/*
	 * A worker starting again shows zero counters until it has restored
	 * its checkpoint: the cumulative counters carry on instead of dropping.
	 */
	if (prev != NULL && (s->state == -1 || s->state == JOB_LIVE_STARTING))
	{
		s->records_in = Max(s->records_in, prev->records_in);
		s->records_out = Max(s->records_out, prev->records_out);
		s->records_dead_lettered = Max(s->records_dead_lettered, prev->records_dead_lettered);
		s->records_late = Max(s->records_late, prev->records_late);
	}
	if (prev != NULL && prev->at >= s->at)
		*prev = *s;
	else if (ring->count < JOB_HISTORY_SECONDS)
		ring->samples[(ring->head + ring->count++) % JOB_HISTORY_SECONDS] = *s;
	else
	{
		ring->samples[ring->head] = *s;
		ring->head = (ring->head + 1) % JOB_HISTORY_SECONDS;
	}
}

void
job_history_sample(TimestampTz now)
{
	Sampled    *sampled;
	int			n = 0;
	int			pos = -1;

	if (job_history == NULL || mailer_shared == NULL)
		return;
	sampled = palloc(sizeof(Sampled) * mailer_shared->nslots);

	/* Read the slots first: the two locks are never held together. */
	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	while (++pos < mailer_shared->nslots)
	{
		JobSlot    *slot = &mailer_shared->slots[pos];

		if (slot->job_id == 0 || slot->subtask != 0)
			continue;
		sampled[n].ext_oid = slot->ext_oid;
		sampled[n].job_id = slot->job_id;
		sample_job(slot, now, &sampled[n].s);
		n++;
	}
	LWLockRelease(mailer_shared->lock);

	LWLockAcquire(job_history->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
		ring_put(ring_for(sampled[i].ext_oid, sampled[i].job_id), &sampled[i].s);
	LWLockRelease(job_history->lock);
	pfree(sampled);
}

int
job_history_read(Oid ext_oid, int64 job_id, JobHistorySample **out)
{
	JobHistoryRing *ring;
	JobHistorySample *samples;
	int			count = 0;

	*out = NULL;
	if (job_history == NULL)
		return 0;
	/* Allocated before the lock is taken: no error while it is held. */
	samples = palloc(sizeof(JobHistorySample) * JOB_HISTORY_SECONDS);
	LWLockAcquire(job_history->lock, LW_SHARED);
	ring = find_ring(ext_oid, job_id);
	if (ring != NULL)
	{
		count = ring->count;
		for (int i = 0; i < count; i++)
			samples[i] = ring->samples[(ring->head + i) % JOB_HISTORY_SECONDS];
	}
	LWLockRelease(job_history->lock);
	if (count == 0)
		pfree(samples);
	else
		*out = samples;
	return count;
}

void
job_history_note_restarts(Oid ext_oid, int64 job_id, int32 restarts)
{
	JobHistoryRing *ring;

	if (job_history == NULL)
		return;
	LWLockAcquire(job_history->lock, LW_EXCLUSIVE);
	ring = find_ring(ext_oid, job_id);
	if (ring != NULL)
		ring->restarts = restarts;
	LWLockRelease(job_history->lock);
}
