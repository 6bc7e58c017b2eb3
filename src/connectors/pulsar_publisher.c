/*
 * pulsar_publisher.c
 *		Publish a Pulsar sink's outbox (pulsar_publisher.h).
 *
 * The protocol (docs/ARCHITECTURE.md, "The Pulsar sink", has the failure
 * analysis):
 *
 * 1. The checkpoint transaction of epoch E inserts E's records into
 *    mailer.kafka_outbox, as for a Kafka sink, and commits.
 * 2. A producer named "<producer id>.g<generation>", opened with
 *    initialSequenceId = N, the progress row's last_sequence_id, sends
 *    every outbox record past P, the progress row's published_epoch, in
 *    (epoch, seq) order: they take the sequence ids N+1, N+2, ... in that
 *    order, and the publisher waits for every acknowledgement.  A send
 *    error (any result but "ok") fails the round: the producer is closed
 *    and nothing is noted.
 * 3. In a PostgreSQL transaction: the outbox records up to the last epoch
 *    sent are deleted, and published_epoch and last_sequence_id move on
 *    together.
 *
 * N always belongs to P (a round ends at an epoch's end), and the records
 * past P never change once committed (nothing leaves the outbox but by
 * step 3, and a record the topic cannot take is refused before it enters),
 * so a round sent again after any failure gives every record the sequence
 * id it had before: the broker, deduplicating by producer name, drops what
 * it has stored (acknowledging it with id -1:-1) and stores the rest.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/portal.h"

#include "base/mailer.h"
#include "base/test_point.h"
#include "base/work_xact.h"
#include "connectors/kafka_publisher.h"
#include "connectors/pulsar_admin.h"
#include "connectors/pulsar_frame.h"
#include "connectors/pulsar_publisher.h"
#include "connectors/pulsar_ws.h"
#include "connectors/sink_progress.h"
#include "jobs/catalog.h"

/* How long the producer's handshake, or the next acknowledgement, may take. */
#define PULSAR_CALL_TIMEOUT_MS 10000

/*
 * Outbox rows fetched, sent and acknowledged at a time: the producer has
 * at most this many messages in flight (the WebSocket service does not
 * block when its queue is full: it fails the send), and at most
 * INFLIGHT_MAX_BYTES of frames (queued in the worker until sent).
 */
#define FETCH_ROWS 1000
#define INFLIGHT_MAX_BYTES (16 * 1024 * 1024)

/* A round ends at the first epoch's end past this many bytes. */
#define PUBLISH_MAX_BYTES (64 * 1024 * 1024)

struct PulsarPublisher
{
	KafkaSinkSpec *spec;
	SinkOwner	owner;
	MemoryContext ctx;
	MemoryContext row_ctx;		/* one page of outbox rows while it is sent */
	char	   *producer_id;
	bool		progress_made;	/* the progress row exists */
	bool		more;			/* the last round stopped at its size bound */

	PulsarWsSecurity sec;		/* the spec's token and CA */
	PulsarWs   *ws;
	PulsarAdmin *admin;			/* the topic's checks before a producer opens */
	PulsarWsConn *conn;			/* the producer, or NULL */
	char	   *conn_name;		/* its name */
	int64		conn_next;		/* the sequence id its next message takes */

	/* the current round */
	int64		sent;			/* messages queued */
	int64		acked;			/* acknowledgements received, in order */
	int64		duplicates;		/* of which the broker dropped as already stored */
	int64		sent_before;	/* the last sequence id an earlier attempt may have sent */
	int64		page_bytes;		/* of the frames not yet acknowledged */

	/*
	 * The round's error: sink_error writes here, so the text outlives the
	 * SPI and transaction contexts it was found in.
	 */
	char		error[1024];
};

static PublishRound publish_round(void *arg, char **error);
static bool open_producer(PulsarPublisher *pub, const char *name, int64 last_sequence_id,
						  char **error);
static void close_producer(PulsarPublisher *pub);
static bool check_topic(PulsarPublisher *pub, char **error);
static int64 outbox_count(PulsarPublisher *pub, int64 published, int64 bound);
static int64 send_outbox(PulsarPublisher *pub, int64 published, int64 bound, bool whole,
						 char **error);
static bool send_row(PulsarPublisher *pub, HeapTuple tuple, TupleDesc desc, int64 *bytes,
					 char **error);
static bool wait_acks(PulsarPublisher *pub, char **error);
static bool take_acks(PulsarPublisher *pub, char **error);
static char *sink_error(PulsarPublisher *pub, const char *what, const char *why);

/* A record's properties, as its frame carries them. */
typedef struct RecordProperties
{
	int			n;
	const char **names;
	const char **values;
	int		   *lengths;		/* of each value's bytes: a zero byte cuts the string short */
} RecordProperties;

static void record_properties(const KafkaSinkSpec *spec, bytea *headers, RecordProperties *props);

PulsarPublisher *
pulsar_publisher_create(KafkaSinkSpec *spec, const SinkOwner *owner, MemoryContext parent)
{
	PulsarPublisher *pub = MemoryContextAllocZero(parent, sizeof(PulsarPublisher));

	pub->spec = spec;
	pub->owner = *owner;
	pub->ctx = parent;
	pub->producer_id = sink_producer_id(owner, parent);
	pub->sec = pulsar_security_of(spec->service_url, spec->options);
	pub->row_ctx = AllocSetContextCreate(parent, "mailer pulsar publish rows", ALLOCSET_DEFAULT_SIZES);
	return pub;
}

bool
pulsar_publisher_publish(PulsarPublisher *pub, char **error)
{
	return sink_publish_rounds(&pub->owner, pub->producer_id, &pub->progress_made,
							   publish_round, pub, error);
}

/*
 * One round: the records past the published epoch (up to restored_to
 * while the producer of an older generation still has records to send),
 * sent and acknowledged, then noted.
 */
static PublishRound
publish_round(void *arg, char **error)
{
	PulsarPublisher *pub = (PulsarPublisher *) arg;
	SinkProgress row;
	bool		older;
	int64		bound;
	int64		through;
	int64		sent_through;
	char		name[NAMEDATALEN * 2];

	work_xact_begin();
	sink_progress_read(&pub->owner, &row);

	/*
	 * restore_job moved the generation on: the records it kept (up to
	 * restored_to) were numbered by the older generation's producer, which
	 * may have sent some of them before the restore.  They go out under
	 * that producer's name and numbers first, all in one round, so the
	 * broker drops what it has; then the new generation's producer starts
	 * its own numbering for the replayed epochs.
	 */
	older = row.sequence_generation != row.generation;
	bound = older ? Max(row.restored_to, row.published) : PG_INT64_MAX;
	snprintf(name, sizeof(name), "%s.g%d", pub->producer_id, older ? row.sequence_generation : row.generation);

	/*
	 * The broker drops a record as a duplicate when its name's highest
	 * stored sequence id is at or past the record's.  That is expected
	 * only of what an earlier attempt may have sent, up to the sent mark;
	 * so the mark moves past this round's records, and commits, before any
	 * of them goes.  A duplicate above the mark as it was then means
	 * another producer used the name (take_acks).
	 */
	pub->sent_before = row.sent_sequence_id;
	sent_through = row.last_sequence_id + outbox_count(pub, row.published, bound);
	if (sent_through > row.sent_sequence_id)
	{
		sink_progress_mark_sent(&pub->owner, sent_through);
		work_xact_end();
		work_xact_begin();
	}
	if (!open_producer(pub, name, row.last_sequence_id, error))
	{
		work_xact_abort();
		return PUBLISH_FAILED;
	}
	through = send_outbox(pub, row.published, bound, older, error);
	if (through < 0)
	{
		/* Its numbering is now ahead of the progress row's: a new producer goes on. */
		close_producer(pub);
		work_xact_abort();
		return PUBLISH_FAILED;
	}
	if (pub->duplicates > 0)
		ereport(LOG,
				(errmsg("Pulsar sink of topic \"persistent://%s\": the broker already held " INT64_FORMAT " of the " INT64_FORMAT " records sent again",
						pub->spec->topic, pub->duplicates, pub->sent)));
	if (older)
	{
		sink_progress_record(&pub->owner, Max(row.published, through), -1, row.generation);
		close_producer(pub);
		work_xact_end();
		return PUBLISH_MORE;
	}
	if (through == 0)
	{
		work_xact_end();
		return PUBLISH_DONE;
	}
	TEST_POINT("pulsar_sink_after_acks");
	sink_progress_record(&pub->owner, through, row.last_sequence_id + pub->sent, row.generation);
	work_xact_end();
	TEST_POINT("pulsar_sink_after_progress");
	return pub->more ? PUBLISH_MORE : PUBLISH_DONE;
}

/*
 * The producer of this name whose next message takes the sequence id
 * last_sequence_id + 1: the open one if it is that, else a new one.  The
 * broker refuses a second producer of a name while the first is
 * connected, so a worker that has not let go yet holds the next back.
 */
static bool
open_producer(PulsarPublisher *pub, const char *name, int64 last_sequence_id, char **error)
{
	char		err[512];
	const char *why = NULL;
	TimestampTz deadline;

	/*
	 * Nothing services the session between publishes: take in what came
	 * meanwhile (a close after the broker's idle timeout) before trusting
	 * it.
	 */
	if (pub->conn)
		(void) pulsar_ws_service(pub->ws, 0);
	if (pub->conn && strcmp(pub->conn_name, name) == 0 && pub->conn_next == last_sequence_id + 1 &&
		pulsar_ws_state(pub->conn, NULL) == PULSAR_WS_OPEN)
		return true;
	close_producer(pub);
	if (!check_topic(pub, error))
		return false;
	if (pub->ws == NULL && (pub->ws = pulsar_ws_new(&pub->sec, err, sizeof(err))) == NULL)
	{
		*error = sink_error(pub, "start a Pulsar client", err);
		return false;
	}
	pub->conn = pulsar_ws_producer(pub->ws, pub->spec->service_url, pub->spec->topic, name,
								   last_sequence_id, err, sizeof(err));
	if (pub->conn == NULL)
	{
		*error = sink_error(pub, "open a producer", err);
		return false;
	}
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PULSAR_CALL_TIMEOUT_MS);
	while (pulsar_ws_state(pub->conn, &why) == PULSAR_WS_CONNECTING)
	{
		CHECK_FOR_INTERRUPTS();
		if (GetCurrentTimestamp() > deadline)
		{
			why = "the broker did not answer the producer's handshake within 10 s";
			break;
		}
		if (pulsar_ws_service(pub->ws, 100) < 0)
		{
			why = "libwebsockets failed";
			break;
		}
	}
	if (pulsar_ws_state(pub->conn, &why) != PULSAR_WS_OPEN)
	{
		*error = sink_error(pub, "open a producer", why ? why : "the session closed");
		close_producer(pub);
		return false;
	}
	pub->conn_name = MemoryContextStrdup(pub->ctx, name);
	pub->conn_next = last_sequence_id + 1;
	return true;
}

/*
 * Before any record is sent through a new producer, the topic must be one
 * the protocol holds for: not partitioned (the WebSocket producer picks a
 * keyless message's partition itself, so a record sent again could land
 * where the broker does not know it), and deduplicating (else a record
 * sent again is stored again).  Asked of the admin API each time, so that
 * a policy changed meanwhile is seen at the next producer.
 */
static bool
check_topic(PulsarPublisher *pub, char **error)
{
	char		why[700];
	int64		partitions;

	if (pub->admin == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(pub->ctx);

		pub->admin = pulsar_admin_new(pub->spec->service_url, &pub->sec, NULL);
		MemoryContextSwitchTo(old);
	}
	pub->admin->slow = false;
	if (!pulsar_admin_get(pub->admin, psprintf("/admin/v2/persistent/%s/partitions", pub->spec->topic),
						  why, sizeof(why)) ||
		!pulsar_json_number(pub->admin->body, "partitions", &partitions))
	{
		*error = sink_error(pub, "read the topic's partitions", why);
		return false;
	}
	if (partitions > 0)
	{
		*error = sink_error(pub, "send records",
							"the topic is partitioned, which the Pulsar sink does not support yet (give a topic that is not partitioned)");
		return false;
	}
	if (!pulsar_admin_get(pub->admin, psprintf("/admin/v2/persistent/%s/deduplicationEnabled?applied=true",
											   pub->spec->topic), why, sizeof(why)))
	{
		*error = sink_error(pub, "read whether the topic deduplicates", why);
		return false;
	}
	if (strncmp(pub->admin->body, "true", 4) != 0)
	{
		*error = sink_error(pub, "send records",
							"the topic does not deduplicate, so a record sent again after a crash would be stored twice (enable it: brokerDeduplicationEnabled=true, or pulsar-admin topics set-deduplication --enable)");
		return false;
	}
	return true;
}

static void
close_producer(PulsarPublisher *pub)
{
	if (pub->conn)
	{
		pulsar_ws_close(pub->conn);
		(void) pulsar_ws_service(pub->ws, 0);
	}
	pub->conn = NULL;
	if (pub->conn_name)
		pfree(pub->conn_name);
	pub->conn_name = NULL;
}

/* The outbox records of the epochs in (published, bound]. */
static int64
outbox_count(PulsarPublisher *pub, int64 published, int64 bound)
{
	Oid			types[4] = {INT8OID, INT4OID, INT8OID, INT8OID};
	Datum		values[4];
	bool		isnull;
	int64		n;

	values[0] = Int64GetDatum(pub->owner.job_id);
	values[1] = Int32GetDatum(pub->owner.subtask);
	values[2] = Int64GetDatum(published);
	values[3] = Int64GetDatum(bound);
	SPI_connect();
	catalog_exec("SELECT pg_catalog.count(*) FROM " MAILER_SCHEMA ".kafka_outbox "
				 "WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) $2 "
				 "AND epoch OPERATOR(pg_catalog.>) $3 AND epoch OPERATOR(pg_catalog.<=) $4",
				 4, types, values, NULL, true);
	n = DatumGetInt64(catalog_value(0, 1, &isnull));
	SPI_finish();
	return n;
}

/*
 * Send the outbox records of the epochs in (published, bound], in order, a
 * page at a time, each page acknowledged before the next goes; unless
 * whole, stop at an epoch's end past PUBLISH_MAX_BYTES.  Returns the last
 * epoch sent, 0 when there was nothing, -1 on failure (*error set).
 */
static int64
send_outbox(PulsarPublisher *pub, int64 published, int64 bound, bool whole, char **error)
{
	Oid			types[4] = {INT8OID, INT4OID, INT8OID, INT8OID};
	Datum		values[4];
	Portal		portal;
	SPIPlanPtr	plan;
	CatalogAccess access;
	int64		last = 0;
	int64		bytes = 0;
	bool		stop = false;
	bool		ok = true;

	pub->sent = pub->acked = pub->duplicates = pub->page_bytes = 0;
	pub->more = false;
	values[0] = Int64GetDatum(pub->owner.job_id);
	values[1] = Int32GetDatum(pub->owner.subtask);
	values[2] = Int64GetDatum(published);
	values[3] = Int64GetDatum(bound);

	/* The outbox is the extension's: read it as the catalog's owner, not the job's. */
	SPI_connect();
	catalog_enter(&access);
	plan = SPI_prepare("SELECT epoch, seq, key, value, headers FROM " MAILER_SCHEMA ".kafka_outbox "
					   "WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) $2 "
					   "AND epoch OPERATOR(pg_catalog.>) $3 AND epoch OPERATOR(pg_catalog.<=) $4 "
					   "ORDER BY epoch, seq", 4, types);
	if (plan == NULL)
		elog(ERROR, "could not prepare the Pulsar sink's outbox read: %s", SPI_result_code_string(SPI_result));
	portal = SPI_cursor_open(NULL, plan, values, NULL, true);
	while (!stop && ok)
	{
		SPI_cursor_fetch(portal, true, FETCH_ROWS);
		if (SPI_processed == 0)
			break;
		for (uint64 i = 0; i < SPI_processed && ok; i++)
		{
			HeapTuple	tuple = SPI_tuptable->vals[i];
			bool		isnull;
			int64		epoch = DatumGetInt64(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 1, &isnull));

			/*
			 * A round ends at an epoch's end once it holds enough: the
			 * progress row's sequence id must be that of an epoch's last
			 * record.
			 */
			if (!whole && last != 0 && epoch != last && bytes >= PUBLISH_MAX_BYTES)
			{
				pub->more = true;
				stop = true;
				break;
			}
			ok = send_row(pub, tuple, SPI_tuptable->tupdesc, &bytes, error);
			MemoryContextReset(pub->row_ctx);
			if (ok && pub->page_bytes >= INFLIGHT_MAX_BYTES)
				ok = wait_acks(pub, error);
			last = epoch;
		}
		SPI_freetuptable(SPI_tuptable);
		ok = ok && wait_acks(pub, error);
		if (ok && !stop)
			TEST_POINT("pulsar_sink_mid_send");
	}
	SPI_cursor_close(portal);
	catalog_leave(&access);
	SPI_finish();
	if (!ok)
		return -1;
	pub->conn_next += pub->sent;
	return last;
}

/* Queue one outbox row (epoch, seq, key, value, headers) as a message. */
static bool
send_row(PulsarPublisher *pub, HeapTuple tuple, TupleDesc desc, int64 *bytes, char **error)
{
	MemoryContext old = MemoryContextSwitchTo(pub->row_ctx);
	bool		isnull;
	Datum		kd = SPI_getbinval(tuple, desc, 3, &isnull);
	bytea	   *key = isnull ? NULL : DatumGetByteaPP(kd);
	Datum		vd = SPI_getbinval(tuple, desc, 4, &isnull);
	bytea	   *value = isnull ? NULL : DatumGetByteaPP(vd);
	Datum		hd = SPI_getbinval(tuple, desc, 5, &isnull);
	bytea	   *headers = isnull ? NULL : DatumGetByteaPP(hd);
	RecordProperties props;
	char		context[32];
	char	   *frame;
	size_t		len;

	record_properties(pub->spec, headers, &props);
	/* The context names the message in its acknowledgement: its sequence id. */
	snprintf(context, sizeof(context), INT64_FORMAT, pub->conn_next + pub->sent);

	/* A tombstone is an empty payload, which Pulsar's compaction takes as a delete. */
	frame = pulsar_frame_send(value ? (const unsigned char *) VARDATA_ANY(value) : (const unsigned char *) "",
							  value ? VARSIZE_ANY_EXHDR(value) : 0,
							  key ? pnstrdup(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key)) : NULL,
							  props.n, props.names, props.values, context, &len);
	MemoryContextSwitchTo(old);
	if (frame == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	*bytes += len;
	pub->page_bytes += len;
	if (!pulsar_ws_send(pub->conn, frame, len))
	{
		const char *why = NULL;

		free(frame);
		(void) pulsar_ws_state(pub->conn, &why);
		*error = sink_error(pub, "send a record", why ? why : "the producer's session closed");
		return false;
	}
	free(frame);
	pub->sent++;
	return true;
}

/* Service the session until every message sent is acknowledged. */
static bool
wait_acks(PulsarPublisher *pub, char **error)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PULSAR_CALL_TIMEOUT_MS);

	while (pub->acked < pub->sent)
	{
		int64		before = pub->acked;

		CHECK_FOR_INTERRUPTS();
		if (pulsar_ws_service(pub->ws, 100) < 0)
		{
			*error = sink_error(pub, "send records", "libwebsockets failed");
			return false;
		}
		if (!take_acks(pub, error))
			return false;
		if (pub->acked > before)
			deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PULSAR_CALL_TIMEOUT_MS);
		else if (GetCurrentTimestamp() > deadline)
		{
			*error = sink_error(pub, "send records",
								psprintf("no acknowledgement within 10 s (" INT64_FORMAT " of " INT64_FORMAT " acknowledged)",
										 pub->acked, pub->sent));
			return false;
		}
	}
	pub->page_bytes = 0;
	return true;
}

/*
 * The acknowledgements received.  Any result but "ok" is a send error, and
 * fails the round: it is never passed over, since the records after it
 * would take its place in the numbering.
 */
static bool
take_acks(PulsarPublisher *pub, char **error)
{
	char	   *frame;
	size_t		len;
	const char *why = NULL;

	while ((frame = pulsar_ws_take(pub->conn, &len)) != NULL)
	{
		PulsarAck	ack;
		PulsarMessageId id;
		char		err[256];
		char		want[32];

		snprintf(want, sizeof(want), INT64_FORMAT, pub->conn_next + pub->acked);
		if (!pulsar_parse_ack(frame, len, &ack, err, sizeof(err)))
			*error = sink_error(pub, "read an acknowledgement", err);
		else if (strcmp(ack.result, "ok") != 0)
			*error = sink_error(pub, "send a record",
								psprintf("%.64s: %.256s", ack.result, ack.error ? ack.error : "no reason given"));
		else if (ack.context == NULL || strcmp(ack.context, want) != 0)
			*error = sink_error(pub, "send records",
								psprintf("an acknowledgement out of order (of %.32s, expected %s)",
										 ack.context ? ack.context : "none", want));
		else if (ack.message_id == NULL || !pulsar_message_id_decode(ack.message_id, &id))
			*error = sink_error(pub, "send records", "an acknowledgement without a message id");
		else if (!pulsar_message_id_is_duplicate(&id) && id.partition >= 0)
			*error = sink_error(pub, "send records",
								"the topic is partitioned, which the Pulsar sink does not support yet (give a topic that is not partitioned)");
		else if (pulsar_message_id_is_duplicate(&id) && pub->conn_next + pub->acked > pub->sent_before)
			*error = sink_error(pub, "send records",
								psprintf("the broker already holds sequence id %s of producer \"%s\", which this sink never sent: "
										 "another producer has used that name (a copy of this database?), and its records took the place of the job's. "
										 "Stop the other producer; then drop and create the job again",
										 want, pub->conn_name));
		else
		{
			if (pulsar_message_id_is_duplicate(&id))
				pub->duplicates++;
			pub->acked++;
		}
		pulsar_ws_frame_free(frame);
		if (*error)
			return false;
	}
	if (pub->acked < pub->sent && pulsar_ws_state(pub->conn, &why) == PULSAR_WS_CLOSED)
	{
		*error = sink_error(pub, "send records", why ? why : "the producer's session closed");
		return false;
	}
	return true;
}

/* A record's properties as strings (a null header is an empty one), in the current context. */
static void
record_properties(const KafkaSinkSpec *spec, bytea *headers, RecordProperties *props)
{
	int			n = headers ? list_length(spec->headers) : 0;
	ListCell   *lc;
	int			h = 0;

	props->n = n;
	props->names = palloc(sizeof(char *) * Max(n, 1));
	props->values = palloc(sizeof(char *) * Max(n, 1));
	props->lengths = palloc(sizeof(int) * Max(n, 1));
	if (n == 0)
		return;
	foreach(lc, spec->headers)
	{
		const char *data;
		int			len;

		(void) kafka_headers_value(headers, h, &data, &len);
		props->names[h] = ((NamedExprSpec *) lfirst(lc))->name;
		props->values[h] = data ? pnstrdup(data, len) : "";
		props->lengths[h++] = data ? len : 0;
	}
}

/* Why a key or property's bytes cannot be a JSON string of the frame, or NULL. */
static const char *
string_refusal(const char *s, int len)
{
	if (memchr(s, '\0', len) != NULL)
		return "holds a zero byte, which a Pulsar string cannot";
	if (pg_encoding_verifymbstr(PG_UTF8, s, len) != len)
		return "is not UTF-8, which a Pulsar string must be";
	return NULL;
}

char *
pulsar_record_refusal(const KafkaSinkSpec *spec, bytea *key, bytea *value, bytea *headers,
					  const char **hint)
{
	RecordProperties props;
	const char *why;
	char	   *key_string = NULL;
	size_t		frame;

	if (key)
	{
		if ((why = string_refusal(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key))) != NULL)
		{
			*hint = "Give the Pulsar sink a key of text (sink.key, format json or text).";
			return psprintf("its key %s", why);
		}
		key_string = pnstrdup(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key));
	}
	record_properties(spec, headers, &props);
	for (int h = 0; h < props.n; h++)
		if ((why = string_refusal(props.values[h], props.lengths[h])) != NULL)
		{
			*hint = "Give the property a text value (sink.properties).";
			return psprintf("its property \"%s\" %s", props.names[h], why);
		}

	/* The longest context a message can carry: its sequence id. */
	frame = pulsar_frame_send_size(value ? VARSIZE_ANY_EXHDR(value) : 0, key_string,
								   props.n, props.names, props.values, "-9223372036854775808");
	if (frame > PULSAR_SINK_MAX_FRAME_BYTES)
	{
		*hint = "Make the record smaller (sink.value, sink.key, sink.properties), or set on_error to dead_letter.";
		return psprintf("its frame would be %zu bytes, more than the WebSocket service takes (%d): "
						"the value travels in base64, the key and properties as JSON strings",
						frame, PULSAR_SINK_MAX_FRAME_BYTES);
	}
	return NULL;
}

static char *
sink_error(PulsarPublisher *pub, const char *what, const char *why)
{
	snprintf(pub->error, sizeof(pub->error), "Pulsar sink could not %s for topic \"persistent://%s\": %s",
			 what, pub->spec->topic, why);
	return pub->error;
}
