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
 * A parallel job's subtasks split the partitions: subtask k owns partition
 * p of the t-th topic of the spec when (p + t) % parallelism == k, a rule
 * that places partitions added later too, and that spreads the first
 * partitions of several topics over different subtasks.  A subtask assigns
 * and reports its own partitions only, and ignores the others' positions
 * in the checkpoint it restores (the merge of every subtask's); it may own
 * none at all, and then reads nothing until partitions are added.
 *
 * librdkafka runs threads of its own: the handle is created with every
 * signal blocked, its logs arrive on a queue drained here on the worker's
 * thread, and its consumer queue signals a pipe that the worker waits on
 * together with its latch.
 *
 * Design: docs/ARCHITECTURE.md, "Source poll".
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
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "base/jsonb_build.h"
#include "plan/kafka_options.h"
#include "base/mailer.h"
#include "base/signals.h"
#include "connectors/kafka_client.h"
#include "connectors/kafka_refill.h"
#include "connectors/source.h"
#include "base/test_point.h"

#define METADATA_INTERVAL_MS	5000
#define METADATA_RETRY_MS		1000
#define BROKER_TIMEOUT_MS		2000
#define PAUSED_ENDS_PER_REFRESH	8	/* paused partitions' ends asked at one refresh, at most */
#define PAUSED_ENDS_BACKOFF_MS	30000	/* after such a query failed: its leader may be away */
#define CLOSE_COMMIT_MS			1000

/*
 * A partition whose message past a cut's marker was dropped: librdkafka's
 * position passed records not handed out, so it is fetched again from next
 * once no longer paused (sync_fetching), and its position is not taken
 * from librdkafka until a message of the new assignment arrives (the
 * assignment applies later, and librdkafka's position stays the old one
 * until it does).  A real message was dropped, so one does arrive.
 */
typedef enum KafkaRefetch
{
	REFETCH_NONE,
	REFETCH_WANTED,				/* assign again at next, once released and resumed */
	REFETCH_ASSIGNED			/* assigned again at next, no message since */
} KafkaRefetch;

typedef struct KafkaPartition
{
	int			topic;
	int32		partition;
	int64		next;			/* next offset to read */
	int64		mark;			/* wait_job target, -1 none */
	int64		assigned_end;	/* end offset when assigned, -1 unknown */
	int64		paused_end;		/* end offset asked while fetch_paused (no fetch tells it), -1 none */
	int			metrics;		/* index in the slot's partition metrics, -1 none */
	bool		out_of_range;	/* librdkafka found next outside the log */
	int64		range_offset;	/* the offset librdkafka found outside it, -1 none */
	int64		committed;		/* next as of the last checkpoint, or where this run started */
	int64		hold;			/* a barrier cut's marker: hand out nothing from here; -1 none */
	bool		paused;			/* held at hold */
	KafkaRefetch refetch;		/* a message at or past hold was dropped: fetch again from next */
	bool		ahead;			/* its watermark runs ahead (watermark alignment) */
	bool		assigning;		/* assigned again, no message since: not paused for ahead */
	bool		fetch_paused;	/* librdkafka's fetching paused: for paused or ahead */
} KafkaPartition;

typedef struct KafkaSource
{
	Source		base;
	MemoryContext ctx;			/* what lasts: partitions, the batch array */
	KafkaSourceSpec *spec;
	int			subtask;		/* which of the job's subtasks this is */
	int			parallelism;	/* how many the job has */
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
	Jsonb	   *restored_records_in;	/* records read per partition up to it, or NULL */
	TimestampTz next_refresh;
	int			paused_ends_from;	/* where the next refresh's round of paused ends starts */
	TimestampTz paused_ends_after;	/* no paused end is asked before */
	char		error[512];		/* a broker or metadata problem, "" when none */
	char		broker_error[512];	/* from the error callback */
	char		status[1100];	/* what base.error points to */
	bool		mark_pending;	/* wait_job asked; marks not taken yet */
	bool	   *topic_known;	/* a topic's first partitions start per the spec */
	bool		any_out_of_range;	/* some partition's out_of_range is set */
	rd_kafka_topic_partition_list_t *assigned;	/* every assigned partition, for positions */
	KafkaRefill refill;			/* wakes the fetchers of a drained queue */
	rd_kafka_topic_partition_list_t *last_commit;	/* of the last checkpoint, or NULL */
	KafkaSecrets secrets;		/* masked in every text kept */
	BarrierReader *barrier;		/* the cuts of the spec's barrier group, or NULL */
	uint64		refreshes;		/* metadata refreshes that read every topic */
	int64		missing_epoch;	/* the cut that named a partition not assigned ... */
	uint64		missing_after;	/* ... and the refreshes before it did */
	int64		missing_logged; /* the cut whose missing partition was logged */
	bool		resync;			/* a partition's assigning ended: sync its fetching */
} KafkaSource;

/* Defined at the end, once its functions are. */
static const SourceOps kafka_ops;

static void error_callback(rd_kafka_t *rk, int err, const char *reason, void *opaque);
static void refresh_assignment(KafkaSource *kafka);
static const struct rd_kafka_metadata *read_topic_metadata(KafkaSource *kafka, int t, bool *broker_away);
static bool add_new_partitions(KafkaSource *kafka, int t, const rd_kafka_metadata_topic_t *md,
							   rd_kafka_topic_partition_list_t *add, bool *ends_unknown);
static bool add_partition(KafkaSource *kafka, int t, int32 partition, bool *ends_unknown);
static bool query_end(KafkaSource *kafka, KafkaPartition *kp, int64 *high);
static bool query_unknown_ends(KafkaSource *kafka);
static void query_paused_ends(KafkaSource *kafka);
static void assign_partitions(KafkaSource *kafka, rd_kafka_topic_partition_list_t *list, bool unassign);
static void check_restored_exist(KafkaSource *kafka, int topic, const rd_kafka_metadata_topic_t *md);
static void take_marks(KafkaSource *kafka);
static int	find_partition(KafkaSource *kafka, int topic, int32 partition);
static bool owns(KafkaSource *kafka, int topic, int32 partition);
static int64 restored_offset(KafkaSource *kafka, int topic, int32 partition);
static int64 partition_number(KafkaSource *kafka, Jsonb *obj, int topic, int32 partition);
static JsonbValue *restored_topic(KafkaSource *kafka, int topic);
static bool next_unassigned_restored(KafkaSource *kafka, int topic, JsonbIterator **it, char **key,
									 JsonbValue *position);
static int	consume_batch(KafkaSource *kafka, int max);
static bool hand_out(KafkaSource *kafka, rd_kafka_message_t *m, SourceMessage *out);
static void note_assigned(KafkaSource *kafka, KafkaPartition *kp);
static void publish_status(KafkaSource *kafka);
static bool take_positions(KafkaSource *kafka);
static void handle_out_of_range(KafkaSource *kafka);
static void reassign(KafkaSource *kafka, KafkaPartition *kp);
static void release_batch(KafkaSource *kafka);
static void update_metrics(KafkaSource *kafka);
static int64 known_end(KafkaSource *kafka, KafkaPartition *kp);
static void kafka_exit(int code, Datum arg);
static void sync_fetching(KafkaSource *kafka, KafkaPartition *kp);
static void kafka_release_cut(Source *src);
static bool partition_missing(KafkaSource *kafka, const BarrierCut *cut, const CutMarker *marker);

Source *
kafka_source_open(KafkaSourceSpec *spec, const char *job_name, Jsonb *positions,
				  Jsonb *records_in, JobSlot *slot, int subtask, int parallelism)
{
	/* Reached from a before_shmem_exit callback: the struct outlives any context. */
	KafkaSource *kafka = MemoryContextAllocZero(TopMemoryContext, sizeof(KafkaSource));
	rd_kafka_conf_t *conf = kafka_options_conf(spec, spec->group_id ? spec->group_id : job_name, false);
	char		errstr[512];
	ListCell   *lc;
	int			t = 0;

	Assert(parallelism >= 1 && subtask >= 0 && subtask < parallelism);
	kafka->base.ops = &kafka_ops;
	kafka->subtask = subtask;
	kafka->parallelism = parallelism;
	kafka->ctx = CurrentMemoryContext;
	kafka->base.slot = slot;
	kafka->spec = spec;
	kafka->restored = positions;
	kafka->restored_records_in = records_in;
	kafka->base.ntopics = list_length(spec->topics);
	kafka->base.topic_names = palloc(sizeof(char *) * kafka->base.ntopics);
	foreach(lc, spec->topics)
		kafka->base.topic_names[t++] = lfirst(lc);

	kafka_secrets_collect(&kafka->secrets, spec->options);

	/*
	 * A position outside the partition's log is mailer's to judge (a gap
	 * left by retention, or a topic created anew): librdkafka reports it
	 * instead of silently moving to the earliest offset.
	 */
	if (rd_kafka_conf_set(conf, "auto.offset.reset", "error", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		elog(ERROR, "librdkafka refused auto.offset.reset: %s", errstr);
	rd_kafka_conf_set_error_cb(conf, error_callback);
	rd_kafka_conf_set_opaque(conf, kafka);

	kafka->rk = kafka_client_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (kafka->rk == NULL)
	{
		/* librdkafka may quote an option's value here, as in its logs. */
		kafka_secrets_mask(&kafka->secrets, errstr, sizeof(errstr));
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not create a Kafka consumer: %s", errstr)));
	}

	kafka_refill_init(&kafka->refill, kafka->rk);
	kafka->logs = rd_kafka_queue_new(kafka->rk);
	rd_kafka_set_log_queue(kafka->rk, kafka->logs);
	kafka->queue = rd_kafka_queue_get_consumer(kafka->rk);
	if (pipe(kafka->pipe_fds) != 0 ||
		fcntl(kafka->pipe_fds[0], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(kafka->pipe_fds[1], F_SETFL, O_NONBLOCK) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create a pipe for Kafka events: %m")));
	rd_kafka_queue_io_event_enable(kafka->queue, kafka->pipe_fds[1], "1", 1);
	if (spec->barrier_group)
		kafka->barrier = barrier_reader_open(spec, spec->group_id ? spec->group_id : job_name,
											 kafka->base.topic_names, kafka->base.ntopics,
											 kafka->pipe_fds[1]);

	kafka->topics = palloc(sizeof(rd_kafka_topic_t *) * kafka->base.ntopics);
	kafka->topic_known = palloc0(sizeof(bool) * kafka->base.ntopics);
	for (int i = 0; i < kafka->base.ntopics; i++)
		kafka->topics[i] = rd_kafka_topic_new(kafka->rk, kafka->base.topic_names[i], NULL);

	kafka->batch_capacity = 0;
	kafka->next_refresh = 0;
	kafka->paused_ends_from = 0;
	kafka->paused_ends_after = 0;
	kafka->assigned = rd_kafka_topic_partition_list_new(16);
	/* Every exit, an ERROR's included, closes the consumer (within bounds). */
	before_shmem_exit(kafka_exit, PointerGetDatum(kafka));
	refresh_assignment(kafka);
	return &kafka->base;
}

/*
 * Called from rd_kafka_poll(), on the worker's own thread.  "All brokers
 * are down" is a consequence, not a cause: it never replaces the error
 * that brought the brokers down (a failed SASL handshake, a refused
 * connection), kept until a metadata refresh or a message succeeds.
 * librdkafka 2.11.1 and later (metadata.recovery.strategy=rebootstrap)
 * raise it again at every re-bootstrap, every few seconds, while the
 * cause, repeated identically, is suppressed for 30 s: the cause would be
 * shown for a moment only.
 */
static void
error_callback(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	KafkaSource *kafka = (KafkaSource *) opaque;
	char	   *masked;

	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && kafka->broker_error[0] != '\0')
		return;
	masked = pstrdup(reason);

	/* Masked whole, then cut: a secret across the cut stays hidden. */
	kafka_secrets_mask(&kafka->secrets, masked, strlen(masked) + 1);
	strlcpy(kafka->broker_error, masked, sizeof(kafka->broker_error));
	pfree(masked);
}

/*
 * Learn every topic's partitions and assign the ones not assigned yet.  A
 * broker or topic problem is noted in kafka->error (the first one) and
 * retried soon; it holds back its own topic only, whose checkpointed
 * positions stay, while the other topics are assigned and read.
 */
static void
refresh_assignment(KafkaSource *kafka)
{
	rd_kafka_topic_partition_list_t *add = rd_kafka_topic_partition_list_new(8);
	bool		failed = false;
	bool		ends_unknown = false;	/* a query of an end offset failed: skip the rest */

	kafka->error[0] = '\0';
	for (int t = 0; t < kafka->base.ntopics; t++)
	{
		const struct rd_kafka_metadata *md = read_topic_metadata(kafka, t, &ends_unknown);

		if (md == NULL)
		{
			failed = true;
			/* The broker is away: the next topics and end queries would wait as long, in vain. */
			if (ends_unknown)
				break;
			continue;
		}
		check_restored_exist(kafka, t, &md->topics[0]);
		if (!add_new_partitions(kafka, t, &md->topics[0], add, &ends_unknown))
			failed = true;
		rd_kafka_metadata_destroy(md);
	}
	/* the paused partitions' ends are for the metrics: never before the rest */
	if (!ends_unknown && query_unknown_ends(kafka) && !failed)
		query_paused_ends(kafka);
	assign_partitions(kafka, add, false);
	/* An idle job's end offsets and lag stay current too, not only when messages come. */
	update_metrics(kafka);
	kafka->next_refresh = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													  failed ? METADATA_RETRY_MS : METADATA_INTERVAL_MS);
	if (!failed)
	{
		kafka->broker_error[0] = '\0';
		kafka->refreshes++;
	}
	kafka->base.error = kafka->error[0] ? kafka->error : NULL;
	if (!failed && kafka->mark_pending)
		take_marks(kafka);
}

/*
 * Topic t's metadata, or NULL when it cannot be read: the problem is noted
 * in kafka->error (unless one is already), and *broker_away is set when
 * the broker did not answer at all.
 */
static const struct rd_kafka_metadata *
read_topic_metadata(KafkaSource *kafka, int t, bool *broker_away)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t err;

	/* Broker calls block for up to BROKER_TIMEOUT_MS each: answer SIGTERM between them. */
	CHECK_FOR_INTERRUPTS();
	err = rd_kafka_metadata(kafka->rk, 0, kafka->topics[t], &md, BROKER_TIMEOUT_MS);
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 && !md->topics[0].err)
		return md;
	if (kafka->error[0] == '\0')
		snprintf(kafka->error, sizeof(kafka->error), "waiting for Kafka: %s \"%s\": %s",
				 err ? "cannot read metadata of topic" : "topic", kafka->base.topic_names[t],
				 rd_kafka_err2str(err ? err : md && md->topic_cnt == 1 ? md->topics[0].err :
								  RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART));
	if (md)
		rd_kafka_metadata_destroy(md);
	if (err)
		*broker_away = true;
	return NULL;
}

/*
 * Position the partitions of topic t (metadata md) not known yet and list
 * them in add, to assign.  A topic's new partitions are positioned all
 * together or not at all, so a topic is either unknown (it starts per the
 * spec) or every partition of it has a position that checkpoints keep:
 * false when one could not be positioned.
 */
static bool
add_new_partitions(KafkaSource *kafka, int t, const rd_kafka_metadata_topic_t *md,
				   rd_kafka_topic_partition_list_t *add, bool *ends_unknown)
{
	int			first_new = kafka->nparts;

	for (int p = 0; p < md->partition_cnt; p++)
	{
		if (!owns(kafka, t, md->partitions[p].id) || find_partition(kafka, t, md->partitions[p].id) >= 0)
			continue;
		if (!add_partition(kafka, t, md->partitions[p].id, ends_unknown))
		{
			/* Nothing of this topic: the next refresh tries all of it again. */
			kafka->nparts = first_new;
			return false;
		}
	}
	for (int i = first_new; i < kafka->nparts; i++)
	{
		KafkaPartition *kp = &kafka->parts[i];

		kp->metrics = i < JOB_SLOT_MAX_PARTITIONS ? i : -1;
		/* The count goes on from the checkpoint the position came from. */
		if (kp->metrics >= 0)
			kafka->base.slot->partitions[i].records_in =
				Max(partition_number(kafka, kafka->restored_records_in, t, kp->partition), 0);
		rd_kafka_topic_partition_list_add(add, kafka->base.topic_names[t], kp->partition)->offset = kp->next;
		rd_kafka_topic_partition_list_add(kafka->assigned, kafka->base.topic_names[t], kp->partition);
	}
	/* Even with no partition of this subtask's: the ones added later start at their beginning. */
	kafka->topic_known[t] = true;
	return true;
}

/*
 * Add a partition of topic t at its checkpointed position, or else where
 * the spec starts; false when that takes the broker's answer and it fails
 * (noted in kafka->error).  Its end offset is asked for too, unless an end
 * query failed already (*ends_unknown; set when this one fails).
 */
static bool
add_partition(KafkaSource *kafka, int t, int32 partition, bool *ends_unknown)
{
	int64		offset = restored_offset(kafka, t, partition);
	int64		low,
				high = -1;
	KafkaPartition *kp;

	if (offset < 0 || !*ends_unknown)
	{
		rd_kafka_resp_err_t err;

		CHECK_FOR_INTERRUPTS();
		err = rd_kafka_query_watermark_offsets(kafka->rk, kafka->base.topic_names[t], partition,
											   &low, &high, BROKER_TIMEOUT_MS);
		if (err && offset < 0)
		{
			if (kafka->error[0] == '\0')
				snprintf(kafka->error, sizeof(kafka->error),
						 "waiting for Kafka: cannot read the offsets of %s partition %d: %s",
						 kafka->base.topic_names[t], partition, rd_kafka_err2str(err));
			return false;
		}
		/* A restored position needs no answer: the end offset only tells a backlog. */
		if (err)
		{
			*ends_unknown = true;
			high = -1;
		}
	}
	if (offset < 0)
	{
		/*
		 * Without a position: start per the spec.  A partition of a topic
		 * positioned before (while the job ran, or in a checkpoint) is new:
		 * all of it is to be read.  In a parallel job, any subtask's
		 * checkpointed partition of the topic counts: a subtask that had
		 * not positioned its own partitions of a "latest" topic by then
		 * (its broker calls failed) starts them at their beginning,
		 * reading more, never less.
		 */
		bool		latest = kafka->spec->start_latest && !kafka->topic_known[t] &&
			restored_topic(kafka, t) == NULL;

		offset = latest ? high : low;
		/* Until a checkpoint holds it, a restart would take a later "latest". */
		if (latest)
			kafka->base.unpinned = true;
	}
	if (kafka->nparts == kafka->parts_capacity)
	{
		kafka->parts_capacity = Max(16, kafka->parts_capacity * 2);
		kafka->parts = kafka->parts ? repalloc(kafka->parts, sizeof(KafkaPartition) * kafka->parts_capacity) :
			MemoryContextAlloc(kafka->ctx, sizeof(KafkaPartition) * kafka->parts_capacity);
	}
	kp = &kafka->parts[kafka->nparts++];
	kp->topic = t;
	kp->partition = partition;
	kp->next = offset;
	kp->mark = -1;
	kp->assigned_end = high;
	kp->paused_end = -1;
	kp->out_of_range = false;
	kp->range_offset = -1;
	kp->metrics = -1;
	kp->committed = offset;
	kp->hold = -1;
	kp->paused = false;
	kp->refetch = REFETCH_NONE;
	kp->ahead = false;
	kp->assigning = false;
	kp->fetch_paused = false;
	return true;
}

/* A partition's end offset, asked of the broker (blocks up to BROKER_TIMEOUT_MS); false: no answer. */
static bool
query_end(KafkaSource *kafka, KafkaPartition *kp, int64 *high)
{
	int64		low;

	return rd_kafka_query_watermark_offsets(kafka->rk, kafka->base.topic_names[kp->topic], kp->partition,
											&low, high, BROKER_TIMEOUT_MS) == RD_KAFKA_RESP_ERR_NO_ERROR;
}

/*
 * An end offset still unknown (its query failed, no fetch since) counts
 * as a backlog, so the partition is never idle: ask again until known.
 * The first query that fails ends the round, and false says so.
 */
static bool
query_unknown_ends(KafkaSource *kafka)
{
	for (int i = 0; i < kafka->nparts; i++)
	{
		KafkaPartition *kp = &kafka->parts[i];
		int64		high;

		if (known_end(kafka, kp) >= 0)
			continue;
		CHECK_FOR_INTERRUPTS();
		if (!query_end(kafka, kp, &high))
			return false;
		kp->assigned_end = high;
	}
	return true;
}

/*
 * A partition whose fetching is paused (running ahead, held at a cut) has
 * its end from its last fetch: without asking, its end offset and lag
 * would stay flat while its producer writes on.  Each query blocks the
 * worker until the broker answers, so a refresh asks a few of them,
 * taking turns, and none for a while after one failed.
 */
static void
query_paused_ends(KafkaSource *kafka)
{
	int			asked = 0;

	if (GetCurrentTimestamp() < kafka->paused_ends_after)
		return;
	for (int n = 0; n < kafka->nparts && asked < PAUSED_ENDS_PER_REFRESH; n++)
	{
		int			i = (kafka->paused_ends_from + n) % kafka->nparts;
		KafkaPartition *kp = &kafka->parts[i];
		int64		high;

		if (!kp->fetch_paused)
			continue;
		CHECK_FOR_INTERRUPTS();
		asked++;
		kafka->paused_ends_from = i + 1;
		if (!query_end(kafka, kp, &high))
		{
			kafka->paused_ends_after = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																   PAUSED_ENDS_BACKOFF_MS);
			return;
		}
		kp->paused_end = high;
	}
}

/*
 * Fetch the partitions of list from their offsets (unassign: ones fetched
 * already, which librdkafka stopped), and destroy list.  ERROR when
 * librdkafka refuses.
 */
static void
assign_partitions(KafkaSource *kafka, rd_kafka_topic_partition_list_t *list, bool unassign)
{
	rd_kafka_error_t *error = NULL;
	char		msg[512];

	if (list->cnt > 0 && unassign)
		error = rd_kafka_incremental_unassign(kafka->rk, list);
	if (list->cnt > 0 && error == NULL)
		error = rd_kafka_incremental_assign(kafka->rk, list);
	rd_kafka_topic_partition_list_destroy(list);
	if (error == NULL)
		return;
	strlcpy(msg, rd_kafka_error_string(error), sizeof(msg));
	kafka_secrets_mask(&kafka->secrets, msg, sizeof(msg));
	rd_kafka_error_destroy(error);
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("could not assign Kafka partitions: %s", msg)));
}

/*
 * A partition of the checkpoint that its topic no longer has: the topic
 * was created anew with fewer partitions.  As with a position past its
 * partition's end, going on would silently drop what the checkpoint read
 * (and the partition would hold the watermark forever), so the job fails.
 */
static void
check_restored_exist(KafkaSource *kafka, int topic, const rd_kafka_metadata_topic_t *md)
{
	JsonbValue *restored = restored_topic(kafka, topic);
	JsonbIterator *it;
	char	   *key;
	JsonbValue	position;

	if (restored == NULL)
		return;
	it = JsonbIteratorInit(restored->val.binary.data);
	while (next_unassigned_restored(kafka, topic, &it, &key, &position))
	{
		int32		partition = atoi(key);
		bool		exists = false;

		for (int p = 0; p < md->partition_cnt && !exists; p++)
			exists = md->partitions[p].id == partition;
		if (!exists)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("partition %d of Kafka topic \"%s\" no longer exists, though the job's checkpoint holds its position",
							partition, kafka->base.topic_names[topic]),
					 errdetail("The topic has %d partitions now: it was deleted and created again with fewer, "
							   "so the job's positions no longer fit it. To go on, restore a checkpoint "
							   "whose positions the topic holds with mailer.restore_job, or drop the job "
							   "and create it again to read the topic anew.", md->partition_cnt),
					 errhint("Retrying cannot help: the job stays failed until one of these.")));
	}
}

/*
 * Step it, over a topic's checkpointed positions, to the next partition
 * of this subtask that has a position and is not assigned (yet): its key
 * (the partition number) and position.  false at the end.
 */
static bool
next_unassigned_restored(KafkaSource *kafka, int topic, JsonbIterator **it, char **key,
						 JsonbValue *position)
{
	JsonbValue	k;
	JsonbIteratorToken tok;

	while ((tok = JsonbIteratorNext(it, &k, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		*key = pnstrdup(k.val.string.val, k.val.string.len);
		(void) JsonbIteratorNext(it, position, true);
		if (position->type == jbvNumeric && owns(kafka, topic, atoi(*key)) &&
			find_partition(kafka, topic, atoi(*key)) < 0)
			return true;
	}
	return false;
}

static int
find_partition(KafkaSource *kafka, int topic, int32 partition)
{
	for (int i = 0; i < kafka->nparts; i++)
		if (kafka->parts[i].topic == topic && kafka->parts[i].partition == partition)
			return i;
	return -1;
}

/* Whether this subtask reads partition of topic (the topic's index in the spec). */
static bool
owns(KafkaSource *kafka, int topic, int32 partition)
{
	return source_owns(topic, partition, kafka->subtask, kafka->parallelism);
}

/*
 * A topic's object of checkpointed positions, or NULL: never positioned.
 * Any subtask's positions of the topic count: it was positioned.
 */
static JsonbValue *
restored_topic(KafkaSource *kafka, int topic)
{
	JsonbValue *t;

	if (kafka->restored == NULL)
		return NULL;
	t = getKeyJsonValueFromContainer(&kafka->restored->root, kafka->base.topic_names[topic],
									 strlen(kafka->base.topic_names[topic]), NULL);
	return t != NULL && t->type == jbvBinary ? t : NULL;
}

/* The checkpointed next offset of a partition, or -1. */
static int64
restored_offset(KafkaSource *kafka, int topic, int32 partition)
{
	return partition_number(kafka, kafka->restored, topic, partition);
}

/* A partition's number in obj, {"topic": {"partition": n}}, or -1. */
static int64
partition_number(KafkaSource *kafka, Jsonb *obj, int topic, int32 partition)
{
	JsonbValue *t;
	JsonbValue *p;
	char		key[16];

	if (obj == NULL)
		return -1;
	t = getKeyJsonValueFromContainer(&obj->root, kafka->base.topic_names[topic],
									 strlen(kafka->base.topic_names[topic]), NULL);
	if (t == NULL || t->type != jbvBinary)
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
	KafkaSource *kafka = (KafkaSource *) src;
	int			got;
	int			n = 0;
	bool		moved;

	kafka_drain_logs(kafka->logs, &kafka->secrets);
	rd_kafka_poll(kafka->rk, 0);
	release_batch(kafka);
	if (GetCurrentTimestamp() >= kafka->next_refresh)
		refresh_assignment(kafka);

	/*
	 * A job that checkpoints at cuts reads nothing before it knows the
	 * cuts published so far: it could read past a marker of one of them.
	 */
	got = 0;
	if (kafka->barrier == NULL || barrier_reader_caught_up(kafka->barrier))
		got = consume_batch(kafka, max);
	for (int i = 0; i < got; i++)
	{
		rd_kafka_message_t *m = kafka->batch[i];

		if (hand_out(kafka, m, &out[n]))
			kafka->batch[n++] = m;	/* kept until the next poll */
	}
	kafka->nbatch = n;
	if (kafka->resync)
	{
		kafka->resync = false;
		for (int i = 0; i < kafka->nparts; i++)
			sync_fetching(kafka, &kafka->parts[i]);
	}
	moved = take_positions(kafka);
	if (kafka->any_out_of_range)
		handle_out_of_range(kafka);
	if (n > 0)
		kafka->broker_error[0] = '\0';
	if (n > 0 || got > 0 || moved)
		update_metrics(kafka);
	/* A batch is in hand, its partitions' metrics published (tests stop the broker here). */
	if (n > 0)
		TEST_POINT("kafka_polled");
	publish_status(kafka);
	return n;
}

/* Up to max messages of the consumer queue into kafka->batch, without waiting. */
static int
consume_batch(KafkaSource *kafka, int max)
{
	ssize_t		got;
	char		drain[64];

	if (kafka->batch_capacity < max)
	{
		kafka->batch = kafka->batch ? repalloc(kafka->batch, sizeof(rd_kafka_message_t *) * max) :
			MemoryContextAlloc(kafka->ctx, sizeof(rd_kafka_message_t *) * max);
		kafka->batch_capacity = max;
	}
	/*
	 * The pipe only signals an empty queue becoming non-empty: drain it
	 * before the queue, so that a message queued after the consume below
	 * signals anew (drained after, that wakeup would be lost).  A full
	 * batch may leave messages queued that signal nothing: signal them.
	 */
	while (read(kafka->pipe_fds[0], drain, sizeof(drain)) > 0)
		;
	got = rd_kafka_consume_batch_queue(kafka->queue, 0, kafka->batch, max);
	if (got < 0)
		got = 0;
	if (kafka->refill.enabled)
	{
		size_t		bytes = 0;

		int			messages = 0;

		for (ssize_t i = 0; i < got; i++)
		{
			if (kafka->batch[i]->err)
				continue;		/* its len is an error text's */
			bytes += kafka->batch[i]->len;
			messages++;
		}
		kafka_refill_check(&kafka->refill, kafka->rk, kafka->queue, kafka->assigned, messages, bytes);
	}
	if (got == max)
	{
		ssize_t		written = write(kafka->pipe_fds[1], "1", 1);

		(void) written;
	}
	return (int) got;
}

/*
 * Fill out with message m, and count it in its partition's metrics; false
 * (m destroyed) for an error event, which is noted, and for a message that
 * is not the job's or was handed out already.
 */
static bool
hand_out(KafkaSource *kafka, rd_kafka_message_t *m, SourceMessage *out)
{
	int			t = 0;
	int			p;
	rd_kafka_timestamp_type_t tstype;
	int64		ms;

	while (m->rkt && t < kafka->base.ntopics && kafka->topics[t] != m->rkt &&
		   strcmp(kafka->base.topic_names[t], rd_kafka_topic_name(m->rkt)) != 0)
		t++;
	p = m->rkt ? find_partition(kafka, t, m->partition) : -1;
	if (m->err)
	{
		/* The partition has stopped: it goes on once mailer has judged its position. */
		if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET && p >= 0)
		{
			/*
			 * Judged at the offset librdkafka fetched: control records
			 * passed in this batch may have left next behind it.
			 */
			kafka->parts[p].out_of_range = true;
			kafka->parts[p].range_offset = m->offset;
			kafka->any_out_of_range = true;
		}
		else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
		{
			snprintf(kafka->broker_error, sizeof(kafka->broker_error), "%s",
					 rd_kafka_message_errstr(m));
			kafka_secrets_mask(&kafka->secrets, kafka->broker_error, sizeof(kafka->broker_error));
		}
		rd_kafka_message_destroy(m);
		return false;
	}
	if (p < 0 || m->offset < kafka->parts[p].next)
	{
		/* Not ours, or already handed out: never twice. */
		rd_kafka_message_destroy(m);
		return false;
	}
	if (kafka->parts[p].hold >= 0 && m->offset >= kafka->parts[p].hold)
	{
		/* After a barrier cut the job is held at: read again once it is released. */
		kafka->parts[p].refetch = REFETCH_WANTED;
		note_assigned(kafka, &kafka->parts[p]);
		/* Messages come in order: what lies between next and the marker is none. */
		if (kafka->parts[p].next < kafka->parts[p].hold)
			kafka->parts[p].next = kafka->parts[p].hold;
		rd_kafka_message_destroy(m);
		return false;
	}
	kafka->parts[p].next = m->offset + 1;
	note_assigned(kafka, &kafka->parts[p]);
	if (kafka->parts[p].refetch == REFETCH_ASSIGNED)
		kafka->parts[p].refetch = REFETCH_NONE;
	ms = rd_kafka_message_timestamp(m, &tstype);
	out->key = m->key;
	out->key_len = m->key ? (int) m->key_len : 0;
	out->value = m->payload;
	out->value_len = m->payload ? (int) m->len : 0;
	out->topic = t;
	out->partition = m->partition;
	out->offset = m->offset;
	out->timestamp = kafka_timestamp(ms);
	out->opaque = m;
	out->unreadable = NULL;
	if (kafka->parts[p].metrics >= 0)
		kafka->base.slot->partitions[kafka->parts[p].metrics].records_in++;
	return true;
}

/* A message of a partition's assignment came: it applied. */
static void
note_assigned(KafkaSource *kafka, KafkaPartition *kp)
{
	if (!kp->assigning)
		return;
	kp->assigning = false;
	kafka->resync = true;
}

/* What the source waits on, if anything: base.error. */
static void
publish_status(KafkaSource *kafka)
{
	if (kafka->error[0] == '\0' && kafka->broker_error[0] != '\0')
	{
		snprintf(kafka->status, sizeof(kafka->status), "waiting for Kafka: %s", kafka->broker_error);
		kafka->base.error = kafka->status;
	}
	else if (kafka->broker_error[0] != '\0')
	{
		/* Why the metadata cannot be read (authentication, TLS) is the broker's error. */
		snprintf(kafka->status, sizeof(kafka->status), "%s (the broker's last error: %s)",
				 kafka->error, kafka->broker_error);
		kafka->base.error = kafka->status;
	}
	else if (kafka->error[0] == '\0' && kafka->barrier && barrier_reader_error(kafka->barrier))
	{
		snprintf(kafka->status, sizeof(kafka->status), "waiting for Kafka: %s",
				 barrier_reader_error(kafka->barrier));
		kafka->base.error = kafka->status;
	}
	else
		kafka->base.error = kafka->error[0] ? kafka->error : NULL;
}

/*
 * librdkafka's position is past the last message it handed out and past
 * the control records (a transaction's commit or abort marker) and
 * aborted messages after it, which are never handed out: without it, a
 * topic written by transactions would never be read to its end.
 */
static bool
take_positions(KafkaSource *kafka)
{
	bool		moved = false;

	if (kafka->assigned->cnt == 0)
		return false;
	if (rd_kafka_position(kafka->rk, kafka->assigned) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return false;
	/* kafka->assigned lists the partitions in the order of kafka->parts. */
	for (int i = 0; i < kafka->assigned->cnt && i < kafka->nparts; i++)
	{
		int64		pos = kafka->assigned->elems[i].offset;

		/* Past a cut's marker, librdkafka passed only records not handed out. */
		if (kafka->parts[i].hold >= 0 && pos > kafka->parts[i].hold)
			pos = kafka->parts[i].hold;
		/*
		 * So it did for one that dropped such a record (KafkaRefetch), until
		 * the new assignment applies: librdkafka has no position for a
		 * partition it starts, so none says it did.
		 */
		if (kafka->parts[i].refetch == REFETCH_ASSIGNED && pos < 0)
			kafka->parts[i].refetch = REFETCH_NONE;
		if (kafka->parts[i].refetch != REFETCH_NONE)
			continue;
		if (pos >= 0 && pos > kafka->parts[i].next && !kafka->parts[i].out_of_range)
		{
			kafka->parts[i].next = pos;
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
handle_out_of_range(KafkaSource *kafka)
{
	kafka->any_out_of_range = false;
	for (int i = 0; i < kafka->nparts; i++)
	{
		KafkaPartition *kp = &kafka->parts[i];
		const char *topic = kafka->base.topic_names[kp->topic];
		int64		low,
					high;
		rd_kafka_resp_err_t err;

		if (!kp->out_of_range)
			continue;
		/* Each query blocks for up to BROKER_TIMEOUT_MS: answer SIGTERM between them. */
		CHECK_FOR_INTERRUPTS();
		err = rd_kafka_query_watermark_offsets(kafka->rk, topic, kp->partition, &low, &high,
											   BROKER_TIMEOUT_MS);
		if (err)
		{
			/* The broker is away: the rest wait too, asked again at the next poll. */
			snprintf(kafka->broker_error, sizeof(kafka->broker_error),
					 "cannot read the offsets of %s partition %d: %s",
					 topic, kp->partition, rd_kafka_err2str(err));
			kafka->any_out_of_range = true;
			break;
		}
		/* Past control records; but past records dropped at a hold, never. */
		if (kp->range_offset > kp->next && kp->refetch == REFETCH_NONE)
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
			job_slot_set_error(kafka->base.slot, msg);
			if (kp->metrics >= 0)
				kafka->base.slot->partitions[kp->metrics].offsets_skipped += low - kp->next;
			kp->next = low;
		}
		reassign(kafka, kp);
		if (kp->refetch == REFETCH_WANTED)
			kp->refetch = REFETCH_ASSIGNED;
		kp->out_of_range = false;
		kp->range_offset = -1;
	}
}

/* Fetch a partition stopped by librdkafka again, from kp->next. */
static void
reassign(KafkaSource *kafka, KafkaPartition *kp)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);

	rd_kafka_topic_partition_list_add(list, kafka->base.topic_names[kp->topic], kp->partition)->offset = kp->next;
	assign_partitions(kafka, list, true);
	/* A paused one is resumed later, not right after (sync_fetching). */
	kp->assigning = !kp->fetch_paused;
}

static void
release_batch(KafkaSource *kafka)
{
	for (int i = 0; i < kafka->nbatch; i++)
		rd_kafka_message_destroy(kafka->batch[i]);
	kafka->nbatch = 0;
}

static void
update_metrics(KafkaSource *kafka)
{
	JobSlot    *slot = kafka->base.slot;
	int64		lag = 0;

	for (int i = 0; i < kafka->nparts; i++)
	{
		KafkaPartition *kp = &kafka->parts[i];
		int64		high = known_end(kafka, kp);

		/* A partition whose end is unknown may hold anything: the sum is unknown, not caught up. */
		if (high < 0 || lag < 0)
			lag = -1;
		else
			lag += Max(high - kp->next, 0);
		if (kp->metrics < 0)
			continue;
		strlcpy(slot->partitions[kp->metrics].topic, kafka->base.topic_names[kp->topic], JOB_SLOT_TOPIC_LEN);
		slot->partitions[kp->metrics].partition = kp->partition;
		slot->partitions[kp->metrics].position = kp->next;
		slot->partitions[kp->metrics].end_offset = high;
	}
	slot->npartitions = Min(kafka->nparts, JOB_SLOT_MAX_PARTITIONS);
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
		JsonbValue	v;

		/* A name must be text: a record whose name is not fails to decode (a dead letter). */
		if (!pg_verify_mbstr(GetDatabaseEncoding(), name, strlen(name), true))
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("a header name is not valid text in the database encoding"),
					 errdetail("Header %zu of the message.", i + 1)));
		jsonb_push_key(&state, name);
		/* A header value that is not text in the database encoding shows as null. */
		if (value != NULL && memchr(value, '\0', size) == NULL &&
			pg_verify_mbstr(GetDatabaseEncoding(), value, (int) size, true))
		{
			jsonb_string_value(&v, value, (int) size);
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
	KafkaSource *kafka = (KafkaSource *) src;
	long		until_refresh = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), kafka->next_refresh);

	return Max(until_refresh, 1);
}

static pgsocket
kafka_event_fd(Source *src)
{
	return ((KafkaSource *) src)->pipe_fds[0];
}

/* Whether topic t has a partition of this subtask's, assigned or restored. */
static bool
has_positions(KafkaSource *kafka, int t, JsonbValue *restored)
{
	JsonbIterator *it;
	char	   *key;
	JsonbValue	position;

	for (int i = 0; i < kafka->nparts; i++)
		if (kafka->parts[i].topic == t)
			return true;
	if (restored == NULL)
		return false;
	it = JsonbIteratorInit(restored->val.binary.data);
	return next_unassigned_restored(kafka, t, &it, &key, &position);
}

/* {"topic": {"partition": next offset}} of the owned partitions, for the checkpoint. */
static Jsonb *
kafka_positions(Source *src)
{
	KafkaSource *kafka = (KafkaSource *) src;
	JsonbParseState *state = NULL;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int t = 0; t < kafka->base.ntopics; t++)
	{
		JsonbValue *restored = restored_topic(kafka, t);

		/*
		 * A topic without a position of this subtask is left out: one
		 * never positioned, so that the next start still starts it per the
		 * spec ("latest" included), and one whose partitions are all other
		 * subtasks', lest an empty object in the merged positions tell
		 * them that the topic was positioned when they had not.
		 */
		if (!has_positions(kafka, t, restored))
			continue;
		jsonb_push_key(&state, kafka->base.topic_names[t]);
		pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
		for (int i = 0; i < kafka->nparts; i++)
		{
			JsonbValue	next;

			if (kafka->parts[i].topic != t)
				continue;
			jsonb_push_key(&state, psprintf("%d", kafka->parts[i].partition));
			next.type = jbvNumeric;
			next.val.numeric = int64_to_numeric(kafka->parts[i].next);
			pushJsonbValue(&state, WJB_VALUE, &next);
		}
		/* A restored position stays until its partition is assigned again. */
		if (restored != NULL)
		{
			JsonbIterator *it = JsonbIteratorInit(restored->val.binary.data);
			char	   *key;
			JsonbValue	position;

			while (next_unassigned_restored(kafka, t, &it, &key, &position))
			{
				jsonb_push_key(&state, key);
				pushJsonbValue(&state, WJB_VALUE, &position);
			}
		}
		pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	}
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

/*
 * {"topic": {"partition": records read}} of the owned partitions, as the
 * partition metrics count them, for the checkpoint.  A partition not
 * assigned (yet), or without metrics, keeps the count it was restored with.
 */
static Jsonb *
kafka_records_in(Source *src)
{
	KafkaSource *kafka = (KafkaSource *) src;
	JsonbParseState *state = NULL;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int t = 0; t < kafka->base.ntopics; t++)
	{
		const char *name = kafka->base.topic_names[t];
		JsonbValue *restored = NULL;
		JsonbValue	count;

		jsonb_push_key(&state, name);
		pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
		for (int i = 0; i < kafka->nparts; i++)
		{
			KafkaPartition *kp = &kafka->parts[i];

			if (kp->topic != t)
				continue;
			jsonb_push_key(&state, psprintf("%d", kp->partition));
			count.type = jbvNumeric;
			count.val.numeric = int64_to_numeric(kp->metrics >= 0 ?
												 kafka->base.slot->partitions[kp->metrics].records_in :
												 Max(partition_number(kafka, kafka->restored_records_in,
																	  t, kp->partition), 0));
			pushJsonbValue(&state, WJB_VALUE, &count);
		}
		if (kafka->restored_records_in != NULL)
			restored = getKeyJsonValueFromContainer(&kafka->restored_records_in->root, name,
													strlen(name), NULL);
		if (restored != NULL && restored->type == jbvBinary)
		{
			JsonbIterator *it = JsonbIteratorInit(restored->val.binary.data);
			char	   *key;

			while (next_unassigned_restored(kafka, t, &it, &key, &count))
			{
				jsonb_push_key(&state, key);
				pushJsonbValue(&state, WJB_VALUE, &count);
			}
		}
		pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	}
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

/*
 * Publish progress to the consumer group, for lag tools; never read back.
 * The offsets of the owned partitions only, listed one by one: the job's
 * other subtasks commit theirs to the same group, and a commit changes
 * only the partitions it lists.
 */
static void
kafka_committed(Source *src)
{
	KafkaSource *kafka = (KafkaSource *) src;
	rd_kafka_topic_partition_list_t *list;

	/* The positions a "latest" start took are in the checkpoint now. */
	src->unpinned = false;
	if (kafka->nparts == 0)
		return;
	list = rd_kafka_topic_partition_list_new(kafka->nparts);
	for (int i = 0; i < kafka->nparts; i++)
	{
		rd_kafka_topic_partition_list_add(list, kafka->base.topic_names[kafka->parts[i].topic],
										  kafka->parts[i].partition)->offset = kafka->parts[i].next;
		kafka->parts[i].committed = kafka->parts[i].next;
	}
	(void) rd_kafka_commit(kafka->rk, list, 1);
	/* Committed again, and waited for, when the consumer closes. */
	if (kafka->last_commit)
		rd_kafka_topic_partition_list_destroy(kafka->last_commit);
	kafka->last_commit = list;
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
	KafkaSource *kafka = (KafkaSource *) src;

	*topic = kafka->parts[i].topic;
	*partition = kafka->parts[i].partition;
}

/*
 * Note the input available now: partitions added since the last metadata
 * refresh hold some too, so refresh first; the marks are taken once it
 * succeeds.
 */
static void
kafka_mark_end(Source *src)
{
	KafkaSource *kafka = (KafkaSource *) src;

	kafka->mark_pending = true;
	refresh_assignment(kafka);
}

/* Take each partition's end offset now; until the broker answers, no mark. */
static void
take_marks(KafkaSource *kafka)
{
	if (kafka->error[0] != '\0')
		return;
	for (int i = 0; i < kafka->nparts; i++)
	{
		int64		high;

		if (!query_end(kafka, &kafka->parts[i], &high))
			return;				/* retried at the next refresh */
		kafka->parts[i].mark = high;
	}
	kafka->mark_pending = false;
}

static bool
kafka_reached_end(Source *src)
{
	KafkaSource *kafka = (KafkaSource *) src;

	if (kafka->mark_pending)
		return false;
	for (int i = 0; i < kafka->nparts; i++)
		if (kafka->parts[i].next < kafka->parts[i].mark)
			return false;
	return true;
}

/*
 * Close the consumer, on every exit (a before_shmem_exit callback, so an
 * ERROR's exit too): the asynchronous commit
 * of the last checkpoint's offsets may not have reached the broker yet, so
 * commit them once more and wait for at most CLOSE_COMMIT_MS.  Partitions
 * are assigned, never subscribed: there is no group membership to leave,
 * and the consumer close that could wait on the broker is skipped.
 */
static void
kafka_exit(int code, Datum arg)
{
	KafkaSource *kafka = (KafkaSource *) DatumGetPointer(arg);
	rd_kafka_t *rk = kafka->rk;
	sigset_t	saved;

	if (rk == NULL)
		return;
	kafka->rk = NULL;
	if (kafka->barrier)
		barrier_reader_close(kafka->barrier);
	for (int i = 0; i < kafka->nbatch; i++)
		rd_kafka_message_destroy(kafka->batch[i]);
	kafka->nbatch = 0;
	if (kafka->last_commit != NULL)
	{
		rd_kafka_queue_t *done = rd_kafka_queue_new(rk);
		rd_kafka_event_t *ev;

		if (rd_kafka_commit_queue(rk, kafka->last_commit, done, NULL, NULL) == RD_KAFKA_RESP_ERR_NO_ERROR &&
			(ev = rd_kafka_queue_poll(done, CLOSE_COMMIT_MS)) != NULL)
			rd_kafka_event_destroy(ev);
		rd_kafka_queue_destroy(done);
		rd_kafka_topic_partition_list_destroy(kafka->last_commit);
		kafka->last_commit = NULL;
	}
	for (int i = 0; i < kafka->base.ntopics; i++)
		rd_kafka_topic_destroy(kafka->topics[i]);
	rd_kafka_queue_destroy(kafka->queue);
	rd_kafka_queue_destroy(kafka->logs);
	mailer_block_signals(&saved);
	rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	mailer_restore_signals(&saved);
	close(kafka->pipe_fds[0]);
	close(kafka->pipe_fds[1]);
	rd_kafka_topic_partition_list_destroy(kafka->assigned);
}

/*
 * Whether a partition has records left to read: its position is below
 * its end offset, the broker's last word (read_committed: the last stable
 * offset, from the last fetch, or before the first one, from the
 * assignment, or while its fetching is paused, asked of the broker), or
 * that end is unknown yet.  Such a partition is not idle,
 * however long the broker keeps it silent.
 */
static bool
kafka_backlog(Source *src, int i)
{
	KafkaSource *kafka = (KafkaSource *) src;
	int64		high = known_end(kafka, &kafka->parts[i]);

	/* Unknown (restored, its end query failed, never fetched): it may hold anything. */
	return high < 0 || kafka->parts[i].next < high;
}

/* The broker's last word on a partition's end offset, or -1. */
static int64
known_end(KafkaSource *kafka, KafkaPartition *kp)
{
	int64		low,
				high = -1;

	if (rd_kafka_get_watermark_offsets(kafka->rk, kafka->base.topic_names[kp->topic], kp->partition,
									   &low, &high) != RD_KAFKA_RESP_ERR_NO_ERROR || high < 0)
		high = kp->assigned_end;
	/* Asked while paused: newer than the last fetch's, until a fetch since tells as much. */
	if (kp->paused_end >= 0 && high >= kp->paused_end)
		kp->paused_end = -1;
	return Max(high, kp->paused_end);
}

static const BarrierCut *
kafka_next_cut(Source *src, int64 above)
{
	KafkaSource *kafka = (KafkaSource *) src;

	barrier_reader_poll(kafka->barrier, above);
	if (!barrier_reader_caught_up(kafka->barrier))
		return NULL;
	return barrier_reader_next(kafka->barrier, above);
}

static const BarrierCut *
kafka_cut_of(Source *src, int64 epoch, int32 partition, int64 offset, int64 decided, bool *withdrawn)
{
	KafkaSource *kafka = (KafkaSource *) src;

	*withdrawn = false;
	barrier_reader_poll(kafka->barrier, decided);
	if (!barrier_reader_caught_up(kafka->barrier))
		return NULL;
	(void) barrier_reader_next(kafka->barrier, decided);
	return barrier_reader_find(kafka->barrier, epoch, partition, offset, withdrawn);
}

/*
 * Hold each partition the cut names at its marker.  A partition the job
 * has not assigned is waited for until metadata read after the cut came
 * says its topic lacks it: then it holds nothing back (a cut cannot hold the
 * job at a partition that is not there).  One the job does not own is
 * another subtask's.  A cut is judged when its partitions are first held:
 * the last checkpoint past any marker makes it a cut the job cannot take;
 * else records read past one make it a cut the job takes only after going
 * back to that checkpoint.  A held partition whose position jumped past
 * its marker (retention deleted what it had not read) cannot be at the cut
 * either.
 */
static CutHold
kafka_hold_at_cut(Source *src, const BarrierCut *cut)
{
	KafkaSource *kafka = (KafkaSource *) src;
	bool		waiting = false;
	bool		read_past = false;

	for (int pass = 0; pass < 2; pass++)
	{
		for (int i = 0; i < cut->nmarkers; i++)
		{
			const CutMarker *marker = &cut->markers[i];
			int			p;
			KafkaPartition *kp;

			if (!owns(kafka, marker->topic, marker->partition))
				continue;
			p = find_partition(kafka, marker->topic, marker->partition);
			if (p < 0)
			{
				if (pass == 1 && !partition_missing(kafka, cut, marker))
					waiting = true;
				continue;
			}
			kp = &kafka->parts[p];
			if (pass == 0)
			{
				/* Judged before anything is held: behind anywhere is behind. */
				if (kp->hold < 0 && kp->committed > marker->offset)
					return CUT_HOLD_BEHIND;
				if (kp->hold < 0 && kp->next > marker->offset)
					read_past = true;
				if (kp->hold >= 0 && kp->next > kp->hold)
					return CUT_HOLD_BEHIND;
				continue;
			}
			if (kp->hold < 0)
				kp->hold = marker->offset;
			if (kp->next < kp->hold)
				waiting = true;
			else
				kp->paused = true;
		}
		if (read_past)
			return CUT_HOLD_READ_PAST;
	}
	/* A partition held, or one the cut waits for, is fetched or paused now. */
	for (int i = 0; i < kafka->nparts; i++)
		sync_fetching(kafka, &kafka->parts[i]);
	return waiting ? CUT_HOLD_WAITING : CUT_HOLD_REACHED;
}

/*
 * Whether the partition a cut names is missing from its topic: not known
 * at a metadata refresh that began after the cut named it.  The first
 * call for a cut asks for that refresh at once.
 */
static bool
partition_missing(KafkaSource *kafka, const BarrierCut *cut, const CutMarker *marker)
{
	if (kafka->missing_epoch != cut->epoch)
	{
		kafka->missing_epoch = cut->epoch;
		kafka->missing_after = kafka->refreshes;
		kafka->next_refresh = 0;
		return false;
	}
	/* Refreshes run in the poll: one that ended since began after the cut named it. */
	if (kafka->refreshes <= kafka->missing_after || !kafka->topic_known[marker->topic])
		return false;
	if (kafka->missing_logged != cut->epoch)
		ereport(LOG,
			(errmsg("barrier cut " INT64_FORMAT " names partition %d of topic \"%s\", which the topic does not have: it holds nothing back",
						cut->epoch, marker->partition, kafka->base.topic_names[marker->topic])));
	kafka->missing_logged = cut->epoch;
	return true;
}

/* Read on past the markers: from next where a message past one was dropped. */
static void
kafka_release_cut(Source *src)
{
	KafkaSource *kafka = (KafkaSource *) src;

	for (int i = 0; i < kafka->nparts; i++)
	{
		KafkaPartition *kp = &kafka->parts[i];

		if (kp->hold < 0)
			continue;
		kp->hold = -1;
		kp->paused = false;
	}
	for (int i = 0; i < kafka->nparts; i++)
		sync_fetching(kafka, &kafka->parts[i]);
}

/* Watermark alignment: fetch partition i or not (a hold at a cut pauses it too). */
static void
kafka_set_ahead(Source *src, int i, bool ahead)
{
	KafkaSource *kafka = (KafkaSource *) src;

	kafka->parts[i].ahead = ahead;
	sync_fetching(kafka, &kafka->parts[i]);
}

/*
 * Pause librdkafka's fetching of a partition that is held at a cut or runs
 * ahead, and resume it once neither.  Pausing drops what librdkafka has
 * fetched of it and not yet given out; resumed, it fetches again from the
 * offset after the last message it gave out, which is next unless hand_out
 * dropped a message past a hold: then, once resumed (a new assignment keeps
 * the pause), it is assigned again at next (KafkaRefetch).
 *
 * A partition a barrier cut waits for (below its marker) is not paused for
 * running ahead: the cut would wait for ever behind the partitions it
 * holds.  One assigned again is neither paused nor resumed before a message
 * of it arrives (librdkafka issue 2190: a pause or resume right after an
 * assignment can leave it never fetching the partition); hand_out drops
 * what it brings past a hold meanwhile, and kafka_poll syncs it after.
 */
static void
sync_fetching(KafkaSource *kafka, KafkaPartition *kp)
{
	bool		cut_waits = kp->hold >= 0 && kp->next < kp->hold;
	bool		pause = kp->paused || (kp->ahead && !cut_waits);

	if (kp->assigning)
		pause = kp->fetch_paused;
	else if (pause != kp->fetch_paused)
	{
		rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);

		rd_kafka_topic_partition_list_add(list, kafka->base.topic_names[kp->topic], kp->partition);
		if (pause)
			(void) rd_kafka_pause_partitions(kafka->rk, list);
		else
			(void) rd_kafka_resume_partitions(kafka->rk, list);
		rd_kafka_topic_partition_list_destroy(list);
		kp->fetch_paused = pause;
	}
	if (kp->refetch == REFETCH_WANTED && !pause)
	{
		reassign(kafka, kp);
		kp->refetch = REFETCH_ASSIGNED;
	}
	/* Shown paused for alignment only when that is why it is not fetched. */
	if (kp->metrics >= 0)
		kafka->base.slot->partitions[kp->metrics].ahead = pause && !kp->paused;
}

static void
kafka_cut_counts(Source *src, uint64 *partial, uint64 *malformed, uint64 *late)
{
	barrier_reader_counts(((KafkaSource *) src)->barrier, partial, malformed, late);
}

static const SourceOps kafka_ops = {
	.poll = kafka_poll,
	.headers = kafka_headers,
	.wait_ms = kafka_wait_ms,
	.event_fd = kafka_event_fd,
	.positions = kafka_positions,
	.records_in = kafka_records_in,
	.committed = kafka_committed,
	.finished = kafka_finished,
	.partition_count = kafka_partition_count,
	.partition_at = kafka_partition_at,
	.mark_end = kafka_mark_end,
	.reached_end = kafka_reached_end,
	.backlog = kafka_backlog,
	.set_ahead = kafka_set_ahead,
	.next_cut = kafka_next_cut,
	.cut_of = kafka_cut_of,
	.hold_at_cut = kafka_hold_at_cut,
	.release_cut = kafka_release_cut,
	.cut_counts = kafka_cut_counts,
};
