/*
 * watermark.h
 *		Event-time watermarks: per partition, the largest event time seen
 *		minus max_out_of_orderness; for the job, the minimum over the
 *		partitions that are not idle.  It never moves backwards.
 */
#ifndef WATERMARK_H
#define WATERMARK_H

#include "utils/jsonb.h"

#include "connectors/source.h"

typedef struct WatermarkTracker WatermarkTracker;

extern WatermarkTracker *watermark_create(int64 max_out_of_orderness_us, int64 idle_timeout_us);

/* Learn partitions the source has now (each starts holding the watermark). */
extern void watermark_sync_partitions(WatermarkTracker *wt, Source *src);

/* Records of these messages' partitions reached the pipeline (watermark_align). */
extern void watermark_heard(WatermarkTracker *wt, const SourceMessage *msgs, int n);

/* A record of (topic, partition) with this event time arrived. */
extern void watermark_observe(WatermarkTracker *wt, int topic, int32 partition, TimestampTz t);

/*
 * The job's watermark now (DT_NOBEGIN until every active partition spoke),
 * after learning the source's partitions; past every window once the
 * bounded source is finished.  With align_drift_us >= 0, then pause the
 * partitions whose watermark runs more than that ahead of the slowest one
 * with records left to read, and resume them (watermark alignment).
 */
extern TimestampTz watermark_step(WatermarkTracker *wt, Source *src, bool finished, int64 align_drift_us);

extern TimestampTz watermark_current(WatermarkTracker *wt);

/* Per-partition state for a checkpoint, and back. */
extern Jsonb *watermark_save(WatermarkTracker *wt, Source *src);
extern void watermark_restore(WatermarkTracker *wt, Source *src, Jsonb *saved, TimestampTz job_watermark,
							  Jsonb *owned);

/*
 * No partition holds the watermark back (all idle, or none known): a
 * parallel job's other subtasks need not wait for this one's.
 */
extern bool watermark_idle(WatermarkTracker *wt);

/* Show each partition's watermark and idleness in the job's slot. */
extern void watermark_publish(WatermarkTracker *wt, JobSlot *slot);

#endif							/* WATERMARK_H */
