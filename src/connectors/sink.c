/*
 * sink.c
 *		A job's sink (sink.h): the one place that knows there are two kinds.
 */
#include "postgres.h"

#include "connectors/sink.h"
#include "connectors/sink_kafka.h"
#include "connectors/sink_table.h"

struct SinkBuffer
{
	TableSink  *table;			/* one of the two is set */
	KafkaSink  *kafka;
};

SinkBuffer *
sink_buffer_create(JobPlan *plan, const SinkOwner *owner, MemoryContext parent, bool *failing)
{
	SinkBuffer *sink = MemoryContextAllocZero(parent, sizeof(SinkBuffer));

	if (plan->sink->kafka)
		sink->kafka = kafka_sink_create(plan, owner, parent, failing);
	else
		sink->table = table_sink_create(plan, parent, failing);
	return sink;
}

void
sink_project(SinkBuffer *sink, ExprRuntime *out_rt, Record *rec, Datum *values, bool *nulls)
{
	if (sink->kafka)
		kafka_sink_project(sink->kafka, out_rt, rec, values, nulls);
	else
		table_sink_project(sink->table, out_rt, rec, values, nulls);
}

void
sink_buffer_add(SinkBuffer *sink, Datum *values, bool *nulls, const char *topic, int32 partition,
				int64 offset)
{
	if (sink->kafka)
		kafka_sink_add(sink->kafka, values, nulls, topic, partition, offset);
	else
		table_sink_add(sink->table, values, nulls, topic, partition, offset);
}

void
sink_buffer_delete(SinkBuffer *sink, Datum *values, bool *nulls)
{
	if (sink->kafka)
		kafka_sink_tombstone(sink->kafka, values, nulls);
	else
		table_sink_delete(sink->table, values, nulls);
}

int
sink_buffer_rows(SinkBuffer *sink)
{
	return sink->kafka ? kafka_sink_rows(sink->kafka) : table_sink_rows(sink->table);
}

bool
sink_buffer_full(SinkBuffer *sink)
{
	return sink->kafka ? kafka_sink_full(sink->kafka) : table_sink_full(sink->table);
}

bool
sink_buffer_bind(SinkBuffer *sink, JobPlan *plan)
{
	/* The outbox is the extension's own table: it is always there. */
	return sink->kafka ? true : table_sink_bind(sink->table, plan);
}

int64
sink_buffer_flush(SinkBuffer *sink, DeadLetterBuffer *dlq, OnError on_error, bool last,
				  int64 epoch, int64 *rejected)
{
	if (sink->kafka)
		return kafka_sink_flush(sink->kafka, dlq, on_error, epoch, rejected);
	return table_sink_flush(sink->table, dlq, on_error, last, rejected);
}

bool
sink_buffer_publish(SinkBuffer *sink, char **error)
{
	*error = NULL;
	return sink->kafka ? kafka_sink_publish(sink->kafka, error) : true;
}
