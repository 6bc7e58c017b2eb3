/*
 * source_kafka.c
 *		The Kafka source: every partition of one or more topics, consumed in
 *		batches with librdkafka.
 *
 * Positions are mailer's own: partitions are assigned (never subscribed)
 * at the offsets of the last checkpoint, so the broker's committed offsets
 * are only published for lag tools, never read back.  A partition with no
 * checkpointed offset starts at the earliest or latest offset, resolved to
 * a concrete number at once, so a checkpoint taken before it sees a message
 * still pins where it resumes.  New partitions are found by a metadata
 * refresh every few seconds and start at their beginning.  A checkpoint
 * keeps the positions of partitions not assigned (yet) as restored.
 * Positions follow librdkafka's, which pass transaction markers; one that
 * falls outside its partition's log is judged here, never reset silently.
 *
 * librdkafka runs threads of its own: the handle is created with every
 * signal blocked, its logs arrive on a queue drained here on the worker's
 * thread, and its consumer queue signals a pipe that the worker waits on
 * together with its latch.
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "plan/kafka_options.h"
#include "base/mailer.h"
#include "base/signals.h"
#include "connectors/source.h"
#include "base/test_point.h"

#define METADATA_INTERVAL_MS	5000
#define METADATA_RETRY_MS		1000
#define BROKER_TIMEOUT_MS		2000
#define CLOSE_COMMIT_MS			1000
#define SECRET_MASK				"********"
#define UNIX_OFFSET_US ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

typedef struct KafkaPartition
{
	int			topic;
	int32		partition;
	int64		next;			/* next offset to read */
	int64		mark;			/* wait_job target, -1 none */
	int64		assigned_end;	/* end offset when assigned, -1 unknown */
	int			metrics;		/* index in the slot's partition metrics, -1 none */
	bool		out_of_range;	/* librdkafka found next outside the log */
	int64		range_offset;	/* the offset librdkafka found outside it, -1 none */
} KafkaPartition;

typedef struct KafkaSource
{
	Source		base;
	MemoryContext ctx;			/* what lasts: partitions, the batch array */
	KafkaSourceSpec *spec;
	rd_kafka_t *rk;
	rd_kafka_queue_t *queue;	/* consumer queue: messages */
	rd_kafka_queue_t *logs;		/* librdkafka's log lines */
	rd_kafka_topic_t **topics;
	int			pipe_fds[2];	/* the queue writes to [1] when it stops being empty */
	rd_kafka_message_t **batch; /* handed out by the last poll */
	int			nbatch;
	int			batch_capacity;
	KafkaPartition *parts;
	int			nparts;
	int			parts_capacity;
	Jsonb	   *restored;		/* positions of the last checkpoint, or NULL */
	TimestampTz next_refresh;
	char		error[512];		/* a broker or metadata problem, "" when none */
	char		broker_error[512];	/* from the error callback */
	char		status[1100];	/* what base.error points to */
	bool		mark_pending;	/* wait_job asked; marks not taken yet */
	bool	   *topic_known;	/* a topic's first partitions start per the spec */
	bool		any_out_of_range;	/* some partition's out_of_range is set */
	rd_kafka_topic_partition_list_t *assigned;	/* every assigned partition, for positions */
	rd_kafka_topic_partition_list_t *last_commit;	/* of the last checkpoint, or NULL */
	char	  **secrets;		/* values of secret options, masked in every text kept */
	int			nsecrets;
	int			secrets_capacity;
} KafkaSource;

static int	kafka_poll(Source *src, SourceMessage *out, int max);
static Jsonb *kafka_headers(Source *src, SourceMessage *msg);
static long kafka_wait_ms(Source *src);
static pgsocket kafka_event_fd(Source *src);
static Jsonb *kafka_positions(Source *src);
static void kafka_committed(Source *src);
static bool kafka_finished(Source *src);
static int	kafka_partition_count(Source *src);
static void kafka_partition_at(Source *src, int i, int *topic, int32 *partition);
static void kafka_mark_end(Source *src);
static bool kafka_reached_end(Source *src);
static void kafka_close(Source *src);
static bool kafka_backlog(Source *src, int i);

static const SourceOps kafka_ops = {
	kafka_poll, kafka_headers, kafka_wait_ms, kafka_event_fd, kafka_positions,
	kafka_committed, kafka_finished, kafka_partition_count, kafka_partition_at, kafka_mark_end, kafka_reached_end, kafka_close,
	kafka_backlog
};

static void error_callback(rd_kafka_t *rk, int err, const char *reason, void *opaque);
static void drain_logs(KafkaSource *ks);
static void refresh_assignment(KafkaSource *ks);
static void check_restored_exist(KafkaSource *ks, int topic, const rd_kafka_metadata_topic_t *md);
static void take_marks(KafkaSource *ks);
static int	find_partition(KafkaSource *ks, int topic, int32 partition);
static int64 restored_offset(KafkaSource *ks, int topic, int32 partition);
static JsonbValue *restored_topic(KafkaSource *ks, int topic);
static bool take_positions(KafkaSource *ks);
static void handle_out_of_range(KafkaSource *ks);
static void reassign(KafkaSource *ks, KafkaPartition *kp);
static void release_batch(KafkaSource *ks);
static void update_metrics(KafkaSource *ks);
static int64 known_end(KafkaSource *ks, KafkaPartition *kp);
static TimestampTz kafka_time(int64 ms);
static void add_secret(KafkaSource *ks, char *text);
static void mask_secrets(KafkaSource *ks, char *text, size_t size);
static void kafka_exit(int code, Datum arg);

/* One more text to mask in librdkafka's messages; the list grows as needed. */
static void
add_secret(KafkaSource *ks, char *text)
{
	if (ks->nsecrets == ks->secrets_capacity)
	{
		ks->secrets_capacity = Max(8, ks->secrets_capacity * 2);
		ks->secrets = ks->secrets ? repalloc(ks->secrets, sizeof(char *) * ks->secrets_capacity) :
			palloc(sizeof(char *) * ks->secrets_capacity);
	}
	ks->secrets[ks->nsecrets++] = text;
}

Source *
kafka_source_open(KafkaSourceSpec *spec, const char *job_name, Jsonb *positions, JobSlot *slot)
{
	/* Reached from a before_shmem_exit callback: the struct outlives any context. */
	KafkaSource *ks = MemoryContextAllocZero(TopMemoryContext, sizeof(KafkaSource));
	rd_kafka_conf_t *conf = kafka_options_conf(spec, spec->group_id ? spec->group_id : job_name, false);
	char		errstr[512];
	sigset_t	saved;
	ListCell   *lc;
	int			t = 0;

	ks->base.ops = &kafka_ops;
	ks->ctx = CurrentMemoryContext;
	ks->base.slot = slot;
	ks->spec = spec;
	ks->restored = positions;
	ks->base.ntopics = list_length(spec->topics);
	ks->base.topic_names = palloc(sizeof(char *) * ks->base.ntopics);
	foreach(lc, spec->topics)
		ks->base.topic_names[t++] = lfirst(lc);

	/*
	 * librdkafka's texts may quote an option's value (an unparsable
	 * sasl.oauthbearer.config): mask every secret value, and each of its
	 * words of 4 characters or more, wherever it appears.
	 */
	foreach(lc, spec->options)
	{
		DefElem    *opt = lfirst(lc);
		char	   *value = strVal(opt->arg);
		char	   *words;
		char	   *word;
		char	   *save;

		if (!spec_option_is_secret(opt->defname) || value[0] == '\0')
			continue;
		add_secret(ks, pstrdup(value));
		words = pstrdup(value);
		for (word = strtok_r(words, " \t\n\r,;", &save); word; word = strtok_r(NULL, " \t\n\r,;", &save))
		{
			char	   *eq = strchr(word, '=');

			if (strlen(word) >= 4 && strcmp(word, value) != 0)
			{
				add_secret(ks, word);
				if (eq && strlen(eq + 1) >= 4)
					add_secret(ks, eq + 1);
			}
		}
	}

	/*
	 * A position outside the partition's log is mailer's to judge (a gap
	 * left by retention, or a topic created anew): librdkafka reports it
	 * instead of silently moving to the earliest offset.
	 */
	if (rd_kafka_conf_set(conf, "auto.offset.reset", "error", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		elog(ERROR, "librdkafka refused auto.offset.reset: %s", errstr);
	rd_kafka_conf_set_error_cb(conf, error_callback);
	rd_kafka_conf_set_opaque(conf, ks);

	mailer_block_signals(&saved);
	ks->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	mailer_restore_signals(&saved);
	if (ks->rk == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not create a Kafka consumer: %s", errstr)));

	ks->logs = rd_kafka_queue_new(ks->rk);
	rd_kafka_set_log_queue(ks->rk, ks->logs);
	ks->queue = rd_kafka_queue_get_consumer(ks->rk);
	if (pipe(ks->pipe_fds) != 0 ||
		fcntl(ks->pipe_fds[0], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(ks->pipe_fds[1], F_SETFL, O_NONBLOCK) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create a pipe for Kafka events: %m")));
	rd_kafka_queue_io_event_enable(ks->queue, ks->pipe_fds[1], "1", 1);

	ks->topics = palloc(sizeof(rd_kafka_topic_t *) * ks->base.ntopics);
	ks->topic_known = palloc0(sizeof(bool) * ks->base.ntopics);
	for (int i = 0; i < ks->base.ntopics; i++)
		ks->topics[i] = rd_kafka_topic_new(ks->rk, ks->base.topic_names[i], NULL);

	ks->batch_capacity = 0;
	ks->next_refresh = 0;
	ks->assigned = rd_kafka_topic_partition_list_new(16);
	/* Every exit, an ERROR's included, closes the consumer (within bounds). */
	before_shmem_exit(kafka_exit, PointerGetDatum(ks));
	refresh_assignment(ks);
	return &ks->base;
}

/* Called from rd_kafka_poll(), on the worker's own thread. */
static void
error_callback(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	KafkaSource *ks = (KafkaSource *) opaque;

	snprintf(ks->broker_error, sizeof(ks->broker_error), "%s", reason);
	mask_secrets(ks, ks->broker_error, sizeof(ks->broker_error));
}

/*
 * Replace, in place, every occurrence of a secret value in text with
 * SECRET_MASK, the longest first; the result is cut to size.
 */
static void
mask_secrets(KafkaSource *ks, char *text, size_t size)
{
	char		out[1024];
	size_t		o = 0;
	const char *p = text;

	if (ks->nsecrets == 0)
		return;
	while (*p && o < sizeof(out) - 1)
	{
		size_t		match = 0;

		for (int i = 0; i < ks->nsecrets; i++)
		{
			size_t		len = strlen(ks->secrets[i]);

			if (len > match && strncmp(p, ks->secrets[i], len) == 0)
				match = len;
		}
		if (match > 0)
		{
			size_t		n = Min(strlen(SECRET_MASK), sizeof(out) - 1 - o);

			memcpy(out + o, SECRET_MASK, n);
			o += n;
			p += match;
		}
		else
			out[o++] = *p++;
	}
	out[o] = '\0';
	strlcpy(text, out, size);
}

static void
drain_logs(KafkaSource *ks)
{
	rd_kafka_event_t *ev;

	while ((ev = rd_kafka_queue_poll(ks->logs, 0)) != NULL)
	{
		const char *fac;
		const char *str;
		int			level;

		if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_LOG &&
			rd_kafka_event_log(ev, &fac, &str, &level) == 0)
		{
			char		line[1024];

			strlcpy(line, str, sizeof(line));
			mask_secrets(ks, line, sizeof(line));
			ereport(level <= 4 ? LOG : DEBUG1,
					(errmsg_internal("librdkafka %s: %s", fac, line)));
		}
		rd_kafka_event_destroy(ev);
	}
}

/*
 * Learn every topic's partitions and assign the ones not assigned yet.  A
 * broker or topic problem is noted in ks->error (the first one) and retried
 * soon; it holds back its own topic only, whose checkpointed positions
 * stay, while the other topics are assigned and read.
 */
static void
refresh_assignment(KafkaSource *ks)
{
	rd_kafka_topic_partition_list_t *add = rd_kafka_topic_partition_list_new(8);
	bool		failed = false;
	bool		ends_unknown = false;	/* a query of an end offset failed: skip the rest */

	ks->error[0] = '\0';
	for (int t = 0; t < ks->base.ntopics; t++)
	{
		const struct rd_kafka_metadata *md = NULL;
		rd_kafka_resp_err_t err;
		int			first_new;
		bool		topic_failed = false;

		/* Broker calls block for up to BROKER_TIMEOUT_MS each: answer SIGTERM between them. */
		CHECK_FOR_INTERRUPTS();
		err = rd_kafka_metadata(ks->rk, 0, ks->topics[t], &md, BROKER_TIMEOUT_MS);
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR || md->topic_cnt != 1 || md->topics[0].err)
		{
			if (ks->error[0] == '\0')
				snprintf(ks->error, sizeof(ks->error), "waiting for Kafka: %s \"%s\": %s",
						 err ? "cannot read metadata of topic" : "topic", ks->base.topic_names[t],
						 rd_kafka_err2str(err ? err : md && md->topic_cnt == 1 ? md->topics[0].err :
										  RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART));
			if (md)
				rd_kafka_metadata_destroy(md);
			failed = true;
			/* The broker is away: the next topics and end queries would wait as long, in vain. */
			if (err)
			{
				ends_unknown = true;
				break;
			}
			continue;
		}
		check_restored_exist(ks, t, &md->topics[0]);

		/*
		 * A topic's new partitions are positioned all together or not at
		 * all, so a topic is either unknown (it starts per the spec) or
		 * every partition of it has a position that checkpoints keep.
		 */
		first_new = ks->nparts;
		for (int p = 0; p < md->topics[0].partition_cnt; p++)
		{
			int32		partition = md->topics[0].partitions[p].id;
			int64		offset;
			int64		low,
						high = -1;
			KafkaPartition *kp;

			if (find_partition(ks, t, partition) >= 0)
				continue;
			offset = restored_offset(ks, t, partition);
			if (offset < 0 || !ends_unknown)
			{
				CHECK_FOR_INTERRUPTS();
				err = rd_kafka_query_watermark_offsets(ks->rk, ks->base.topic_names[t], partition,
													   &low, &high, BROKER_TIMEOUT_MS);
				if (err && offset < 0)
				{
					if (ks->error[0] == '\0')
						snprintf(ks->error, sizeof(ks->error),
								 "waiting for Kafka: cannot read the offsets of %s partition %d: %s",
								 ks->base.topic_names[t], partition, rd_kafka_err2str(err));
					topic_failed = true;
					break;
				}
				/* A restored position needs no answer: the end offset only tells a backlog. */
				if (err)
				{
					ends_unknown = true;
					high = -1;
				}
			}
			if (offset < 0)
			{
				/*
				 * Without a position: start per the spec.  A partition of a
				 * topic positioned before (while the job ran, or in a
				 * checkpoint) is new: all of it is to be read.
				 */
				bool		latest = ks->spec->start_latest && !ks->topic_known[t] &&
					restored_topic(ks, t) == NULL;

				offset = latest ? high : low;
				/* Until a checkpoint holds it, a restart would take a later "latest". */
				if (latest)
					ks->base.unpinned = true;
			}
			if (ks->nparts == ks->parts_capacity)
			{
				ks->parts_capacity = Max(16, ks->parts_capacity * 2);
				ks->parts = ks->parts ? repalloc(ks->parts, sizeof(KafkaPartition) * ks->parts_capacity) :
					MemoryContextAlloc(ks->ctx, sizeof(KafkaPartition) * ks->parts_capacity);
			}
			kp = &ks->parts[ks->nparts++];
			kp->topic = t;
			kp->partition = partition;
			kp->next = offset;
			kp->mark = -1;
			kp->assigned_end = high;
			kp->out_of_range = false;
			kp->range_offset = -1;
			kp->metrics = -1;
		}
		if (topic_failed)
		{
			/* Nothing of this topic: the next refresh tries all of it again. */
			ks->nparts = first_new;
			rd_kafka_metadata_destroy(md);
			failed = true;
			continue;
		}
		for (int i = first_new; i < ks->nparts; i++)
		{
			KafkaPartition *kp = &ks->parts[i];

			kp->metrics = i < JOB_SLOT_MAX_PARTITIONS ? i : -1;
			rd_kafka_topic_partition_list_add(add, ks->base.topic_names[t], kp->partition)->offset = kp->next;
			rd_kafka_topic_partition_list_add(ks->assigned, ks->base.topic_names[t], kp->partition);
		}
		ks->topic_known[t] = true;
		rd_kafka_metadata_destroy(md);
	}

	/*
	 * An end offset still unknown (its query failed, no fetch since) counts
	 * as a backlog, so the partition is never idle: ask again until known.
	 */
	for (int i = 0; i < ks->nparts && !ends_unknown; i++)
	{
		KafkaPartition *kp = &ks->parts[i];
		int64		low,
					high;

		if (known_end(ks, kp) >= 0)
			continue;
		CHECK_FOR_INTERRUPTS();
		if (rd_kafka_query_watermark_offsets(ks->rk, ks->base.topic_names[kp->topic], kp->partition,
											 &low, &high, BROKER_TIMEOUT_MS) != RD_KAFKA_RESP_ERR_NO_ERROR)
			ends_unknown = true;
		else
			kp->assigned_end = high;
	}

	if (add->cnt > 0)
	{
		rd_kafka_error_t *error = rd_kafka_incremental_assign(ks->rk, add);

		if (error)
		{
			char		msg[512];

			strlcpy(msg, rd_kafka_error_string(error), sizeof(msg));
			mask_secrets(ks, msg, sizeof(msg));
			rd_kafka_error_destroy(error);
			rd_kafka_topic_partition_list_destroy(add);
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not assign Kafka partitions: %s", msg)));
		}
	}
	/* An idle job's end offsets and lag stay current too, not only when messages come. */
	update_metrics(ks);
	rd_kafka_topic_partition_list_destroy(add);
	ks->next_refresh = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   failed ? METADATA_RETRY_MS : METADATA_INTERVAL_MS);
	if (!failed)
		ks->broker_error[0] = '\0';
	ks->base.error = ks->error[0] ? ks->error : NULL;
	if (!failed && ks->mark_pending)
		take_marks(ks);
}

/*
 * A partition of the checkpoint that its topic no longer has: the topic
 * was created anew with fewer partitions.  As with a position past its
 * partition's end, going on would silently drop what the checkpoint read
 * (and the partition would hold the watermark forever), so the job fails.
 */
static void
check_restored_exist(KafkaSource *ks, int topic, const rd_kafka_metadata_topic_t *md)
{
	JsonbValue *restored = restored_topic(ks, topic);
	JsonbIterator *it;
	JsonbValue	k,
				v;
	JsonbIteratorToken tok;

	if (restored == NULL)
		return;
	it = JsonbIteratorInit(restored->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		char	   *key;
		int32		partition;
		bool		exists = false;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(k.val.string.val, k.val.string.len);
		(void) JsonbIteratorNext(&it, &v, true);
		partition = atoi(key);
		if (v.type != jbvNumeric || find_partition(ks, topic, partition) >= 0)
			continue;
		for (int p = 0; p < md->partition_cnt && !exists; p++)
			exists = md->partitions[p].id == partition;
		if (!exists)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("partition %d of Kafka topic \"%s\" no longer exists, though the job's checkpoint holds its position",
							partition, ks->base.topic_names[topic]),
					 errdetail("The topic has %d partitions now: it was deleted and created again with fewer, "
							   "so the job's positions no longer fit it. To go on, restore a checkpoint "
							   "whose positions the topic holds with mailer.restore_job, or drop the job "
							   "and create it again to read the topic anew.", md->partition_cnt),
					 errhint("Retrying cannot help: the job stays failed until one of these.")));
	}
}

static int
find_partition(KafkaSource *ks, int topic, int32 partition)
{
	for (int i = 0; i < ks->nparts; i++)
		if (ks->parts[i].topic == topic && ks->parts[i].partition == partition)
			return i;
	return -1;
}

/* A topic's object of checkpointed positions, or NULL: never positioned. */
static JsonbValue *
restored_topic(KafkaSource *ks, int topic)
{
	JsonbValue *t;

	if (ks->restored == NULL)
		return NULL;
	t = getKeyJsonValueFromContainer(&ks->restored->root, ks->base.topic_names[topic],
									 strlen(ks->base.topic_names[topic]), NULL);
	return t != NULL && t->type == jbvBinary ? t : NULL;
}

/* The checkpointed next offset of a partition, or -1. */
static int64
restored_offset(KafkaSource *ks, int topic, int32 partition)
{
	JsonbValue *t = restored_topic(ks, topic);
	JsonbValue *p;
	char		key[16];

	if (t == NULL)
		return -1;
	snprintf(key, sizeof(key), "%d", partition);
	p = getKeyJsonValueFromContainer(t->val.binary.data, key, strlen(key), NULL);
	if (p == NULL || p->type != jbvNumeric)
		return -1;
	return DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(p->val.numeric)));
}

static int
kafka_poll(Source *src, SourceMessage *out, int max)
{
	KafkaSource *ks = (KafkaSource *) src;
	ssize_t		got;
	int			n = 0;
	char		drain[64];
	bool		moved;

	drain_logs(ks);
	rd_kafka_poll(ks->rk, 0);
	release_batch(ks);
	if (GetCurrentTimestamp() >= ks->next_refresh)
		refresh_assignment(ks);

	if (ks->batch_capacity < max)
	{
		ks->batch = ks->batch ? repalloc(ks->batch, sizeof(rd_kafka_message_t *) * max) :
			MemoryContextAlloc(ks->ctx, sizeof(rd_kafka_message_t *) * max);
		ks->batch_capacity = max;
	}
	/*
	 * The pipe only signals an empty queue becoming non-empty: drain it
	 * before the queue, so that a message queued after the consume below
	 * signals anew (drained after, that wakeup would be lost).  A full
	 * batch may leave messages queued that signal nothing: signal them.
	 */
	while (read(ks->pipe_fds[0], drain, sizeof(drain)) > 0)
		;
	got = rd_kafka_consume_batch_queue(ks->queue, 0, ks->batch, max);
	if (got < 0)
		got = 0;
	if (got == max)
	{
		ssize_t		written = write(ks->pipe_fds[1], "1", 1);

		(void) written;
	}

	for (int i = 0; i < got; i++)
	{
		rd_kafka_message_t *m = ks->batch[i];
		int			t;
		int			p;
		rd_kafka_timestamp_type_t tstype;
		int64		ms;

		t = 0;
		while (m->rkt && t < ks->base.ntopics && ks->topics[t] != m->rkt &&
			   strcmp(ks->base.topic_names[t], rd_kafka_topic_name(m->rkt)) != 0)
			t++;
		p = m->rkt ? find_partition(ks, t, m->partition) : -1;
		if (m->err)
		{
			/* The partition has stopped: it goes on once mailer has judged its position. */
			if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET && p >= 0)
			{
				/*
				 * Judged at the offset librdkafka fetched: control records
				 * passed in this batch may have left next behind it.
				 */
				ks->parts[p].out_of_range = true;
				ks->parts[p].range_offset = m->offset;
				ks->any_out_of_range = true;
			}
			else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			{
				snprintf(ks->broker_error, sizeof(ks->broker_error), "%s",
						 rd_kafka_message_errstr(m));
				mask_secrets(ks, ks->broker_error, sizeof(ks->broker_error));
			}
			rd_kafka_message_destroy(m);
			continue;
		}
		if (p < 0 || m->offset < ks->parts[p].next)
		{
			/* Not ours, or already handed out: never twice. */
			rd_kafka_message_destroy(m);
			continue;
		}
		ks->parts[p].next = m->offset + 1;
		ms = rd_kafka_message_timestamp(m, &tstype);
		out[n].key = m->key;
		out[n].key_len = m->key ? (int) m->key_len : 0;
		out[n].value = m->payload;
		out[n].value_len = m->payload ? (int) m->len : 0;
		out[n].topic = t;
		out[n].partition = m->partition;
		out[n].offset = m->offset;
		out[n].timestamp = ms >= 0 ? kafka_time(ms) : DT_NOBEGIN;
		out[n].opaque = m;
		ks->batch[n] = m;		/* kept until the next poll */
		if (ks->parts[p].metrics >= 0)
			src->slot->partitions[ks->parts[p].metrics].records_in++;
		n++;
	}
	ks->nbatch = n;
	moved = take_positions(ks);
	if (ks->any_out_of_range)
		handle_out_of_range(ks);
	if (n > 0)
		ks->broker_error[0] = '\0';
	if (n > 0 || got > 0 || moved)
		update_metrics(ks);
	/* A batch is in hand, its partitions' metrics published (tests stop the broker here). */
	if (n > 0)
		TEST_POINT("kafka_polled");
	if (ks->error[0] == '\0' && ks->broker_error[0] != '\0')
	{
		snprintf(ks->status, sizeof(ks->status), "waiting for Kafka: %s", ks->broker_error);
		src->error = ks->status;
	}
	else if (ks->broker_error[0] != '\0')
	{
		/* Why the metadata cannot be read (authentication, TLS) is the broker's error. */
		snprintf(ks->status, sizeof(ks->status), "%s (the broker's last error: %s)",
				 ks->error, ks->broker_error);
		src->error = ks->status;
	}
	else
		src->error = ks->error[0] ? ks->error : NULL;
	return n;
}

/*
 * librdkafka's position is past the last message it handed out and past
 * the control records (a transaction's commit or abort marker) and
 * aborted messages after it, which are never handed out: without it, a
 * topic written by transactions would never be read to its end.
 */
static bool
take_positions(KafkaSource *ks)
{
	bool		moved = false;

	if (ks->assigned->cnt == 0)
		return false;
	if (rd_kafka_position(ks->rk, ks->assigned) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return false;
	/* ks->assigned lists the partitions in the order of ks->parts. */
	for (int i = 0; i < ks->assigned->cnt && i < ks->nparts; i++)
	{
		int64		pos = ks->assigned->elems[i].offset;

		if (pos >= 0 && pos > ks->parts[i].next && !ks->parts[i].out_of_range)
		{
			ks->parts[i].next = pos;
			moved = true;
		}
	}
	return moved;
}

/*
 * Judge the positions that librdkafka found outside their partition's log.
 * Below its start, retention deleted records the job had not read: count
 * and report the gap, and go on from the earliest offset there is.  Past
 * its end, the partition is not the one the checkpoint read (a topic
 * deleted and created again, a truncated log): going on would skip or
 * repeat records, so the job fails.
 */
static void
handle_out_of_range(KafkaSource *ks)
{
	ks->any_out_of_range = false;
	for (int i = 0; i < ks->nparts; i++)
	{
		KafkaPartition *kp = &ks->parts[i];
		const char *topic = ks->base.topic_names[kp->topic];
		int64		low,
					high;
		rd_kafka_resp_err_t err;

		if (!kp->out_of_range)
			continue;
		/* Each query blocks for up to BROKER_TIMEOUT_MS: answer SIGTERM between them. */
		CHECK_FOR_INTERRUPTS();
		err = rd_kafka_query_watermark_offsets(ks->rk, topic, kp->partition, &low, &high,
											   BROKER_TIMEOUT_MS);
		if (err)
		{
			/* The broker is away: the rest wait too, asked again at the next poll. */
			snprintf(ks->broker_error, sizeof(ks->broker_error),
					 "cannot read the offsets of %s partition %d: %s",
					 topic, kp->partition, rd_kafka_err2str(err));
			ks->any_out_of_range = true;
			break;
		}
		if (kp->range_offset > kp->next)
			kp->next = kp->range_offset;
		if (kp->next > high)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("partition %d of Kafka topic \"%s\" ends at offset " INT64_FORMAT
							", before the job's position " INT64_FORMAT,
							kp->partition, topic, high, kp->next),
					 errdetail("The topic was deleted and created again, or its log was truncated, "
							   "so the job's positions no longer fit it. To go on, restore a checkpoint "
							   "whose positions the topic holds with mailer.restore_job, or drop the job "
							   "and create it again to read the topic anew."),
					 errhint("Retrying cannot help: the job stays failed until one of these.")));
		if (kp->next < low)
		{
			char	   *msg = psprintf("partition %d of Kafka topic \"%s\": offsets " INT64_FORMAT " to " INT64_FORMAT
									   " were deleted before the job read them (retention); it goes on from offset " INT64_FORMAT,
									   kp->partition, topic, kp->next, low - 1, low);

			ereport(WARNING, (errmsg("%s", msg)));
			job_slot_set_error(ks->base.slot, msg);
			if (kp->metrics >= 0)
				ks->base.slot->partitions[kp->metrics].offsets_skipped += low - kp->next;
			kp->next = low;
		}
		reassign(ks, kp);
		kp->out_of_range = false;
		kp->range_offset = -1;
	}
}

/* Fetch a partition stopped by librdkafka again, from kp->next. */
static void
reassign(KafkaSource *ks, KafkaPartition *kp)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
	rd_kafka_error_t *error;

	rd_kafka_topic_partition_list_add(list, ks->base.topic_names[kp->topic], kp->partition)->offset = kp->next;
	error = rd_kafka_incremental_unassign(ks->rk, list);
	if (error == NULL)
		error = rd_kafka_incremental_assign(ks->rk, list);
	rd_kafka_topic_partition_list_destroy(list);
	if (error)
	{
		char		msg[512];

		strlcpy(msg, rd_kafka_error_string(error), sizeof(msg));
		mask_secrets(ks, msg, sizeof(msg));
		rd_kafka_error_destroy(error);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not assign Kafka partitions: %s", msg)));
	}
}

static void
release_batch(KafkaSource *ks)
{
	for (int i = 0; i < ks->nbatch; i++)
		rd_kafka_message_destroy(ks->batch[i]);
	ks->nbatch = 0;
}

static void
update_metrics(KafkaSource *ks)
{
	JobSlot    *slot = ks->base.slot;
	int64		lag = 0;

	for (int i = 0; i < ks->nparts; i++)
	{
		KafkaPartition *kp = &ks->parts[i];
		int64		high = known_end(ks, kp);

		if (high >= 0)
			lag += Max(high - kp->next, 0);
		if (kp->metrics < 0)
			continue;
		strlcpy(slot->partitions[kp->metrics].topic, ks->base.topic_names[kp->topic], JOB_SLOT_TOPIC_LEN);
		slot->partitions[kp->metrics].partition = kp->partition;
		slot->partitions[kp->metrics].position = kp->next;
		slot->partitions[kp->metrics].end_offset = high;
	}
	slot->npartitions = Min(ks->nparts, JOB_SLOT_MAX_PARTITIONS);
	slot->consumer_lag = lag;
}

static Jsonb *
kafka_headers(Source *src, SourceMessage *msg)
{
	rd_kafka_message_t *m = (rd_kafka_message_t *) msg->opaque;
	rd_kafka_headers_t *hdrs;
	JsonbParseState *state = NULL;
	JsonbValue *result;
	const char *name;
	const void *value;
	size_t		size;

	if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return NULL;
	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR; i++)
	{
		JsonbValue	k;
		JsonbValue	v;

		/* A name must be text: a record whose name is not fails to decode (a dead letter). */
		if (!pg_verify_mbstr(GetDatabaseEncoding(), name, strlen(name), true))
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("a header name is not valid text in the database encoding"),
					 errdetail("Header %zu of the message.", i + 1)));
		k.type = jbvString;
		k.val.string.val = (char *) name;
		k.val.string.len = strlen(name);
		pushJsonbValue(&state, WJB_KEY, &k);
		/* A header value that is not text in the database encoding shows as null. */
		if (value != NULL && memchr(value, '\0', size) == NULL &&
			pg_verify_mbstr(GetDatabaseEncoding(), value, (int) size, true))
		{
			v.type = jbvString;
			v.val.string.val = (char *) value;
			v.val.string.len = (int) size;
		}
		else
			v.type = jbvNull;
		pushJsonbValue(&state, WJB_VALUE, &v);
	}
	result = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(result);
}

static long
kafka_wait_ms(Source *src)
{
	KafkaSource *ks = (KafkaSource *) src;
	long		until_refresh = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), ks->next_refresh);

	return Max(until_refresh, 1);
}

static pgsocket
kafka_event_fd(Source *src)
{
	return ((KafkaSource *) src)->pipe_fds[0];
}

static Jsonb *
kafka_positions(Source *src)
{
	KafkaSource *ks = (KafkaSource *) src;
	StringInfoData buf;
	bool		any_topic = false;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int t = 0; t < ks->base.ntopics; t++)
	{
		bool		first = true;
		JsonbValue *restored = restored_topic(ks, t);

		/*
		 * A topic never positioned is left out, so that the next start
		 * still starts it per the spec ("latest" included).
		 */
		if (!ks->topic_known[t] && restored == NULL)
			continue;
		appendStringInfo(&buf, "%s", any_topic ? ", " : "");
		any_topic = true;
		escape_json(&buf, ks->base.topic_names[t]);
		appendStringInfoString(&buf, ": {");
		for (int i = 0; i < ks->nparts; i++)
		{
			if (ks->parts[i].topic != t)
				continue;
			appendStringInfo(&buf, "%s\"%d\": " INT64_FORMAT, first ? "" : ", ",
							 ks->parts[i].partition, ks->parts[i].next);
			first = false;
		}
		/* A restored position stays until its partition is assigned again. */
		if (restored != NULL)
		{
			JsonbIterator *it = JsonbIteratorInit(restored->val.binary.data);
			JsonbValue	k,
						v;
			JsonbIteratorToken tok;

			while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
			{
				char	   *key;

				if (tok != WJB_KEY)
					continue;
				key = pnstrdup(k.val.string.val, k.val.string.len);
				(void) JsonbIteratorNext(&it, &v, true);
				if (v.type != jbvNumeric || find_partition(ks, t, atoi(key)) >= 0)
					continue;
				appendStringInfoString(&buf, first ? "" : ", ");
				escape_json(&buf, key);
				appendStringInfo(&buf, ": %s",
								 DatumGetCString(DirectFunctionCall1(numeric_out,
																	 NumericGetDatum(v.val.numeric))));
				first = false;
			}
		}
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoChar(&buf, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/* Publish progress to the consumer group, for lag tools; never read back. */
static void
kafka_committed(Source *src)
{
	KafkaSource *ks = (KafkaSource *) src;
	rd_kafka_topic_partition_list_t *list;

	/* The positions a "latest" start took are in the checkpoint now. */
	src->unpinned = false;
	if (ks->nparts == 0)
		return;
	list = rd_kafka_topic_partition_list_new(ks->nparts);
	for (int i = 0; i < ks->nparts; i++)
		rd_kafka_topic_partition_list_add(list, ks->base.topic_names[ks->parts[i].topic],
										  ks->parts[i].partition)->offset = ks->parts[i].next;
	(void) rd_kafka_commit(ks->rk, list, 1);
	/* Committed again, and waited for, when the consumer closes. */
	if (ks->last_commit)
		rd_kafka_topic_partition_list_destroy(ks->last_commit);
	ks->last_commit = list;
}

static bool
kafka_finished(Source *src)
{
	return false;				/* a topic has no end */
}

static int
kafka_partition_count(Source *src)
{
	return ((KafkaSource *) src)->nparts;
}

static void
kafka_partition_at(Source *src, int i, int *topic, int32 *partition)
{
	KafkaSource *ks = (KafkaSource *) src;

	*topic = ks->parts[i].topic;
	*partition = ks->parts[i].partition;
}

/*
 * Note the input available now: partitions added since the last metadata
 * refresh hold some too, so refresh first; the marks are taken once it
 * succeeds.
 */
static void
kafka_mark_end(Source *src)
{
	KafkaSource *ks = (KafkaSource *) src;

	ks->mark_pending = true;
	refresh_assignment(ks);
}

/* Take each partition's end offset now; until the broker answers, no mark. */
static void
take_marks(KafkaSource *ks)
{
	if (ks->error[0] != '\0')
		return;
	for (int i = 0; i < ks->nparts; i++)
	{
		int64		low,
					high;

		if (rd_kafka_query_watermark_offsets(ks->rk, ks->base.topic_names[ks->parts[i].topic],
											 ks->parts[i].partition, &low, &high,
											 BROKER_TIMEOUT_MS) != RD_KAFKA_RESP_ERR_NO_ERROR)
			return;				/* retried at the next refresh */
		ks->parts[i].mark = high;
	}
	ks->mark_pending = false;
}

static bool
kafka_reached_end(Source *src)
{
	KafkaSource *ks = (KafkaSource *) src;

	if (ks->mark_pending)
		return false;
	for (int i = 0; i < ks->nparts; i++)
		if (ks->parts[i].next < ks->parts[i].mark)
			return false;
	return true;
}

/*
 * Close the consumer, on every exit (kafka_exit): the asynchronous commit
 * of the last checkpoint's offsets may not have reached the broker yet, so
 * commit them once more and wait for at most CLOSE_COMMIT_MS.  Partitions
 * are assigned, never subscribed: there is no group membership to leave,
 * and the consumer close that could wait on the broker is skipped.
 */
static void
kafka_close(Source *src)
{
	KafkaSource *ks = (KafkaSource *) src;
	rd_kafka_t *rk = ks->rk;
	sigset_t	saved;

	if (rk == NULL)
		return;
	ks->rk = NULL;
	for (int i = 0; i < ks->nbatch; i++)
		rd_kafka_message_destroy(ks->batch[i]);
	ks->nbatch = 0;
	if (ks->last_commit != NULL)
	{
		rd_kafka_queue_t *done = rd_kafka_queue_new(rk);
		rd_kafka_event_t *ev;

		if (rd_kafka_commit_queue(rk, ks->last_commit, done, NULL, NULL) == RD_KAFKA_RESP_ERR_NO_ERROR &&
			(ev = rd_kafka_queue_poll(done, CLOSE_COMMIT_MS)) != NULL)
			rd_kafka_event_destroy(ev);
		rd_kafka_queue_destroy(done);
		rd_kafka_topic_partition_list_destroy(ks->last_commit);
		ks->last_commit = NULL;
	}
	for (int i = 0; i < ks->base.ntopics; i++)
		rd_kafka_topic_destroy(ks->topics[i]);
	rd_kafka_queue_destroy(ks->queue);
	rd_kafka_queue_destroy(ks->logs);
	mailer_block_signals(&saved);
	rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	mailer_restore_signals(&saved);
	close(ks->pipe_fds[0]);
	close(ks->pipe_fds[1]);
	rd_kafka_topic_partition_list_destroy(ks->assigned);
}

static void
kafka_exit(int code, Datum arg)
{
	kafka_close((Source *) DatumGetPointer(arg));
}

/*
 * Whether a partition has records left to read: its position is below
 * its end offset, the broker's last word (read_committed: the last stable
 * offset, from the last fetch, or before the first one, from the
 * assignment), or that end is unknown yet.  Such a partition is not idle,
 * however long the broker keeps it silent.
 */
static bool
kafka_backlog(Source *src, int i)
{
	KafkaSource *ks = (KafkaSource *) src;
	int64		high = known_end(ks, &ks->parts[i]);

	/* Unknown (restored, its end query failed, never fetched): it may hold anything. */
	return high < 0 || ks->parts[i].next < high;
}

/* The broker's last word on a partition's end offset, or -1. */
static int64
known_end(KafkaSource *ks, KafkaPartition *kp)
{
	int64		low,
				high = -1;

	if (rd_kafka_get_watermark_offsets(ks->rk, ks->base.topic_names[kp->topic], kp->partition,
									   &low, &high) != RD_KAFKA_RESP_ERR_NO_ERROR || high < 0)
		high = kp->assigned_end;
	return high;
}

/*
 * A producer's timestamp (milliseconds since 1970) as a timestamptz; one
 * outside timestamptz's range (a producer's garbage) is no timestamp.
 */
static TimestampTz
kafka_time(int64 ms)
{
	TimestampTz t;

	if (ms > PG_INT64_MAX / 1000)
		return DT_NOBEGIN;
	t = ms * 1000 - UNIX_OFFSET_US;
	return IS_VALID_TIMESTAMP(t) ? t : DT_NOBEGIN;
}
