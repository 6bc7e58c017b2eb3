/*
 * keyed.h
 *		The keyed stage: per-key aggregates, with or without event-time
 *		windows, kept in a state backend.
 */
#ifndef KEYED_H
#define KEYED_H

#include "runtime/job.h"

extern KeyedStage *keyed_create(Job *job);

/*
 * The aggregates' arguments for one record, into args and nulls (one entry
 * per aggregate): evaluated for every record a flat_map made before any is
 * folded in, so that one that fails leaves the state as it was.
 */
extern void keyed_eval_args(KeyedStage *ks, Record *rec, Datum *args, bool *nulls);

/*
 * Fold one record, with its arguments, into its key's (and windows')
 * aggregates.  false: the record is late (every window it belongs to is
 * past its allowed lateness).
 */
extern bool keyed_add(KeyedStage *ks, Record *rec, const Datum *args, const bool *nulls);

/*
 * A record a flat_map made into several outputs is folded in whole or not
 * at all: keyed_add's between keyed_begin_record and keyed_end_record are
 * undone by keyed_abort_record (after an error; a no-op outside a record).
 * A record of one output needs none of it: keyed_add itself changes
 * nothing when it fails.
 */
extern void keyed_begin_record(KeyedStage *ks);
extern void keyed_end_record(KeyedStage *ks);
extern void keyed_abort_record(KeyedStage *ks);

/* The watermark moved: fire the windows it passed, purge the expired. */
extern void keyed_advance_watermark(KeyedStage *ks, TimestampTz watermark);

/*
 * Before a checkpoint: hand the rows due to the sink (changed keys, fired
 * windows) and write changed state to the backend.
 */
extern void keyed_prepare_checkpoint(KeyedStage *ks);

/* Entries changed since the last checkpoint (to bound memory). */
extern int64 keyed_pending(KeyedStage *ks);

#endif							/* KEYED_H */
