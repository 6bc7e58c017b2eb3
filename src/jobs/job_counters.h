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
	/* Barrier cuts (docs/ARCHITECTURE.md, "Barrier cuts"): epochs and sums. */
	JC_LAST_CUT_EPOCH,			/* the last cut the job checkpointed at */
	JC_CUT_DECIDED_EPOCH,		/* the last cut checkpointed at or skipped */
	JC_CUTS_SKIPPED,
	JC_CUT_HELD_MS,				/* from learning of each cut to its checkpoint */
	JC_CUT_REWINDS,
	/* From here on, what the running worker sees: not carried over a restart. */
	JC_CUTS_PARTIAL,
	JC_CUT_RECORDS_MALFORMED,
	JC_CUT_HOLDING_EPOCH,		/* the cut the job is held at now, 0 none */
	JC_NUM_COUNTERS
} JobCounter;

#define JC_FIRST_LIVE JC_CUTS_PARTIAL

extern const char *const job_counter_names[JC_NUM_COUNTERS];

/* Counters as a jsonb object {"records_in": n, ...}. */
extern Datum job_counters_jsonb(const uint64 *counters);

#endif							/* JOB_COUNTERS_H */
