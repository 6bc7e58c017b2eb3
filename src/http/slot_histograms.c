/*
 * slot_histograms.c
 *		Copy the job slots' histograms out, under the slots' lock held
 *		shared for as long as it takes to read them.
 *
 * A worker writes its histograms with atomics and never waits for a
 * reader: a copy may be a few observations apart between its buckets and
 * its count, which a scrape a second later repairs.
 */
#include "postgres.h"

#include "storage/lwlock.h"

#include "http/slot_histograms.h"
#include "jobs/job_slots.h"

static void
copy_histogram(HistogramCounts *to, JobHistogram *from)
{
	uint64		running = 0;

	for (int b = 0; b < JOB_HISTOGRAM_BUCKETS; b++)
	{
		running += pg_atomic_read_u64(&from->buckets[b]);
		to->cumulative[b] = running;
	}
	/* Read after the buckets: a count below their sum would not be a histogram. */
	to->count = Max(pg_atomic_read_u64(&from->count), running);
	to->sum_seconds = pg_atomic_read_u64(&from->sum_us) / 1000000.0;
}

int
slot_histograms_read(Oid ext_oid, int64 job_id, SlotHistograms **out)
{
	JobSlot    *coordinator;
	int			pos = -1;
	int			n = 0;

	*out = NULL;
	if (mailer_shared == NULL)
		return 0;
	*out = palloc0(sizeof(SlotHistograms) * mailer_shared->nslots);
	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	while ((coordinator = job_slots_next(ext_oid, &pos)) != NULL)
	{
		if (job_id != 0 && coordinator->job_id != job_id)
			continue;
		for (int k = 0; k < coordinator->parallelism; k++)
		{
			JobSlot    *slot = job_slots_subtask(coordinator, k);
			SlotHistograms *h = &(*out)[n];

			if (slot == NULL || slot->pid == 0)
				continue;
			h->job_id = slot->job_id;
			h->subtask = slot->subtask;
			copy_histogram(&h->checkpoint_duration, &slot->checkpoint_duration);
			copy_histogram(&h->produce_to_commit, &slot->produce_to_commit);
			n++;
		}
	}
	LWLockRelease(mailer_shared->lock);
	return n;
}

void
histogram_counts_add(HistogramCounts *sum, const HistogramCounts *h)
{
	for (int b = 0; b < JOB_HISTOGRAM_BUCKETS; b++)
		sum->cumulative[b] += h->cumulative[b];
	sum->count += h->count;
	sum->sum_seconds += h->sum_seconds;
}
