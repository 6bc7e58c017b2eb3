/*
 * slot_histograms.h
 *		The histograms job workers keep in their slots (checkpoint duration,
 *		produce-to-commit latency), copied out for /metrics and the API,
 *		made cumulative as Prometheus and the page want them.
 */
#ifndef SLOT_HISTOGRAMS_H
#define SLOT_HISTOGRAMS_H

#include "jobs/job_histogram.h"

typedef struct HistogramCounts
{
	uint64		cumulative[JOB_HISTOGRAM_BUCKETS]; /* observations <= each bound (job_histogram_bounds_seconds, then +Inf) */
	uint64		count;
	double		sum_seconds;
} HistogramCounts;

typedef struct SlotHistograms
{
	int64		job_id;
	int			subtask;
	HistogramCounts checkpoint_duration;
	HistogramCounts produce_to_commit;
} SlotHistograms;

/*
 * The histograms of each subtask of the installation's jobs with a worker
 * (job_id 0: of every job), palloc'd; returns how many.
 */
extern int	slot_histograms_read(Oid ext_oid, int64 job_id, SlotHistograms **out);

/* Add h to sum. */
extern void histogram_counts_add(HistogramCounts *sum, const HistogramCounts *h);

#endif							/* SLOT_HISTOGRAMS_H */
