/*
 * source_split.c
 *		Test-only SQL functions that open a source as one subtask of a
 *		parallel job and report what it reads, to check how the sources
 *		split their partitions between subtasks (see
 *		test/t/116_source_split.pl).
 *
 * The source functions are mailer.so's own: the server preloads it, and
 * its symbols are global, so this module links to them at load time.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "connectors/source.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(source_split_generator);
PG_FUNCTION_INFO_V1(source_split_kafka);

static JobSlot *
new_slot(void)
{
	JobSlot    *slot = MemoryContextAllocZero(TopMemoryContext, sizeof(JobSlot));

	SpinLockInit(&slot->mutex);
	return slot;
}

/* "partitions": the source's partition list, [[topic, partition], ...]. */
static void
append_partitions(StringInfo out, Source *src)
{
	int			n = src->ops->partition_count(src);

	appendStringInfoString(out, "\"partitions\": [");
	for (int i = 0; i < n; i++)
	{
		int			topic;
		int32		partition;

		src->ops->partition_at(src, i, &topic, &partition);
		appendStringInfo(out, "%s[%d, %d]", i ? ", " : "", topic, partition);
	}
	appendStringInfoChar(out, ']');
}

/* "positions", "finished", "reached_end" (after mark_end) and the slot's metrics. */
static void
append_state(StringInfo out, Source *src)
{
	appendStringInfo(out, ", \"positions\": %s",
					 JsonbToCString(NULL, &src->ops->positions(src)->root, 0));
	appendStringInfo(out, ", \"finished\": %s", src->ops->finished(src) ? "true" : "false");
	src->ops->mark_end(src);
	appendStringInfo(out, ", \"reached_end\": %s", src->ops->reached_end(src) ? "true" : "false");
	appendStringInfoString(out, ", \"metrics\": [");
	for (int i = 0; i < src->slot->npartitions; i++)
	{
		PartitionMetrics *pm = &src->slot->partitions[i];

		appendStringInfo(out, "%s[\"%s\", %d, " INT64_FORMAT ", " INT64_FORMAT ", " INT64_FORMAT "]",
						 i ? ", " : "", pm->topic, pm->partition, pm->position, pm->end_offset,
						 pm->records_in);
	}
	appendStringInfoChar(out, ']');
}

static Datum
result(StringInfo out)
{
	appendStringInfoChar(out, '}');
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(out->data));
}

/*
 * source_split_generator(events, partitions, subtask, parallelism,
 * positions jsonb, max_events) returns jsonb: {"events": [[partition,
 * event number], ...] in the order handed out (at most max_events),
 * "partitions", "positions", "finished", "reached_end", "metrics"}.
 */
Datum
source_split_generator(PG_FUNCTION_ARGS)
{
	GeneratorSpec spec = {0};
	Jsonb	   *positions = PG_ARGISNULL(4) ? NULL : PG_GETARG_JSONB_P(4);
	int			max = PG_GETARG_INT32(5);
	Source	   *src;
	SourceMessage msgs[7];
	StringInfoData out;
	int			total = 0;

	spec.events = PG_GETARG_INT64(0);
	spec.partitions = PG_GETARG_INT32(1);
	spec.keys = 10;
	spec.seed = 1;
	spec.step_us = USECS_PER_SEC;
	src = generator_source_open(&spec, positions, new_slot(), PG_GETARG_INT32(2), PG_GETARG_INT32(3));

	initStringInfo(&out);
	appendStringInfoString(&out, "{\"events\": [");
	while (total < max)
	{
		/* Small batches, so that the order across polls is checked too. */
		int			n = src->ops->poll(src, msgs, Min(lengthof(msgs), max - total));

		if (n == 0)
			break;
		for (int i = 0; i < n; i++)
			appendStringInfo(&out, "%s[%d, " INT64_FORMAT "]", total + i ? ", " : "",
							 msgs[i].partition, msgs[i].offset);
		total += n;
	}
	appendStringInfoString(&out, "], ");
	append_partitions(&out, src);
	append_state(&out, src);
	PG_RETURN_DATUM(result(&out));
}

/*
 * source_split_kafka(brokers, topics text[], group_id, subtask,
 * parallelism, positions jsonb, quiet_ms, commit) returns jsonb: the
 * messages read until none came for quiet_ms, {"messages": [[topic index,
 * partition, offset], ...], "partitions", "positions", "finished",
 * "reached_end", "metrics"}; commit: publish the positions to the group
 * (committed()).  The consumer lives until the session ends.
 */
Datum
source_split_kafka(PG_FUNCTION_ARGS)
{
	KafkaSourceSpec *spec;
	ArrayType  *topics = PG_GETARG_ARRAYTYPE_P(1);
	Datum	   *names;
	int			ntopics;
	Jsonb	   *positions = PG_ARGISNULL(5) ? NULL : PG_GETARG_JSONB_P(5);
	int			quiet_ms = PG_GETARG_INT32(6);
	bool		commit = PG_GETARG_BOOL(7);
	MemoryContext old;
	Source	   *src;
	SourceMessage msgs[100];
	StringInfoData out;
	TimestampTz last = GetCurrentTimestamp();
	int			total = 0;

	/* The source outlives the call: librdkafka's consumer is closed at exit. */
	old = MemoryContextSwitchTo(TopMemoryContext);
	spec = palloc0(sizeof(KafkaSourceSpec));
	spec->brokers = text_to_cstring(PG_GETARG_TEXT_PP(0));
	deconstruct_array(topics, TEXTOID, -1, false, TYPALIGN_INT, &names, NULL, &ntopics);
	for (int i = 0; i < ntopics; i++)
		spec->topics = lappend(spec->topics, TextDatumGetCString(names[i]));
	spec->group_id = text_to_cstring(PG_GETARG_TEXT_PP(2));
	spec->owner = GetUserId();
	if (positions)
	{
		Jsonb	   *copy = palloc(VARSIZE(positions));

		memcpy(copy, positions, VARSIZE(positions));
		positions = copy;
	}
	src = kafka_source_open(spec, "source_split", positions, NULL, new_slot(), PG_GETARG_INT32(3),
							PG_GETARG_INT32(4));

	initStringInfo(&out);
	appendStringInfoString(&out, "{\"messages\": [");
	while (TimestampDifferenceMilliseconds(last, GetCurrentTimestamp()) < quiet_ms)
	{
		int			n = src->ops->poll(src, msgs, lengthof(msgs));

		for (int i = 0; i < n; i++)
			appendStringInfo(&out, "%s[%d, %d, " INT64_FORMAT "]", total + i ? ", " : "",
							 msgs[i].topic, msgs[i].partition, msgs[i].offset);
		total += n;
		if (n > 0)
			last = GetCurrentTimestamp();
		else
			pg_usleep(20 * 1000L);
		CHECK_FOR_INTERRUPTS();
	}
	appendStringInfoString(&out, "], ");
	append_partitions(&out, src);
	append_state(&out, src);
	if (commit)
		src->ops->committed(src);
	MemoryContextSwitchTo(old);
	PG_RETURN_DATUM(result(&out));
}
