/*
 * job_histogram.h
 *		A fixed-bucket histogram in shared memory: one writer (a job's
 *		worker) observes, anyone reads, without a lock.
 *
 * The buckets are not cumulative: buckets[i] counts the observations in
 * (bound[i-1], bound[i]], the last one those above every bound (+Inf).  A
 * reader (the /metrics renderer) sums them up into Prometheus's cumulative
 * le buckets.  A reader may see count, sum and buckets from slightly
 * different moments; each is exact on its own and never goes back.
 */
#ifndef JOB_HISTOGRAM_H
#define JOB_HISTOGRAM_H

#include "port/atomics.h"

#define JOB_HISTOGRAM_BUCKETS 12

typedef struct JobHistogram
{
	pg_atomic_uint64 buckets[JOB_HISTOGRAM_BUCKETS];	/* not cumulative; last = +Inf */
	pg_atomic_uint64 count;
	pg_atomic_uint64 sum_us;	/* sum of observations in microseconds */
} JobHistogram;

/* Upper bounds of the first JOB_HISTOGRAM_BUCKETS - 1 buckets, in seconds. */
extern const double job_histogram_bounds_seconds[JOB_HISTOGRAM_BUCKETS - 1];

/* Set every bucket, the count and the sum to 0 (pg_atomic_init_u64 first). */
extern void job_histogram_init(JobHistogram *h);
extern void job_histogram_reset(JobHistogram *h);

/*
 * n observations of the value seconds (negative counts as 0: clocks of
 * producer and server may disagree).  Single writer only.
 */
extern void job_histogram_observe(JobHistogram *h, double seconds, uint64 n);

#endif							/* JOB_HISTOGRAM_H */
