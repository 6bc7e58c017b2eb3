/*
 * job_counters.h
 *		The counters a job keeps: the worker counts them in its slot, the
 *		checkpoint stores them (so they survive restarts), and
 *		mailer.metrics shows them, all as one jsonb object.
 */
#ifndef JOB_COUNTERS_H
#define JOB_COUNTERS_H

typedef enum JobCounter
{
	JC_RECORDS_IN = 0,
	JC_RECORDS_ACCEPTED,
	JC_RECORDS_FILTERED,
	JC_RECORDS_DEAD_LETTERED,
	JC_RECORDS_SKIPPED,
	JC_RECORDS_LATE,
	JC_RECORDS_OUT,
	JC_CHECKPOINTS,
	JC_NUM_COUNTERS
} JobCounter;

extern const char *const job_counter_names[JC_NUM_COUNTERS];

/* Counters as a jsonb object {"records_in": n, ...}. */
extern Datum job_counters_jsonb(const uint64 *counters);

#endif							/* JOB_COUNTERS_H */
