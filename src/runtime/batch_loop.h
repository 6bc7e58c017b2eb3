/*
 * batch_loop.h
 *		A started job's work: batches, checkpoints, until it stops.
 */
#ifndef BATCH_LOOP_H
#define BATCH_LOOP_H

#include "runtime/job.h"

/*
 * Read and process batches, checkpointing every checkpoint.interval, until
 * stopped (a final checkpoint) or, for a bounded source, finished.  The
 * slot's exit_kind says which.
 */
extern void batch_loop_run(Job *job);

#endif							/* BATCH_LOOP_H */
