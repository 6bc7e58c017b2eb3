/*
 * job_histogram.c
 *		Fixed-bucket histograms of a job's slot (job_histogram.h).
 */
#include "postgres.h"

#include <math.h>

#include "jobs/job_histogram.h"

/* Prometheus's default buckets, wide enough for a slow checkpoint. */
const double job_histogram_bounds_seconds[JOB_HISTOGRAM_BUCKETS - 1] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
};

void
job_histogram_init(JobHistogram *h)
{
	for (int i = 0; i < JOB_HISTOGRAM_BUCKETS; i++)
		pg_atomic_init_u64(&h->buckets[i], 0);
	pg_atomic_init_u64(&h->count, 0);
	pg_atomic_init_u64(&h->sum_us, 0);
}

void
job_histogram_reset(JobHistogram *h)
{
	for (int i = 0; i < JOB_HISTOGRAM_BUCKETS; i++)
		pg_atomic_write_u64(&h->buckets[i], 0);
	pg_atomic_write_u64(&h->count, 0);
	pg_atomic_write_u64(&h->sum_us, 0);
}

void
job_histogram_observe(JobHistogram *h, double seconds, uint64 n)
{
	int			b = 0;

	if (n == 0)
		return;
	if (!(seconds > 0))			/* also NaN */
		seconds = 0;
	while (b < JOB_HISTOGRAM_BUCKETS - 1 && seconds > job_histogram_bounds_seconds[b])
		b++;

	/*
	 * The single writer adds; readers never see a value go back.  The
	 * buckets first, the count last, so that a reader rarely sees a count
	 * above the buckets' sum.
	 */
	pg_atomic_fetch_add_u64(&h->buckets[b], n);
	pg_atomic_fetch_add_u64(&h->sum_us, (uint64) llround(Min(seconds, 1e9) * 1e6) * n);
	pg_atomic_fetch_add_u64(&h->count, n);
}
