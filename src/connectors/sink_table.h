/*
 * sink_table.h
 *		The table sink: rows buffered between checkpoints (coalesced per key
 *		for an upsert) and written in the checkpoint transaction with one
 *		statement (or one bulk insert) per chunk of rows.  Reached through
 *		sink.h.
 *
 * Design: docs/ARCHITECTURE.md, "The sink buffer".
 */
#ifndef SINK_TABLE_H
#define SINK_TABLE_H

#include "connectors/dead_letter.h"
#include "plan/plan.h"

typedef struct TableSink TableSink;

extern TableSink *table_sink_create(JobPlan *plan, MemoryContext parent, bool *failing);
extern void table_sink_project(TableSink *sink, ExprRuntime *out_rt, Record *rec,
							   Datum *values, bool *nulls);
extern void table_sink_add(TableSink *sink, Datum *values, bool *nulls,
						   const char *topic, int32 partition, int64 offset);
extern void table_sink_delete(TableSink *sink, Datum *values, bool *nulls);
extern int	table_sink_rows(TableSink *sink);
extern bool table_sink_full(TableSink *sink);
extern bool table_sink_bind(TableSink *sink, JobPlan *plan);
extern int64 table_sink_flush(TableSink *sink, DeadLetterBuffer *dlq, OnError on_error,
							  bool last, int64 *rejected);

#endif							/* SINK_TABLE_H */
