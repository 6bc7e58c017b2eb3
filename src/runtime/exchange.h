/*
 * exchange.h
 *		The queues between a parallel job's subtasks: one shm_mq per ordered
 *		pair in one DSM segment, as parallel query uses them.  Bytes only;
 *		what they carry is shuffle.c's.
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#ifndef EXCHANGE_H
#define EXCHANGE_H

#include "lib/stringinfo.h"
#include "storage/dsm.h"

typedef struct Exchange Exchange;

/* Called while a send waits for room: take in what the others sent. */
typedef void (*ExchangeDrain) (void *arg);

/* The coordinator makes the segment; every subtask, the coordinator too, attaches. */
extern dsm_handle exchange_create(Oid ext_oid, int64 job_id, int parallelism);
extern Exchange *exchange_attach(dsm_handle handle, Oid ext_oid, int64 job_id, int subtask,
								 int parallelism);

/* What the next flush sends to subtask to: append to it. */
extern StringInfo exchange_outbox(Exchange *ex, int to);

/*
 * Send every outbox, in order; while a queue is full, drain() takes in the
 * inputs that are not blocked, then the process sleeps on its latch.
 */
extern void exchange_flush(Exchange *ex, ExchangeDrain drain, void *arg);

/*
 * The next message from an input that is not blocked, without waiting:
 * false when none has one.  The data stays valid until the next receive
 * from the same input.  ERROR when a subtask has gone.
 */
extern bool exchange_receive(Exchange *ex, int *from, const char **data, Size *len);

/* Stop reading an input (it delivered a barrier), and read all again. */
extern void exchange_block(Exchange *ex, int from);
extern void exchange_unblock_all(Exchange *ex);
extern bool exchange_is_blocked(Exchange *ex, int from);

#endif							/* EXCHANGE_H */
