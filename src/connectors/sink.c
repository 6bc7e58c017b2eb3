/*
 * sink.c
 *		A job's sink (sink.h): the one place that knows there are two kinds,
 *		and that a table sink may have a Kafka changelog ("sinks"): the same
 *		rows, in the same epochs, to both.  A row's columns are the table's,
 *		then the changelog's.
 */
#include "postgres.h"

#include "connectors/sink.h"
#include "connectors/sink_kafka.h"
#include "connectors/sink_table.h"

struct SinkBuffer
{
	TableSink  *table;			/* one of the two is set, or both */
	KafkaSink  *kafka;
	int			table_columns;	/* where the Kafka sink's columns start */
};

SinkBuffer *
sink_buffer_create(JobPlan *plan, const SinkOwner *owner, MemoryContext parent, bool *failing)
{
	SinkBuffer *sink = MemoryContextAllocZero(parent, sizeof(SinkBuffer));

	if (plan->sink->kafka)
		sink->kafka = kafka_sink_create(plan, plan->sink, &plan->spec->sink.kafka, owner, parent, failing);
	else
	{
		sink->table = table_sink_create(plan, parent, failing);
		sink->table_columns = plan->sink->ncolumns;
	}
	if (plan->changelog)
		sink->kafka = kafka_sink_create(plan, plan->changelog, &plan->spec->changelog->kafka, owner,
										parent, failing);
	return sink;
}

void
sink_project(SinkBuffer *sink, ExprRuntime *out_rt, Record *rec, Datum *values, bool *nulls)
{
	if (sink->table)
		table_sink_project(sink->table, out_rt, rec, values, nulls);
	if (sink->kafka)
		kafka_sink_project(sink->kafka, out_rt, rec, values + sink->table_columns,
						   nulls + sink->table_columns);
}

void
sink_buffer_add(SinkBuffer *sink, Datum *values, bool *nulls, const char *topic, int32 partition,
				int64 offset)
{
	if (sink->table)
		table_sink_add(sink->table, values, nulls, topic, partition, offset);
	if (sink->kafka)
		kafka_sink_add(sink->kafka, values + sink->table_columns, nulls + sink->table_columns,
					   topic, partition, offset);
}

void
sink_buffer_delete(SinkBuffer *sink, Datum *values, bool *nulls)
{
	if (sink->table)
		table_sink_delete(sink->table, values, nulls);
	if (sink->kafka)
		kafka_sink_tombstone(sink->kafka, values + sink->table_columns, nulls + sink->table_columns);
}

int
sink_buffer_rows(SinkBuffer *sink)
{
	return sink->table ? table_sink_rows(sink->table) : kafka_sink_rows(sink->kafka);
}

bool
sink_buffer_full(SinkBuffer *sink)
{
	return (sink->table && table_sink_full(sink->table)) || (sink->kafka && kafka_sink_full(sink->kafka));
}

bool
sink_buffer_bind(SinkBuffer *sink, JobPlan *plan)
{
	/* The outbox is the extension's own table: it is always there. */
	return sink->table ? table_sink_bind(sink->table, plan) : true;
}

int64
sink_buffer_flush(SinkBuffer *sink, DeadLetterBuffer *dlq, OnError on_error, bool last,
				  int64 epoch, int64 *rejected)
{
	int64		written;
	int64		refused;

	if (sink->table == NULL)
		return kafka_sink_flush(sink->kafka, dlq, on_error, epoch, rejected);
	written = table_sink_flush(sink->table, dlq, on_error, last, rejected);

	/*
	 * The changelog has every row of the epoch, those the table refused
	 * too; a record it cannot take (too large) is a dead letter of its own
	 * and leaves the job's counts, which are the table's, alone.
	 */
	if (sink->kafka)
		(void) kafka_sink_flush(sink->kafka, dlq, on_error, epoch, &refused);
	return written;
}

bool
sink_buffer_publish(SinkBuffer *sink, char **error)
{
	*error = NULL;
	return sink->kafka ? kafka_sink_publish(sink->kafka, error) : true;
}

bool
sink_buffer_publishes(SinkBuffer *sink)
{
	return sink->kafka != NULL;
}
