/*
 * work_xact.h
 *		The transaction a job worker does a piece of its work in (a batch, a
 *		checkpoint, a state compaction).
 *
 * Unlike StartTransactionCommand, the caller's memory context stays
 * current, so what is allocated in it outlives the transaction.  While the
 * transaction is open a timer may tick (work_xact_set_timer): the worker's
 * count of the grace a SIGTERM gives work in progress.
 */
#ifndef WORK_XACT_H
#define WORK_XACT_H

#include "utils/timeout.h"

/* Tick the registered timeout every tick_ms while a work transaction is open. */
extern void work_xact_set_timer(TimeoutId id, int tick_ms);

/* Start a transaction with a snapshot, keeping the current memory context. */
extern void work_xact_begin(void);

/* Commit it, keeping the current memory context. */
extern void work_xact_end(void);

/* Prepare it (two-phase commit) under gid, keeping the memory context. */
extern void work_xact_prepare(const char *gid);

/* Roll it back (after an error the caller caught), keeping the memory context. */
extern void work_xact_abort(void);

#endif							/* WORK_XACT_H */
