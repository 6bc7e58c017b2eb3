/*
 * checkpoint.h
 *		Checkpoints: state, source positions and output committed together
 *		in one PostgreSQL transaction.
 *
 * Design: docs/ARCHITECTURE.md, "Checkpoints".
 */
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include "runtime/job.h"

/*
 * Read the newest committed checkpoint and put the job back there: epoch,
 * counters, state backend and source positions.
 */
extern void checkpoint_restore(Job *job);

/*
 * Take checkpoint epoch + 1.  final: the worker is about to stop cleanly.
 * false, and nothing taken: no table has the sink table's name now, or
 * another transaction holds that table too long (the job's slot says it
 * waits for it); the rows and positions are kept.
 */
extern bool checkpoint_take(Job *job, bool final);

/*
 * Hand the committed epochs' output on (a Kafka sink publishes its outbox)
 * when job->publish_pending; checkpoint_take calls it after each commit.
 * false: not now, the slot says why; the batch loop reads nothing more and
 * calls it again.
 */
extern bool checkpoint_publish(Job *job);

#endif							/* CHECKPOINT_H */
