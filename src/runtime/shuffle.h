/*
 * shuffle.h
 *		What a parallel job's subtasks send each other through the exchange:
 *		records bound for the keyed stage of the subtask that owns their key
 *		group, each subtask's source watermark, and checkpoint barriers.
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#ifndef SHUFFLE_H
#define SHUFFLE_H

#include "runtime/exchange.h"
#include "runtime/job.h"

typedef struct Shuffle Shuffle;

/* Records a subtask routes before it sends its outboxes. */
#define SHUFFLE_CHUNK	256

extern Shuffle *shuffle_create(Job *job, Exchange *ex);

/*
 * One record's aggregate arguments, to the keyed stage of its key's owner:
 * SHUFFLE_SENT when that is another subtask (which will count it), else
 * whether it fell in a window here.
 */
typedef enum ShuffleRoute
{
	SHUFFLE_LATE = 0,
	SHUFFLE_ADDED,
	SHUFFLE_SENT
} ShuffleRoute;

extern ShuffleRoute shuffle_route(Job *job, SourceMessage *msg, Record *rec,
								  const Datum *args, const bool *nulls);

/* Send what was routed away; meanwhile take in what others sent.  In a transaction. */
extern void shuffle_flush(Job *job);

/* Take in whatever has arrived, without waiting.  In a transaction. */
extern void shuffle_drain(Job *job);

/* This subtask's source watermark, to every subtask (itself included). */
extern void shuffle_send_watermark(Job *job, TimestampTz watermark, bool idle);

/*
 * The keyed stage's watermark: the smallest over the inputs that are not
 * idle (the largest when all are), never moving back.
 */
extern TimestampTz shuffle_watermark(Job *job);

/* Barrier epoch after everything this subtask sent before it, to every other subtask. */
extern void shuffle_send_barrier(Job *job, int64 epoch, bool final);

/* The newest barrier an input delivered (0: none), and whether it was final. */
extern int64 shuffle_barrier_seen(Job *job, bool *final);

/* Every input delivered the barrier: the keyed stage holds the whole epoch. */
extern bool shuffle_aligned(Job *job);

/* The epoch is cut: read every input again. */
extern void shuffle_end_alignment(Job *job);

#endif							/* SHUFFLE_H */
