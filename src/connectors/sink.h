/*
 * sink.h
 *		The table sink: rows buffered between checkpoints (coalesced per key
 *		for an upsert) and written in the checkpoint transaction with one
 *		statement per chunk of rows.
 *
 * Design: docs/ARCHITECTURE.md, "The sink buffer".
 */
#ifndef SINK_H
#define SINK_H

#include "connectors/dead_letter.h"
#include "plan/plan.h"

typedef struct SinkBuffer SinkBuffer;

/* *failing is set when a refused row fails the job (on_error "fail"). */
extern SinkBuffer *sink_buffer_create(JobPlan *plan, MemoryContext parent, bool *failing);

/*
 * Convert an output record to the sink's columns (values and nulls have
 * ncolumns entries).  ERROR when a cast fails; the caller dead-letters.
 */
extern void sink_project(SinkBuffer *sink, ExprRuntime *out_rt, Record *rec,
						 Datum *values, bool *nulls);

/* Keep a projected row; origin (topic may be NULL) is for dead letters. */
extern void sink_buffer_add(SinkBuffer *sink, Datum *values, bool *nulls,
							const char *topic, int32 partition, int64 offset);

/*
 * Delete the table's row with these conflict-key values (upsert sinks), and
 * forget a buffered row with them; a row added later for the key stays.
 * values are in the sink's column order; only key columns are read.
 */
extern void sink_buffer_delete(SinkBuffer *sink, Datum *values, bool *nulls);

extern int	sink_buffer_rows(SinkBuffer *sink);

/* The buffered rows hold so much memory that the worker should checkpoint now. */
extern bool sink_buffer_full(SinkBuffer *sink);

/*
 * Resolve the sink table's name now, in the checkpoint transaction, and
 * lock the table.  false: no table has that name (the caller waits and
 * keeps its rows).  A table made anew under the name is written from now
 * on; ERROR when its columns no longer fit the rows.
 */
extern bool sink_buffer_bind(SinkBuffer *sink, JobPlan *plan);

/*
 * Write the buffered rows (inside the checkpoint transaction).  A row the
 * table rejects for its data goes to dlq, or raises per on_error; any other
 * failure (table missing, no privilege), and every row of two or more
 * refused for the same SQLSTATE (unless last: the final checkpoint of a
 * finished source, which no retry could change), raises.  Returns rows
 * written; *rejected counts the rows dead-lettered or skipped.
 */
extern int64 sink_buffer_flush(SinkBuffer *sink, DeadLetterBuffer *dlq, OnError on_error,
							   bool last, int64 *rejected);

#endif							/* SINK_H */
