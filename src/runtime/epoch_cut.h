/*
 * epoch_cut.h
 *		A parallel job's rounds between batches: records and watermarks
 *		between subtasks, and aligned checkpoints (barriers).
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#ifndef EPOCH_CUT_H
#define EPOCH_CUT_H

#include "runtime/job.h"

/*
 * After a batch: take in what the other subtasks sent, pass this subtask's
 * watermark on, fire the windows the inputs' watermarks passed, ask for a
 * checkpoint when one is due here, and cut the epoch subtask 0 asked for.
 * True once the job's last epoch is committed: the worker exits.
 */
extern bool epoch_cut_round(Job *job, bool finished, bool checkpoint_due);

/* Stop with a final checkpoint of all subtasks (a stop request or SIGTERM). */
extern void epoch_cut_request_stop(Job *job);

#endif							/* EPOCH_CUT_H */
