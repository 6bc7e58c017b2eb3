/*
 * sink_kafka.c
 *		The Kafka sink's buffer and outbox (sink_kafka.h).
 *
 * An output row becomes a record (key, value, headers) as the plan's
 * expressions make it; records are kept in order, every one of them (a
 * topic is a changelog: no coalescing per key).  At the checkpoint they are
 * inserted into mailer.kafka_outbox under the epoch, in the checkpoint's
 * own transaction, with one statement per chunk; after the commit the
 * publisher sends them (kafka_publisher.c; a Pulsar sink's,
 * pulsar_publisher.c: the same records and outbox, another protocol).
 *
 * Design: docs/ARCHITECTURE.md, "The Kafka sink" and "The Pulsar sink".
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "base/mailer.h"
#include "base/test_point.h"
#include "connectors/kafka_publisher.h"
#include "connectors/pulsar_publisher.h"
#include "connectors/sink_kafka.h"
#include "jobs/catalog.h"
#include "plan/kafka_options.h"

#define OUTBOX_CHUNK_ROWS 10000

/* Bytes of buffered records past which the worker checkpoints early. */
#define KAFKA_SINK_MAX_BYTES (64 * 1024 * 1024)

typedef struct KafkaRecord
{
	bytea	   *key;			/* NULL: none */
	bytea	   *value;			/* NULL: a tombstone */
	bytea	   *headers;		/* NULL: none */
	const char *topic;			/* where the row's input came from, for dead letters */
	int32		partition;
	int64		offset;
} KafkaRecord;

struct KafkaSink
{
	KafkaSinkPlan *plan;
	KafkaSinkSpec *spec;
	SinkOwner	owner;
	MemoryContext ctx;			/* the records; reset at each flush */
	MemoryContext scratch;		/* one row's expression evaluation */
	KafkaRecord *records;
	int			nrecords;
	int			capacity;
	int64		max_bytes;		/* the producer's message.max.bytes */
	bool	   *failing;
	KafkaPublisher *publisher;	/* one of the two */
	PulsarPublisher *pulsar;
	SPIPlanPtr	insert_plan;
};

static void keep(KafkaSink *sink, Datum *values, bool *nulls, bool tombstone,
				 const char *topic, int32 partition, int64 offset);
static int64 record_bytes(KafkaSink *sink, KafkaRecord *r);
static void refuse(KafkaSink *sink, KafkaRecord *r, const char *message, const char *hint,
				   DeadLetterBuffer *dlq, OnError on_error);
static void insert_chunk(KafkaSink *sink, int64 epoch, int first_seq, KafkaRecord **chunk, int n);

KafkaSink *
kafka_sink_create(JobPlan *plan, SinkPlan *sink_plan, KafkaSinkSpec *spec, const SinkOwner *owner,
				  MemoryContext parent, bool *failing)
{
	KafkaSink  *sink = MemoryContextAllocZero(parent, sizeof(KafkaSink));

	sink->plan = sink_plan->kafka;
	sink->spec = spec;
	sink->owner = *owner;
	sink->failing = failing;
	sink->ctx = AllocSetContextCreate(parent, "mailer kafka sink records", ALLOCSET_DEFAULT_SIZES);
	sink->scratch = AllocSetContextCreate(parent, "mailer kafka sink row", ALLOCSET_DEFAULT_SIZES);
	if (spec->pulsar)
		sink->pulsar = pulsar_publisher_create(sink->spec, owner, parent);
	else
	{
		sink->max_bytes = kafka_producer_max_bytes(spec);
		sink->publisher = kafka_publisher_create(sink->spec, owner, plan->spec->on_error, failing,
												 parent);
	}
	return sink;
}

/*
 * The expressions run in a context of their own, reset for every row: what
 * building a JSON value leaves behind would otherwise pile up until the
 * caller resets its context, after a whole checkpoint's rows.  Only the
 * results' bytes are copied out, into the caller's context.
 */
void
kafka_sink_project(KafkaSink *sink, ExprRuntime *out_rt, Record *rec, Datum *values, bool *nulls)
{
	KafkaSinkPlan *kp = sink->plan;
	MemoryContext caller = MemoryContextSwitchTo(sink->scratch);
	Datum	   *hvalues = palloc(sizeof(Datum) * Max(kp->nheaders, 1));
	bool	   *hnulls = palloc(sizeof(bool) * Max(kp->nheaders, 1));
	Datum		key = (Datum) 0;
	Datum		value;
	bool		key_null = true;
	bool		value_null;

	if (kp->key)
		key = expr_eval(kp->key, out_rt, rec, &key_null);
	value = expr_eval(kp->value, out_rt, rec, &value_null);
	for (int h = 0; h < kp->nheaders; h++)
		hvalues[h] = expr_eval(kp->headers[h], out_rt, rec, &hnulls[h]);

	MemoryContextSwitchTo(caller);

	/*
	 * A null value is a tombstone, which only a replaced row may be: JSON
	 * says null, other formats have no word for it.
	 */
	if (value_null && sink->spec->format == FORMAT_JSON)
	{
		value = CStringGetTextDatum("null");
		value_null = false;
	}
	else if (value_null)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("the Kafka sink's value is null for this row"),
				 errdetail("A record with a null value is a tombstone: it deletes its key from a compacted topic."),
				 errhint("Give every row a value in %s.value, e.g. with coalesce().", sink->spec->path)));
	nulls[KAFKA_COLUMN_KEY] = key_null;
	values[KAFKA_COLUMN_KEY] = key_null ? (Datum) 0 : PointerGetDatum(PG_DETOAST_DATUM_COPY(key));
	nulls[KAFKA_COLUMN_VALUE] = value_null;
	values[KAFKA_COLUMN_VALUE] = value_null ? (Datum) 0 : PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
	nulls[KAFKA_COLUMN_HEADERS] = kp->nheaders == 0;
	values[KAFKA_COLUMN_HEADERS] = kp->nheaders == 0 ? (Datum) 0 :
		PointerGetDatum(kafka_headers_encode(kp->nheaders, hvalues, hnulls));
	MemoryContextReset(sink->scratch);
}

void
kafka_sink_add(KafkaSink *sink, Datum *values, bool *nulls, const char *topic, int32 partition,
			   int64 offset)
{
	keep(sink, values, nulls, false, topic, partition, offset);
}

void
kafka_sink_tombstone(KafkaSink *sink, Datum *values, bool *nulls)
{
	keep(sink, values, nulls, true, NULL, -1, -1);
}

/* Text and bytea alike: the record holds the value's bytes. */
static bytea *
copy_bytes(Datum d, bool isnull)
{
	return isnull ? NULL : (bytea *) PG_DETOAST_DATUM_COPY(d);
}

static void
keep(KafkaSink *sink, Datum *values, bool *nulls, bool tombstone, const char *topic,
	 int32 partition, int64 offset)
{
	MemoryContext old = MemoryContextSwitchTo(sink->ctx);
	KafkaRecord *r;

	if (sink->nrecords == sink->capacity)
	{
		sink->capacity = Max(1024, sink->capacity * 2);
		sink->records = sink->records ?
			repalloc_huge(sink->records, sizeof(KafkaRecord) * sink->capacity) :
			palloc_extended(sizeof(KafkaRecord) * sink->capacity, MCXT_ALLOC_HUGE);
	}
	r = &sink->records[sink->nrecords++];
	r->key = copy_bytes(values[KAFKA_COLUMN_KEY], nulls[KAFKA_COLUMN_KEY]);
	r->value = tombstone ? NULL : copy_bytes(values[KAFKA_COLUMN_VALUE], nulls[KAFKA_COLUMN_VALUE]);
	r->headers = copy_bytes(values[KAFKA_COLUMN_HEADERS], nulls[KAFKA_COLUMN_HEADERS]);
	r->topic = topic;
	r->partition = partition;
	r->offset = offset;
	MemoryContextSwitchTo(old);
}

int
kafka_sink_rows(KafkaSink *sink)
{
	return sink->nrecords;
}

bool
kafka_sink_full(KafkaSink *sink)
{
	return MemoryContextMemAllocated(sink->ctx, true) >= KAFKA_SINK_MAX_BYTES;
}

int64
kafka_sink_flush(KafkaSink *sink, DeadLetterBuffer *dlq, OnError on_error, int64 epoch,
				 int64 *rejected)
{
	KafkaRecord **chunk = palloc(sizeof(KafkaRecord *) * OUTBOX_CHUNK_ROWS);
	int			n = 0;
	int64		written = 0;

	*rejected = 0;
	for (int i = 0; i < sink->nrecords; i++)
	{
		KafkaRecord *r = &sink->records[i];
		const char *why;
		const char *hint;
		MemoryContext caller = MemoryContextSwitchTo(sink->scratch);

		/*
		 * The producer would refuse it at every attempt: it never reaches
		 * the outbox.  (A Pulsar sink's outbox must never lose a record
		 * later: that would renumber the records after it.)
		 */
		if (sink->pulsar)
			why = pulsar_record_refusal(sink->spec, r->key, r->value, r->headers, &hint);
		else
		{
			int64		size = record_bytes(sink, r);

			why = size <= sink->max_bytes ? NULL :
				psprintf("the record is " INT64_FORMAT " bytes, more than the producer's message.max.bytes (" INT64_FORMAT ")",
						 size, sink->max_bytes);
			hint = "Raise sink.options.message.max.bytes (and the topic's max.message.bytes), or set on_error to dead_letter.";
		}
		if (why)
			refuse(sink, r, why, hint, dlq, on_error);
		MemoryContextSwitchTo(caller);
		MemoryContextReset(sink->scratch);
		if (why)
		{
			(*rejected)++;
			continue;
		}
		chunk[n++] = r;
		if (n == OUTBOX_CHUNK_ROWS)
		{
			insert_chunk(sink, epoch, written, chunk, n);
			written += n;
			n = 0;
		}
	}
	if (n > 0)
		insert_chunk(sink, epoch, written, chunk, n);
	written += n;
	TEST_POINT("kafka_sink_after_outbox");

	sink->nrecords = 0;
	sink->capacity = 0;
	sink->records = NULL;
	MemoryContextReset(sink->ctx);
	pfree(chunk);
	return written;
}

bool
kafka_sink_publish(KafkaSink *sink, char **error)
{
	if (sink->pulsar)
		return pulsar_publisher_publish(sink->pulsar, error);
	return kafka_publisher_publish(sink->publisher, error);
}

/* The bytes librdkafka counts against message.max.bytes. */
static int64
record_bytes(KafkaSink *sink, KafkaRecord *r)
{
	int64		size = 0;

	if (r->key)
		size += VARSIZE_ANY_EXHDR(r->key);
	if (r->value)
		size += VARSIZE_ANY_EXHDR(r->value);
	if (r->headers)
	{
		size += VARSIZE_ANY_EXHDR(r->headers);
		for (int h = 0; h < sink->plan->nheaders; h++)
			size += strlen(sink->plan->header_names[h]);
	}
	return size;
}

static void
refuse(KafkaSink *sink, KafkaRecord *r, const char *message, const char *hint,
	   DeadLetterBuffer *dlq, OnError on_error)
{
	if (on_error == ON_ERROR_FAIL)
	{
		*sink->failing = true;
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("an output record could not be written to topic \"%s\": %s",
						sink->spec->topic, message),
				 errhint("%s", hint)));
	}
	if (on_error == ON_ERROR_DEAD_LETTER)
		dead_letter_add(dlq, r->topic, r->partition, r->offset,
						r->key ? VARDATA_ANY(r->key) : NULL, r->key ? VARSIZE_ANY_EXHDR(r->key) : -1,
						r->value ? VARDATA_ANY(r->value) : NULL, r->value ? VARSIZE_ANY_EXHDR(r->value) : -1,
						"sink", message);
}

/* One INSERT ... SELECT FROM unnest of n records, numbered from first_seq. */
static void
insert_chunk(KafkaSink *sink, int64 epoch, int first_seq, KafkaRecord **chunk, int n)
{
	Oid			types[7] = {INT8OID, INT4OID, INT8OID, INT4OID, BYTEAARRAYOID, BYTEAARRAYOID, BYTEAARRAYOID};
	Datum		values[7];
	Datum	   *keys = palloc(sizeof(Datum) * n);
	Datum	   *vals = palloc(sizeof(Datum) * n);
	Datum	   *hdrs = palloc(sizeof(Datum) * n);
	bool	   *knulls = palloc(sizeof(bool) * n);
	bool	   *vnulls = palloc(sizeof(bool) * n);
	bool	   *hnulls = palloc(sizeof(bool) * n);
	int			dims[1] = {n};
	int			lbs[1] = {1};
	CatalogAccess access;

	for (int i = 0; i < n; i++)
	{
		keys[i] = PointerGetDatum(chunk[i]->key);
		knulls[i] = chunk[i]->key == NULL;
		vals[i] = PointerGetDatum(chunk[i]->value);
		vnulls[i] = chunk[i]->value == NULL;
		hdrs[i] = PointerGetDatum(chunk[i]->headers);
		hnulls[i] = chunk[i]->headers == NULL;
	}
	values[0] = Int64GetDatum(sink->owner.job_id);
	values[1] = Int32GetDatum(sink->owner.subtask);
	values[2] = Int64GetDatum(epoch);
	values[3] = Int32GetDatum(first_seq);
	values[4] = PointerGetDatum(construct_md_array(keys, knulls, 1, dims, lbs, BYTEAOID, -1, false, TYPALIGN_INT));
	values[5] = PointerGetDatum(construct_md_array(vals, vnulls, 1, dims, lbs, BYTEAOID, -1, false, TYPALIGN_INT));
	values[6] = PointerGetDatum(construct_md_array(hdrs, hnulls, 1, dims, lbs, BYTEAOID, -1, false, TYPALIGN_INT));

	/* The outbox is the extension's: written as the catalog's owner, not the job's. */
	SPI_connect();
	catalog_enter(&access);
	if (sink->insert_plan == NULL)
	{
		sink->insert_plan = SPI_prepare("INSERT INTO " MAILER_SCHEMA ".kafka_outbox "
										"(job_id, subtask, epoch, seq, key, value, headers) "
										"SELECT $1, $2, $3, $4 OPERATOR(pg_catalog.+) r.n::integer, r.k, r.v, r.h "
										"FROM ROWS FROM (pg_catalog.unnest($5), pg_catalog.unnest($6), pg_catalog.unnest($7)) "
										"WITH ORDINALITY AS r(k, v, h, n)",
										7, types);
		if (sink->insert_plan == NULL || SPI_keepplan(sink->insert_plan) != 0)
			elog(ERROR, "could not prepare the Kafka sink's outbox insert: %s",
				 SPI_result_code_string(SPI_result));
	}
	if (SPI_execute_plan(sink->insert_plan, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not write the Kafka sink's outbox");
	catalog_leave(&access);
	SPI_finish();
}
