/*
 * kafka_publisher.c
 *		Publish a Kafka sink's outbox (kafka_publisher.h).
 *
 * The protocol, for an exactly-once sink (docs/ARCHITECTURE.md, "The Kafka
 * sink", has the crash analysis):
 *
 * 1. The checkpoint transaction of epoch E inserts E's records into
 *    mailer.kafka_outbox and commits (for a parallel job: the epoch's
 *    decision and this subtask's share are both committed).
 * 2. Publish, in a Kafka transaction of the producer whose transactional.id
 *    names the job and subtask: every outbox record past the published
 *    epoch P, in (epoch, seq) order; then the marker: an offset of the
 *    memberless group "<transactional.id>.epochs" on the topic's partition
 *    0, whose value is the last epoch sent and whose metadata names the
 *    generation, sent with send_offsets_to_transaction so that it commits
 *    or aborts with the records.  Commit.
 * 3. In a PostgreSQL transaction: delete the outbox records up to that
 *    epoch and note it in mailer.kafka_sink_progress.
 *
 * P is the marker's epoch, read once per producer right after
 * init_transactions (which fences an older producer of the same id and
 * rolls back its open transaction, so the marker is final): records past
 * it are in no committed Kafka transaction, records up to it are.  The
 * progress row is the fallback when the broker has no marker (it expired
 * with offsets.retention.minutes, or the topic was made anew), and it wins
 * over a marker of an older generation (restore_job moved the job back).
 *
 * An at-least-once sink has no transactions and no marker: it produces,
 * waits for every acknowledgement, then deletes, so a crash in between
 * sends records again.
 */
#include "postgres.h"

#include <librdkafka/rdkafka.h>

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/portal.h"

#include "base/mailer.h"
#include "base/test_point.h"
#include "base/work_xact.h"
#include "connectors/kafka_client.h"
#include "connectors/kafka_publisher.h"
#include "connectors/sink_progress.h"
#include "connectors/sink_kafka.h"
#include "jobs/catalog.h"
#include "plan/kafka_options.h"

/* How long one call into librdkafka may hold the worker. */
#define KAFKA_CALL_TIMEOUT_MS 10000

/* Outbox rows fetched at a time. */
#define FETCH_ROWS 1000

/* A Kafka transaction ends at the first epoch's end past this many bytes. */
#define PUBLISH_MAX_BYTES (64 * 1024 * 1024)

/* The marker's partition and its metadata's form. */
#define MARKER_PARTITION 0
#define MARKER_METADATA "mailer generation %d nonce %16s"

/*
 * The bytes a batch of one record adds to its key, value and headers (the
 * batch header, the record's lengths and offsets) are under this bound.
 */
#define RECORD_OVERHEAD 256

/* RefusedRecord.size of a record without a key, for a compacted topic */
#define KEYLESS (-2)

/* Records refused for their size in one attempt, kept to dead-letter them. */
#define MAX_REFUSED 1024

typedef struct RefusedRecord
{
	int64		epoch;
	int32		seq;
	rd_kafka_resp_err_t err;	/* the broker's refusal, or 0: over max_record_bytes */
	int64		size;
} RefusedRecord;

struct KafkaPublisher
{
	KafkaSinkSpec *spec;
	SinkOwner	owner;
	OnError		on_error;
	bool	   *failing;		/* set before on_error "fail" raises */
	MemoryContext ctx;
	char	   *transactional_id;
	char	   *marker_group;
	KafkaSecrets secrets;

	rd_kafka_conf_t *producer_conf;	/* built once, in a transaction: a session uses a copy */
	rd_kafka_conf_t *reader_conf;
	rd_kafka_t *rk;				/* NULL: made at the next publish */
	rd_kafka_queue_t *logs;
	rd_kafka_t *reader;			/* a consumer of marker_group: reads the marker and the topic's config */
	rd_kafka_queue_t *reader_logs;
	int64		max_record_bytes;	/* what the topic and the producer take, less a batch's overhead */
	bool		compacted;		/* the topic's cleanup.policy compacts: it takes no null key */
	bool		progress_made;	/* the progress row exists */
	bool		more;			/* the last transaction stopped at its size bound */
	MemoryContext row_ctx;		/* one outbox row's bytes while it is sent */
	bool		marker_known;	/* published is the marker's, for this producer */
	int64		published;		/* every record up to this epoch is in the topic */
	char		nonce[17];		/* the progress row's: a marker without it is not ours */
	int32		generation;

	/* delivery reports of the current attempt */
	rd_kafka_resp_err_t delivery_error; /* the first one not about a record's size */
	RefusedRecord refused[MAX_REFUSED];
	int			nrefused;
	int64	   *sent_epochs;	/* [i]: epoch and seq of the i-th record sent */
	int32	   *sent_seqs;
	int			nsent;
	int			sent_capacity;
};

static bool open_session(KafkaPublisher *pub, char **error);
static int64 newest_epoch(KafkaPublisher *pub);
static bool describe_topic(KafkaPublisher *pub, char **error);
static void close_producer(KafkaPublisher *pub);
static bool read_marker(KafkaPublisher *pub, int64 progress, int32 generation, int64 restored_to,
						char **error);
static int64 send_outbox(KafkaPublisher *pub, char **error);
static int64 produce_row(KafkaPublisher *pub, HeapTuple tuple, TupleDesc desc);
static bool commit_kafka(KafkaPublisher *pub, int64 through, char **error);
static void record_published(KafkaPublisher *pub, int64 through);
static void dead_letter_refused(KafkaPublisher *pub);
static void refuse_oversized(KafkaPublisher *pub);
static bool txn_failed(KafkaPublisher *pub, rd_kafka_error_t *err, const char *what, char **error);
static void delivery_report(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque);
static char *client_error(KafkaPublisher *pub, const char *what, const char *text);

KafkaPublisher *
kafka_publisher_create(KafkaSinkSpec *spec, const SinkOwner *owner, OnError on_error,
					   bool *failing, MemoryContext parent)
{
	KafkaPublisher *pub = MemoryContextAllocZero(parent, sizeof(KafkaPublisher));

	pub->spec = spec;
	pub->on_error = on_error;
	pub->failing = failing;
	pub->owner = *owner;
	pub->ctx = parent;

	/*
	 * Unique across every database and server that may share the cluster,
	 * and new for a job made anew after DROP EXTENSION (its id may repeat,
	 * the extension's oid does not).
	 */
	pub->transactional_id = sink_producer_id(owner, parent);
	pub->marker_group = MemoryContextStrdup(parent, psprintf("%s.epochs", pub->transactional_id));
	kafka_secrets_collect(&pub->secrets, spec->options);
	pub->row_ctx = AllocSetContextCreate(parent, "mailer kafka publish row", ALLOCSET_SMALL_SIZES);

	/*
	 * The configurations are judged and built here, in the worker's start
	 * transaction (the owner's privileges are looked up in the catalog),
	 * and copied for each session.
	 */
	pub->producer_conf = kafka_producer_conf(spec, pub->transactional_id, false);
	rd_kafka_conf_set_dr_msg_cb(pub->producer_conf, delivery_report);
	rd_kafka_conf_set_opaque(pub->producer_conf, pub);
	pub->reader_conf = kafka_marker_reader_conf(spec, pub->marker_group);
	return pub;
}

static PublishRound publish_round(void *arg, char **error);
static bool prepare_round(KafkaPublisher *pub, char **error);

bool
kafka_publisher_publish(KafkaPublisher *pub, char **error)
{
	return sink_publish_rounds(&pub->owner, pub->transactional_id, &pub->progress_made,
							   publish_round, pub, error);
}

/*
 * The session, the marker, and what the outbox holds that can never be
 * sent: settled and committed before the Kafka transaction, so that no
 * dead letter hangs on that transaction's outcome.
 */
static bool
prepare_round(KafkaPublisher *pub, char **error)
{
	SinkProgress row;
	int64		progress;

	if (pub->rk == NULL && !open_session(pub, error))
		return false;
	kafka_drain_logs(pub->logs, &pub->secrets);
	work_xact_begin();
	sink_progress_read(&pub->owner, &row);
	strlcpy(pub->nonce, row.nonce, sizeof(pub->nonce));
	progress = row.published;
	if ((!pub->marker_known || row.generation != pub->generation) &&
		!read_marker(pub, progress, row.generation, row.restored_to, error))
	{
		work_xact_abort();
		return false;
	}
	if (progress < pub->published)
		record_published(pub, pub->published);
	refuse_oversized(pub);
	work_xact_end();
	return true;
}

static PublishRound
publish_round(void *arg, char **error)
{
	KafkaPublisher *pub = (KafkaPublisher *) arg;
	int64		through;

	if (!prepare_round(pub, error))
	{
		close_producer(pub);
		return PUBLISH_FAILED;
	}
	work_xact_begin();
	if (pub->spec->exactly_once)
	{
		rd_kafka_error_t *err = rd_kafka_begin_transaction(pub->rk);

		if (err && txn_failed(pub, err, "begin a transaction", error))
		{
			work_xact_abort();
			return PUBLISH_FAILED;
		}
		TEST_POINT("kafka_sink_after_begin");
	}
	through = send_outbox(pub, error);
	if (through < 0)
	{
		/*
		 * Records the broker refused for their size: abort, dead-letter
		 * them (committed now), and send the rest again.  Any other failure
		 * ends the producer: the next call starts over with a new one.
		 */
		if (pub->nrefused > 0 &&
			(!pub->spec->exactly_once ||
			 !txn_failed(pub, rd_kafka_abort_transaction(pub->rk, KAFKA_CALL_TIMEOUT_MS),
						 "abort a transaction", error)))
		{
			dead_letter_refused(pub);
			work_xact_end();
			*error = NULL;
			return PUBLISH_MORE;
		}
		close_producer(pub);
		work_xact_abort();
		return PUBLISH_FAILED;
	}
	if (through == 0)
	{
		/* Nothing to send: an empty transaction commits nothing. */
		if (pub->spec->exactly_once)
			(void) txn_failed(pub, rd_kafka_abort_transaction(pub->rk, KAFKA_CALL_TIMEOUT_MS),
							  "abort an empty transaction", error);
		work_xact_end();
		*error = NULL;
		return PUBLISH_DONE;
	}
	if (!commit_kafka(pub, through, error))
	{
		close_producer(pub);
		work_xact_abort();
		return PUBLISH_FAILED;
	}
	TEST_POINT("kafka_sink_after_kafka_commit");
	pub->published = through;
	record_published(pub, through);
	work_xact_end();
	TEST_POINT("kafka_sink_after_cleanup");
	return pub->more ? PUBLISH_MORE : PUBLISH_DONE;
}

/*
 * A new session: the reader, the topic's limit, then the producer, its
 * batches no larger than the topic takes (librdkafka does not split a batch
 * the broker refuses as too large).  The marker is read later, in the
 * publish's transaction.
 */
static bool
open_session(KafkaPublisher *pub, char **error)
{
	char		errstr[512];
	rd_kafka_conf_t *conf;
	bool		batch_size_set = false;
	ListCell   *lc;

	conf = rd_kafka_conf_dup(pub->reader_conf);
	pub->reader = kafka_client_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (pub->reader == NULL)
	{
		rd_kafka_conf_destroy(conf);
		*error = client_error(pub, "create a consumer for the epoch marker", errstr);
		return false;
	}
	pub->reader_logs = rd_kafka_queue_new(pub->reader);
	rd_kafka_set_log_queue(pub->reader, pub->reader_logs);
	if (!describe_topic(pub, error))
		return false;

	conf = rd_kafka_conf_dup(pub->producer_conf);
	foreach(lc, pub->spec->options)
		batch_size_set |= strcmp(((DefElem *) lfirst(lc))->defname, "batch.size") == 0;
	if (!batch_size_set)
	{
		char		size[32];

		snprintf(size, sizeof(size), INT64_FORMAT, Min(pub->max_record_bytes + RECORD_OVERHEAD, 1000000));
		if (rd_kafka_conf_set(conf, "batch.size", size, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		{
			rd_kafka_conf_destroy(conf);
			*error = client_error(pub, "bound its batches", errstr);
			return false;
		}
	}
	pub->rk = kafka_client_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (pub->rk == NULL)
	{
		rd_kafka_conf_destroy(conf);
		*error = client_error(pub, "create a producer", errstr);
		return false;
	}
	pub->logs = rd_kafka_queue_new(pub->rk);
	rd_kafka_set_log_queue(pub->rk, pub->logs);
	pub->marker_known = false;
	return true;
}

static void
close_producer(KafkaPublisher *pub)
{
	/* Records not sent yet are dropped: the outbox still holds them. */
	if (pub->rk)
		rd_kafka_purge(pub->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	if (pub->logs)
		rd_kafka_queue_destroy(pub->logs);
	if (pub->rk)
		rd_kafka_destroy(pub->rk);
	if (pub->reader_logs)
		rd_kafka_queue_destroy(pub->reader_logs);
	if (pub->reader)
		rd_kafka_destroy(pub->reader);
	pub->logs = pub->reader_logs = NULL;
	pub->rk = pub->reader = NULL;
	pub->marker_known = false;
}

/*
 * Exactly once: initialize transactions (fencing an older producer of the
 * id, rolling back its open transaction), then read the marker.  At least
 * once: the progress row is all there is.
 */
static bool
read_marker(KafkaPublisher *pub, int64 progress, int32 generation, int64 restored_to, char **error)
{
	rd_kafka_topic_partition_list_t *parts;
	rd_kafka_topic_partition_t *p;
	rd_kafka_resp_err_t err;
	rd_kafka_error_t *txn_err;
	int32		marker_generation = -1;

	pub->generation = generation;
	pub->published = progress;
	if (!pub->spec->exactly_once)
	{
		pub->marker_known = true;
		return true;
	}

	txn_err = rd_kafka_init_transactions(pub->rk, KAFKA_CALL_TIMEOUT_MS);
	if (txn_err)
	{
		*error = client_error(pub, "initialize transactions", rd_kafka_error_string(txn_err));
		rd_kafka_error_destroy(txn_err);
		return false;
	}
	parts = rd_kafka_topic_partition_list_new(1);
	p = rd_kafka_topic_partition_list_add(parts, pub->spec->topic, MARKER_PARTITION);
	err = rd_kafka_committed(pub->reader, parts, KAFKA_CALL_TIMEOUT_MS);
	kafka_drain_logs(pub->reader_logs, &pub->secrets);
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		err = p->err;
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		*error = client_error(pub, "read the epoch marker", rd_kafka_err2str(err));
		rd_kafka_topic_partition_list_destroy(parts);
		return false;
	}
	if (p->offset >= 0 && p->metadata_size > 0)
	{
		char	   *meta = pnstrdup(p->metadata, p->metadata_size);
		char		nonce[17];

		/* Not ours (forged, or of another installation): as if there were none. */
		if (sscanf(meta, MARKER_METADATA, &marker_generation, nonce) != 2 ||
			strcmp(nonce, pub->nonce) != 0)
			marker_generation = -1;
	}
	/*
	 * The marker of this generation decides, unless it is past every epoch
	 * this database has: the database is older than the topic (a failover
	 * to a replica that lagged, a restored backup), and trusting the marker
	 * would drop the replayed epochs' records.  A marker of an older
	 * generation (restore_job moved the job back) is believed up to the
	 * epoch restored to, which the restore kept; past it the progress row,
	 * moved back with the job, decides.
	 */
	if (p->offset >= 0 && marker_generation == generation && p->offset > newest_epoch(pub))
	{
		int64		newest = newest_epoch(pub);

		*error = psprintf("topic \"%s\" holds this job's output up to epoch " INT64_FORMAT ", past the newest checkpoint of this database, epoch " INT64_FORMAT " (a replica or backup older than the topic); stop the job and restore_job it to epoch " INT64_FORMAT " to publish the epochs after it again",
						  pub->spec->topic, (int64) p->offset, newest, newest);
		rd_kafka_topic_partition_list_destroy(parts);
		return false;
	}
	if (p->offset >= 0 && marker_generation == generation)
		pub->published = p->offset;
	else if (p->offset >= 0 && marker_generation >= 0 && marker_generation < generation && restored_to >= 0)
		pub->published = Max(progress, Min(p->offset, restored_to));
	else if (p->offset >= 0 && marker_generation > generation)
	{
		*error = psprintf("the epoch marker of topic \"%s\" is of generation %d, newer than the job's %d",
						  pub->spec->topic, marker_generation, generation);
		rd_kafka_topic_partition_list_destroy(parts);
		return false;
	}
	rd_kafka_topic_partition_list_destroy(parts);
	pub->marker_known = true;
	return true;
}

/* The job's newest committed epoch (subtask 0's row decides an epoch). */
static int64
newest_epoch(KafkaPublisher *pub)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	bool		isnull;
	int64		epoch;

	values[0] = Int64GetDatum(pub->owner.job_id);
	SPI_connect();
	catalog_exec("SELECT pg_catalog.max(epoch) FROM " MAILER_SCHEMA ".checkpoints "
				 "WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) 0",
				 1, types, values, NULL, false);
	epoch = DatumGetInt64(catalog_value(0, 1, &isnull));
	SPI_finish();
	return isnull ? 0 : epoch;
}

/*
 * The topic must exist before anything is sent to it (librdkafka would hold
 * the records until message.timeout.ms, and mailer creates no topics, as it
 * creates no sink tables), and its max.message.bytes bounds a record: the
 * broker refuses a larger one, and the whole batch around it.  Without the
 * right to read the topic's configuration, the producer's limit stands.
 */
static bool
describe_topic(KafkaPublisher *pub, char **error)
{
	rd_kafka_ConfigResource_t *resource = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, pub->spec->topic);
	rd_kafka_queue_t *queue = rd_kafka_queue_new(pub->reader);
	rd_kafka_AdminOptions_t *options = rd_kafka_AdminOptions_new(pub->reader, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
	rd_kafka_event_t *ev;
	rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__TIMED_OUT;
	int64		topic_max = -1;
	int64		producer_max = kafka_producer_max_bytes(pub->spec);
	(void) rd_kafka_AdminOptions_set_request_timeout(options, KAFKA_CALL_TIMEOUT_MS, NULL, 0);
	rd_kafka_DescribeConfigs(pub->reader, &resource, 1, options, queue);
	ev = rd_kafka_queue_poll(queue, KAFKA_CALL_TIMEOUT_MS + 1000);
	if (ev)
	{
		const rd_kafka_DescribeConfigs_result_t *result = rd_kafka_event_DescribeConfigs_result(ev);
		size_t		nres = 0;
		const rd_kafka_ConfigResource_t **res = NULL;

		err = rd_kafka_event_error(ev);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR && result)
			res = rd_kafka_DescribeConfigs_result_resources(result, &nres);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR && nres == 1)
		{
			size_t		nconf = 0;
			const rd_kafka_ConfigEntry_t **entries = rd_kafka_ConfigResource_configs(res[0], &nconf);

			err = rd_kafka_ConfigResource_error(res[0]);
			for (size_t i = 0; err == RD_KAFKA_RESP_ERR_NO_ERROR && i < nconf; i++)
				if (strcmp(rd_kafka_ConfigEntry_name(entries[i]), "cleanup.policy") == 0 &&
					rd_kafka_ConfigEntry_value(entries[i]) != NULL)
					pub->compacted = strstr(rd_kafka_ConfigEntry_value(entries[i]), "compact") != NULL;
				else if (strcmp(rd_kafka_ConfigEntry_name(entries[i]), "max.message.bytes") == 0 &&
					rd_kafka_ConfigEntry_value(entries[i]) != NULL)
					topic_max = strtoll(rd_kafka_ConfigEntry_value(entries[i]), NULL, 10);
		}
		rd_kafka_event_destroy(ev);
	}
	rd_kafka_AdminOptions_destroy(options);
	rd_kafka_queue_destroy(queue);
	rd_kafka_ConfigResource_destroy(resource);
	kafka_drain_logs(pub->reader_logs, &pub->secrets);

	if (err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
	{
		*error = client_error(pub, "find the topic", "the topic does not exist (create it; mailer does not)");
		return false;
	}
	if (err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
		ereport(LOG,
				(errmsg("Kafka sink of topic \"%s\" may not read the topic's max.message.bytes; records are bounded by the producer's message.max.bytes only",
						pub->spec->topic)));
	else if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		*error = client_error(pub, "describe the topic", rd_kafka_err2str(err));
		return false;
	}
	pub->max_record_bytes = (topic_max > 0 ? Min(topic_max, producer_max) : producer_max) - RECORD_OVERHEAD;
	return true;
}

/*
 * Produce the outbox records past pub->published and wait for every
 * acknowledgement.  Returns the last epoch sent, 0 when there was nothing,
 * -1 on failure (*error set, or pub->refused holding records the broker
 * refused for their size).
 */
static int64
send_outbox(KafkaPublisher *pub, char **error)
{
	Oid			types[3] = {INT8OID, INT4OID, INT8OID};
	Datum		values[3];
	Portal		portal;
	SPIPlanPtr	plan;
	CatalogAccess access;
	int64		last = 0;
	int64		bytes = 0;
	bool		stop = false;
	rd_kafka_resp_err_t flush_err;

	pub->delivery_error = RD_KAFKA_RESP_ERR_NO_ERROR;
	pub->nrefused = 0;
	pub->nsent = 0;
	pub->more = false;
	values[0] = Int64GetDatum(pub->owner.job_id);
	values[1] = Int32GetDatum(pub->owner.subtask);
	values[2] = Int64GetDatum(pub->published);

	/* The outbox is the extension's: read it as the catalog's owner, not the job's. */
	SPI_connect();
	catalog_enter(&access);
	plan = SPI_prepare("SELECT epoch, seq, key, value, headers FROM " MAILER_SCHEMA ".kafka_outbox "
					   "WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) $2 "
					   "AND epoch OPERATOR(pg_catalog.>) $3 ORDER BY epoch, seq", 3, types);
	if (plan == NULL)
		elog(ERROR, "could not prepare the Kafka sink's outbox read: %s", SPI_result_code_string(SPI_result));
	/* Not read-only: it must see what this transaction deleted before it. */
	portal = SPI_cursor_open(NULL, plan, values, NULL, false);
	while (!stop && pub->delivery_error == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		SPI_cursor_fetch(portal, true, FETCH_ROWS);
		if (SPI_processed == 0)
			break;
		for (uint64 i = 0; i < SPI_processed && !stop; i++)
		{
			HeapTuple	tuple = SPI_tuptable->vals[i];
			int64		epoch;

			/*
			 * A transaction ends at an epoch's end once it holds enough:
			 * a backlog goes out in bounded transactions, each well within
			 * transaction.timeout.ms, each committing its marker.
			 */
			epoch = DatumGetInt64(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 1, &(bool) {0}));
			if (last != 0 && epoch != last && bytes >= PUBLISH_MAX_BYTES)
			{
				pub->more = true;
				stop = true;
				break;
			}
			bytes += produce_row(pub, tuple, SPI_tuptable->tupdesc);
			last = epoch;
		}
		SPI_freetuptable(SPI_tuptable);
		rd_kafka_poll(pub->rk, 0);
		CHECK_FOR_INTERRUPTS();
	}
	SPI_cursor_close(portal);
	catalog_leave(&access);
	SPI_finish();

	/* Every acknowledgement, or the first failure, before the marker. */
	flush_err = rd_kafka_flush(pub->rk, KAFKA_CALL_TIMEOUT_MS * 3);
	kafka_drain_logs(pub->logs, &pub->secrets);
	if (flush_err != RD_KAFKA_RESP_ERR_NO_ERROR && pub->delivery_error == RD_KAFKA_RESP_ERR_NO_ERROR)
		pub->delivery_error = flush_err;
	TEST_POINT("kafka_sink_after_produce");
	if (pub->nrefused > 0)
	{
		*error = client_error(pub, "write to the topic", rd_kafka_err2str(pub->refused[0].err));
		return -1;
	}
	if (pub->delivery_error != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		*error = client_error(pub, "write to the topic", rd_kafka_err2str(pub->delivery_error));
		return -1;
	}
	return last;
}

/*
 * Produce one outbox row (epoch, seq, key, value, headers); its bytes.  A
 * refusal is noted in pub (refused for its size, or delivery_error).
 */
static int64
produce_row(KafkaPublisher *pub, HeapTuple tuple, TupleDesc desc)
{
	MemoryContext old = MemoryContextSwitchTo(pub->row_ctx);
	bool		isnull;
	int64		epoch = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
	int32		seq = DatumGetInt32(SPI_getbinval(tuple, desc, 2, &isnull));
	Datum		kd = SPI_getbinval(tuple, desc, 3, &isnull);
	bytea	   *key = isnull ? NULL : DatumGetByteaPP(kd);
	Datum		vd = SPI_getbinval(tuple, desc, 4, &isnull);
	bytea	   *value = isnull ? NULL : DatumGetByteaPP(vd);
	Datum		hd = SPI_getbinval(tuple, desc, 5, &isnull);
	bytea	   *headers = isnull ? NULL : DatumGetByteaPP(hd);
	rd_kafka_headers_t *hdrs = NULL;
	rd_kafka_resp_err_t err;
	int64		bytes = (key ? VARSIZE_ANY_EXHDR(key) : 0) + (value ? VARSIZE_ANY_EXHDR(value) : 0);
	ListCell   *lc;
	int			h = 0;

	if (headers)
	{
		hdrs = rd_kafka_headers_new(list_length(pub->spec->headers));
		foreach(lc, pub->spec->headers)
		{
			NamedExprSpec *ne = lfirst(lc);
			const char *data;
			int			len;

			(void) kafka_headers_value(headers, h++, &data, &len);
			rd_kafka_header_add(hdrs, ne->name, -1, data, len < 0 ? 0 : len);
		}
		bytes += VARSIZE_ANY_EXHDR(headers);
	}
	MemoryContextSwitchTo(pub->ctx);
	if (pub->nsent == pub->sent_capacity)
	{
		pub->sent_capacity = Max(4096, pub->sent_capacity * 2);
		pub->sent_epochs = pub->sent_epochs ?
			repalloc_huge(pub->sent_epochs, sizeof(int64) * pub->sent_capacity) :
			palloc_extended(sizeof(int64) * pub->sent_capacity, MCXT_ALLOC_HUGE);
		pub->sent_seqs = pub->sent_seqs ?
			repalloc_huge(pub->sent_seqs, sizeof(int32) * pub->sent_capacity) :
			palloc_extended(sizeof(int32) * pub->sent_capacity, MCXT_ALLOC_HUGE);
	}
	pub->sent_epochs[pub->nsent] = epoch;
	pub->sent_seqs[pub->nsent] = seq;
	for (;;)
	{
		err = rd_kafka_producev(pub->rk,
								RD_KAFKA_V_TOPIC(pub->spec->topic),
								RD_KAFKA_V_KEY(key ? VARDATA_ANY(key) : NULL, key ? VARSIZE_ANY_EXHDR(key) : 0),
								RD_KAFKA_V_VALUE(value ? VARDATA_ANY(value) : NULL,
												 value ? VARSIZE_ANY_EXHDR(value) : 0),
								RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
								RD_KAFKA_V_HEADERS(hdrs),
								RD_KAFKA_V_OPAQUE((void *) (intptr_t) (pub->nsent + 1)),
								RD_KAFKA_V_END);
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
			break;
		/* The producer's queue is full: let it send, and serve its reports. */
		rd_kafka_poll(pub->rk, 100);
		CHECK_FOR_INTERRUPTS();
	}
	/* On failure the headers are still ours. */
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR && hdrs)
		rd_kafka_headers_destroy(hdrs);
	if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE && pub->nrefused < MAX_REFUSED)
		pub->refused[pub->nrefused++] = (RefusedRecord) {epoch, seq, err, -1};
	else if (err != RD_KAFKA_RESP_ERR_NO_ERROR && pub->delivery_error == RD_KAFKA_RESP_ERR_NO_ERROR)
		pub->delivery_error = err;
	else if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		pub->nsent++;
	MemoryContextSwitchTo(old);
	MemoryContextReset(pub->row_ctx);
	return bytes;
}

/* The marker, with the records, then the commit. */
static bool
commit_kafka(KafkaPublisher *pub, int64 through, char **error)
{
	rd_kafka_topic_partition_list_t *offsets;
	rd_kafka_consumer_group_metadata_t *group;
	rd_kafka_error_t *err;
	char	   *meta;

	if (!pub->spec->exactly_once)
		return true;
	offsets = rd_kafka_topic_partition_list_new(1);
	meta = psprintf("mailer generation %d nonce %s", pub->generation, pub->nonce);
	{
		rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_add(offsets, pub->spec->topic,
																		   MARKER_PARTITION);

		p->offset = through;
		p->metadata = strdup(meta);
		p->metadata_size = strlen(meta);
	}
	group = rd_kafka_consumer_group_metadata_new(pub->marker_group);
	err = rd_kafka_send_offsets_to_transaction(pub->rk, offsets, group, KAFKA_CALL_TIMEOUT_MS);
	rd_kafka_consumer_group_metadata_destroy(group);
	rd_kafka_topic_partition_list_destroy(offsets);
	if (err && txn_failed(pub, err, "send the epoch marker", error))
		return false;
	TEST_POINT("kafka_sink_after_marker");
	err = rd_kafka_commit_transaction(pub->rk, KAFKA_CALL_TIMEOUT_MS * 3);
	if (err && txn_failed(pub, err, "commit a transaction", error))
		return false;
	return true;
}

/* Forget the outbox records up to through: the topic holds them. */
static void
record_published(KafkaPublisher *pub, int64 through)
{
	sink_progress_record(&pub->owner, through, -1, -1);
}

/*
 * Records the topic would refuse whatever is tried never go out: larger
 * than it takes, or without a key for a compacted topic (the broker refuses
 * the whole batch around such a record).  They leave the outbox before
 * anything is produced, in chunks of MAX_REFUSED.
 */
static void
refuse_oversized(KafkaPublisher *pub)
{
	Oid			types[6] = {INT8OID, INT4OID, INT8OID, INT8OID, INT4OID, BOOLOID};
	Datum		values[6];
	int64		names = 0;
	ListCell   *lc;

	foreach(lc, pub->spec->headers)
		names += strlen(((NamedExprSpec *) lfirst(lc))->name);
	values[0] = Int64GetDatum(pub->owner.job_id);
	values[1] = Int32GetDatum(pub->owner.subtask);
	values[2] = Int64GetDatum(pub->published);
	values[3] = Int64GetDatum(pub->max_record_bytes);
	values[4] = Int32GetDatum((int32) names);
	values[5] = BoolGetDatum(pub->compacted);
	for (;;)
	{
		SPI_connect();
		catalog_exec("SELECT epoch, seq, CASE WHEN s OPERATOR(pg_catalog.>) $4 THEN s ELSE -2 END "
					 "FROM (SELECT epoch, seq, key IS NULL AS keyless, "
					 "coalesce(pg_catalog.octet_length(key), 0) OPERATOR(pg_catalog.+) "
					 "coalesce(pg_catalog.octet_length(value), 0) OPERATOR(pg_catalog.+) "
					 "coalesce(pg_catalog.octet_length(headers) OPERATOR(pg_catalog.+) $5, 0) AS s "
					 "FROM " MAILER_SCHEMA ".kafka_outbox WHERE job_id OPERATOR(pg_catalog.=) $1 "
					 "AND subtask OPERATOR(pg_catalog.=) $2 AND epoch OPERATOR(pg_catalog.>) $3) r "
					 "WHERE s OPERATOR(pg_catalog.>) $4 OR ($6 AND keyless) "
					 "ORDER BY epoch, seq LIMIT " CppAsString2(MAX_REFUSED),
					 6, types, values, NULL, false);	/* sees the deletes before it */
		pub->nrefused = 0;
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			bool		isnull;

			pub->refused[pub->nrefused++] = (RefusedRecord) {
				DatumGetInt64(catalog_value(i, 1, &isnull)),
				DatumGetInt32(catalog_value(i, 2, &isnull)),
				RD_KAFKA_RESP_ERR_NO_ERROR,
				DatumGetInt64(catalog_value(i, 3, &isnull))
			};
		}
		SPI_finish();
		if (pub->nrefused == 0)
			return;
		dead_letter_refused(pub);
	}
}

/*
 * Records the broker refused for their size (the topic's max.message.bytes
 * is below the producer's limit): each leaves the outbox for
 * mailer.dead_letters, in the publish's transaction, and the rest is sent
 * again.  on_error "fail" fails the job instead; "skip" drops them.
 */
static void
dead_letter_refused(KafkaPublisher *pub)
{
	Oid			types[4] = {INT8OID, INT4OID, INT8OID, INT4OID};
	Datum		values[4];

	values[0] = Int64GetDatum(pub->owner.job_id);
	values[1] = Int32GetDatum(pub->owner.subtask);
	SPI_connect();
	for (int i = 0; i < pub->nrefused; i++)
	{
		RefusedRecord *r = &pub->refused[i];
		char	   *message = r->err ?
			psprintf("topic \"%s\" refused the record: %s", pub->spec->topic, rd_kafka_err2str(r->err)) :
			r->size == KEYLESS ?
			psprintf("topic \"%s\" is compacted (cleanup.policy) and takes no record without a key", pub->spec->topic) :
			psprintf("the record is " INT64_FORMAT " bytes, more than topic \"%s\" takes (max.message.bytes, less " INT64_FORMAT " bytes of a batch's overhead: " INT64_FORMAT ")",
					 r->size, pub->spec->topic, (int64) RECORD_OVERHEAD, pub->max_record_bytes);

		if (pub->on_error == ON_ERROR_FAIL)
		{
			*pub->failing = true;
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("an output record could not be written: %s", message),
					 errhint("Raise the topic's max.message.bytes, or set on_error to dead_letter.")));
		}
		values[2] = Int64GetDatum(r->epoch);
		values[3] = Int32GetDatum(r->seq);
		if (pub->on_error == ON_ERROR_DEAD_LETTER)
		{
			Oid			dtypes[5] = {INT8OID, INT4OID, INT8OID, INT4OID, TEXTOID};
			Datum		dvalues[5] = {values[0], values[1], values[2], values[3], CStringGetTextDatum(message)};

			catalog_exec("INSERT INTO " MAILER_SCHEMA ".dead_letters (job_id, epoch, key, value, stage, error) "
						 "SELECT job_id, epoch, key, value, 'sink', $5 FROM " MAILER_SCHEMA ".kafka_outbox "
						 "WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) $2 "
						 "AND epoch OPERATOR(pg_catalog.=) $3 AND seq OPERATOR(pg_catalog.=) $4",
						 5, dtypes, dvalues, NULL, false);
		}
		catalog_exec("DELETE FROM " MAILER_SCHEMA ".kafka_outbox WHERE job_id OPERATOR(pg_catalog.=) $1 "
					 "AND subtask OPERATOR(pg_catalog.=) $2 AND epoch OPERATOR(pg_catalog.=) $3 "
					 "AND seq OPERATOR(pg_catalog.=) $4", 4, types, values, NULL, false);
	}
	SPI_finish();
	pub->nrefused = 0;
}

/*
 * A transactional call failed (err is destroyed).  An abortable error
 * aborts the transaction; any other ends the producer: the next publish
 * makes a new one, whose init_transactions settles whatever this one left
 * and whose marker says what committed.  Always true.
 */
static bool
txn_failed(KafkaPublisher *pub, rd_kafka_error_t *err, const char *what, char **error)
{
	if (err == NULL)
		return false;
	if (*error == NULL)
		*error = client_error(pub, what, rd_kafka_error_string(err));
	if (rd_kafka_error_txn_requires_abort(err))
	{
		rd_kafka_error_t *abort_err = rd_kafka_abort_transaction(pub->rk, KAFKA_CALL_TIMEOUT_MS);

		if (abort_err)
		{
			rd_kafka_error_destroy(abort_err);
			close_producer(pub);
		}
	}
	else
		close_producer(pub);
	rd_kafka_error_destroy(err);
	return true;
}

/* Served by rd_kafka_poll and rd_kafka_flush, on the worker's own thread. */
static void
delivery_report(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
	KafkaPublisher *pub = (KafkaPublisher *) opaque;
	int			i = (int) (intptr_t) msg->_private - 1;

	if (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR)
		return;
	if (msg->err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE && i >= 0 && i < pub->nsent &&
		pub->nrefused < MAX_REFUSED)
		pub->refused[pub->nrefused++] = (RefusedRecord) {pub->sent_epochs[i], pub->sent_seqs[i], msg->err, -1};
	else if (pub->delivery_error == RD_KAFKA_RESP_ERR_NO_ERROR)
		pub->delivery_error = msg->err;
}

/* An error text that names the topic, with secrets masked. */
static char *
client_error(KafkaPublisher *pub, const char *what, const char *text)
{
	char	   *message = psprintf("Kafka sink could not %s for topic \"%s\": %s", what, pub->spec->topic, text);

	kafka_secrets_mask(&pub->secrets, message, strlen(message) + 1);
	return message;
}

/*
 * Encoded headers: for each of the spec's headers in order, a 4-byte
 * length in network order (-1: null) and the value's bytes.
 */
bytea *
kafka_headers_encode(int n, Datum *values, bool *nulls)
{
	StringInfoData buf;
	bytea	   *result;

	initStringInfo(&buf);
	appendStringInfoSpaces(&buf, VARHDRSZ);
	for (int h = 0; h < n; h++)
	{
		text	   *t = nulls[h] ? NULL : DatumGetTextPP(values[h]);
		uint32		len = pg_hton32(t ? (uint32) VARSIZE_ANY_EXHDR(t) : (uint32) -1);

		appendBinaryStringInfo(&buf, (char *) &len, sizeof(len));
		if (t)
			appendBinaryStringInfo(&buf, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
	}
	result = (bytea *) buf.data;
	SET_VARSIZE(result, buf.len);
	return result;
}

bool
kafka_headers_value(bytea *headers, int i, const char **data, int *len)
{
	const char *p = VARDATA_ANY(headers);
	const char *end = p + VARSIZE_ANY_EXHDR(headers);

	for (int h = 0; p + sizeof(uint32) <= end; h++)
	{
		uint32		n;

		memcpy(&n, p, sizeof(n));
		n = pg_ntoh32(n);
		p += sizeof(n);
		if (h == i)
		{
			*data = n == (uint32) -1 ? NULL : p;
			*len = n == (uint32) -1 ? -1 : (int) n;
			return n != (uint32) -1;
		}
		if (n != (uint32) -1)
			p += n;
	}
	*data = NULL;
	*len = -1;
	return false;
}
