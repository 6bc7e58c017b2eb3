/*
 * sink.h
 *		A job's sink: output rows buffered between checkpoints and written in
 *		the checkpoint transaction.  A table sink (sink_table.h) writes them
 *		into the table; a Kafka sink (sink_kafka.h) into its outbox, and
 *		publishes them to the topic once the epoch has committed.
 *
 * Design: docs/ARCHITECTURE.md, "The sink buffer" and "The Kafka sink".
 */
#ifndef SINK_H
#define SINK_H

#include "connectors/dead_letter.h"
#include "plan/plan.h"

typedef struct SinkBuffer SinkBuffer;

/* Whose output: a Kafka sink names its outbox rows and transactions by it. */
typedef struct SinkOwner
{
	Oid			ext_oid;
	int64		job_id;
	int			subtask;
} SinkOwner;

/* *failing is set when a refused row fails the job (on_error "fail"). */
extern SinkBuffer *sink_buffer_create(JobPlan *plan, const SinkOwner *owner, MemoryContext parent,
									  bool *failing);

/*
 * Convert an output record to the sink's columns (values and nulls have
 * the plan's sink->ncolumns entries).  ERROR when a cast or an expression
 * fails; the caller dead-letters.
 */
extern void sink_project(SinkBuffer *sink, ExprRuntime *out_rt, Record *rec,
						 Datum *values, bool *nulls);

/* Keep a projected row; origin (topic may be NULL) is for dead letters. */
extern void sink_buffer_add(SinkBuffer *sink, Datum *values, bool *nulls,
							const char *topic, int32 partition, int64 offset);

/*
 * A row replaced by a later one (a merged session's part): a table sink
 * deletes the row with these conflict-key values and forgets a buffered
 * one; a Kafka sink writes a tombstone under the row's key.
 */
extern void sink_buffer_delete(SinkBuffer *sink, Datum *values, bool *nulls);

extern int	sink_buffer_rows(SinkBuffer *sink);

/* The buffered rows hold so much memory that the worker should checkpoint now. */
extern bool sink_buffer_full(SinkBuffer *sink);

/*
 * At the start of the checkpoint transaction: make sure the rows can be
 * written.  false: they cannot now (no table has the sink's name), and the
 * caller waits, keeping its rows.  See table_sink_bind.
 */
extern bool sink_buffer_bind(SinkBuffer *sink, JobPlan *plan);

/*
 * Write the buffered rows of epoch (inside its checkpoint transaction).  A
 * row refused for its data goes to dlq, or raises per on_error.  Returns
 * rows written; *rejected counts the rows dead-lettered or skipped.
 */
extern int64 sink_buffer_flush(SinkBuffer *sink, DeadLetterBuffer *dlq, OnError on_error,
							   bool last, int64 epoch, int64 *rejected);

/*
 * After an epoch committed, outside any transaction: hand its rows on.  A
 * Kafka sink publishes what its outbox holds.  false: not now, *error says
 * why (the broker or topic); the rows wait for the next call.
 */
extern bool sink_buffer_publish(SinkBuffer *sink, char **error);

/* Whether the sink has work after the commit (sink_buffer_publish). */
extern bool sink_buffer_publishes(SinkBuffer *sink);

#endif							/* SINK_H */
