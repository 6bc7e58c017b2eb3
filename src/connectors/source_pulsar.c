/*
 * source_pulsar.c
 *		The Pulsar source: every partition of one persistent topic, each
 *		read by a reader of Pulsar's WebSocket API (connectors/pulsar_ws.c).
 *
 * Positions are mailer's own, as for Kafka: a reader has no subscription,
 * and starts after the message id the last checkpoint stored for its
 * partition (base64, as the broker gives it), so a restart reads on just
 * after the last message handed out, whatever the broker acknowledged.  A
 * partition no checkpoint has seen starts at "earliest", or at "latest"
 * resolved at once to the partition's last message id (REST admin API,
 * lastMessageId), so that a checkpoint taken before any message arrives
 * still pins where it resumes.  The partitions are those the REST admin
 * API's partition metadata names (a topic that is not partitioned is read
 * as partition 0); they are read again every few seconds, and partitions
 * added later start at their beginning.
 *
 * The record's offset is the partition's message ordinal, counted from the
 * job's start on the partition and kept with the checkpoint (records_in),
 * so a replay gives each message the same offset.  Its timestamp is the
 * message's event time when the producer set one, else its publish time;
 * its headers are the message's properties.
 *
 * Lag is the entries after the last one handed out, asked of the broker
 * at each metadata refresh (poll_lag), and published as the partition's
 * end in the units of the record offsets.
 *
 * libwebsockets starts no thread; libcurl may (a resolver), so its calls
 * (pulsar_admin.c) run with signals blocked.  The worker waits on one
 * descriptor: an epoll set that holds every reader's socket, for reading,
 * and for writing while a session has frames to send (acknowledgements),
 * kept in step with pulsar_ws_poll_set before each wait.
 *
 * Design: docs/ARCHITECTURE.md, "Source poll".
 */
#include "postgres.h"

#include <sys/epoll.h>
#include <unistd.h>

#include "common/int.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "base/iso_time.h"
#include "base/jsonb_build.h"
#include "base/test_point.h"
#include "connectors/kafka_client.h"
#include "connectors/pulsar_admin.h"
#include "connectors/pulsar_frame.h"
#include "connectors/pulsar_ws.h"
#include "connectors/source.h"
#include "jobs/job_slots.h"

#define METADATA_INTERVAL_MS	5000
#define METADATA_RETRY_MS		1000
#define REOPEN_MS				1000	/* a closed reader's first reopen ... */
#define REOPEN_MAX_MS			8000	/* ... doubled while it fails, up to this */
#define RECEIVER_QUEUE			1000
#define ID_LEN					128		/* a base64 message id, with room */
#define MAX_FDS					1024
#define LAG_BUDGET_MS			50		/* the worker's time for lag polls per refresh, at most ... */
#define LAG_STATS_MS			30000	/* ... and a partition's internalStats for its lag, at most this often */
#define LAG_CALL_MS				200		/* a lag call's bound: a broker that hangs costs a refresh no more ... */
#define LAG_RETRY_MS			5000	/* ... and the partition is not asked again for this long, doubled ... */
#define LAG_RETRY_MAX_MS		60000	/* ... while its calls fail, up to this */

typedef struct PulsarPartition
{
	int32		partition;
	char	   *reader_topic;	/* tenant/ns/topic, or its -partition-N */
	char		start[ID_LEN];	/* where the reader starts: an id (after it) or "earliest" */
	PulsarMessageId last;		/* the last message handed out, or the one start names; ledger -1: none */
	bool		handed;			/* last is a message this run handed out (else: start) */
	PulsarWsConn *conn;			/* NULL: not open, reopened at reopen_at */
	TimestampTz reopen_at;
	int			reopen_ms;		/* the wait before the next reopen, 0: REOPEN_MS */
	int64		count;			/* messages handed out: the next one's offset */
	int			metrics;		/* index in the slot's partition metrics, -1 none */
	PulsarMessageId mark;		/* wait_job's target; ledger -2: none taken */
	char		why[600];		/* why the reader closed, while it is not open again */
	/* Retention (check_switch, check_retention): what the reader may have skipped. */
	int64		count_at_refresh;	/* count at the last metadata refresh */
	PulsarMessageId checked;	/* the position a stalled reader was checked at; ledger -1 none */
	char	   *held;			/* a new ledger's first message, until the switch is checked */
	size_t		held_len;
	TimestampTz held_retry_at;
	int64		fits_ledger;	/* a ledger of last the broker was seen to hold, -1 none */
	int64		asked_ledger;	/* the last ledger whose length internalStats was read for, -1 none */
	int64		closed_ledger;	/* the ledger of last when its reader last closed, -1 none */
	int64		end_ledger;		/* a ledger whose entry count is known, -1 none ... */
	int64		end_entries;	/* ... and that count */
	int64		reported_ledger;	/* the last ledger reported as deleted, -1 none */
	/* Lag (poll_lag): the partition's end in count's units, as of the last poll; -1 unknown. */
	int64		lag_end;
	PulsarMessageId lag_end_id; /* the end's last message at that poll ... */
	bool		lag_unread;		/* ... and there were messages after the position then */
	bool		lag_polled;		/* polled once: a new partition is, whatever the budget */
	int64		lag_round;		/* the poll_lag round that last polled it */
	TimestampTz lag_retry_at;	/* its last poll failed: not asked again before, 0 none ... */
	int			lag_retry_ms;	/* ... and the wait after the next failure, 0: LAG_RETRY_MS */
	TimestampTz counted_at;		/* when internalStats last counted the entries behind, 0 never ... */
	PulsarMessageId counted_from;	/* ... from this position ... */
	PulsarMessageId counted_to; /* ... to this end */
} PulsarPartition;

/* A handed-out message's properties: pointers into its frame. */
typedef struct MessageProperties
{
	int			n;
	char	  **names;
	char	  **values;
} MessageProperties;

typedef struct PulsarSource
{
	Source		base;
	PulsarSourceSpec *spec;
	int			subtask;
	int			parallelism;
	PulsarWs   *ws;
	PulsarAdmin *admin;			/* the REST admin API (partitions, lastMessageId, internalStats) */
	int			epfd;
	int			registered[MAX_FDS];	/* the sockets in the epoll set */
	int			nregistered;
	PulsarPartition *parts;
	int			nparts;
	bool		partitioned;	/* read as <topic>-partition-N */
	bool		topic_known;	/* metadata read once: partitions added since start at their beginning */
	Jsonb	   *restored;		/* positions of the last checkpoint, or NULL */
	Jsonb	   *restored_records_in;
	char	  **frames;			/* handed out by the last poll, freed at the next */
	MessageProperties *props;	/* their properties, for headers() */
	MemoryContext batch_ctx;	/* the properties' arrays, reset at each poll */
	int			nframes;
	int			capacity;
	int			next_part;		/* where the next poll starts: every partition gets its turn */
	int			lag_next;		/* the partition whose lag is polled next */
	int64		lag_round;		/* poll_lag's rounds */
	TimestampTz next_refresh;
	bool		mark_pending;	/* wait_job asked; marks not taken yet */
	char		error[512];		/* what the source waits on, "" none */
} PulsarSource;

static const SourceOps pulsar_ops;

static void refresh_partitions(PulsarSource *ps);
static bool last_message_id(PulsarSource *ps, PulsarPartition *pp, PulsarMessageId *id,
							char *why, size_t whysize);
static const char *restored_string(PulsarSource *ps, int32 partition);
static int64 restored_count(PulsarSource *ps, int32 partition);
static JsonbValue *restored_value(PulsarSource *ps, Jsonb *obj, int32 partition);
static void open_reader(PulsarSource *ps, PulsarPartition *pp);
static void check_retention(PulsarSource *ps, PulsarPartition *pp);
static bool check_switch(PulsarSource *ps, PulsarPartition *pp, const PulsarMessageId *id,
						 char *why, size_t whysize);
static void position_not_in_topic(PulsarSource *ps, PulsarPartition *pp, const char *end);
static void note_length(PulsarSource *ps, PulsarPartition *pp, int64 ledger);
static bool hand_out(PulsarSource *ps, PulsarPartition *pp, char *frame, size_t len, SourceMessage *out);
static TimestampTz message_time(const char *text);
static void take_marks(PulsarSource *ps);
static void poll_lag(PulsarSource *ps);
static bool poll_partition_lag(PulsarSource *ps, PulsarPartition *pp, TimestampTz now);
static void update_metrics(PulsarSource *ps);
static void push_restored_not_open(PulsarSource *ps, Jsonb *obj, JsonbParseState **state);

Source *
pulsar_source_open(PulsarSourceSpec *spec, Jsonb *positions, Jsonb *records_in,
				   JobSlot *slot, int subtask, int parallelism)
{
	PulsarSource *ps = palloc0(sizeof(PulsarSource));
	char		err[512];
	PulsarWsSecurity sec;

	ps->base.ops = &pulsar_ops;
	ps->base.slot = slot;
	ps->base.ntopics = 1;
	ps->base.topic_names = palloc(sizeof(char *));
	ps->base.topic_names[0] = psprintf("persistent://%s", spec->topic);
	ps->spec = spec;
	ps->subtask = subtask;
	ps->parallelism = parallelism;
	ps->restored = positions;
	ps->restored_records_in = records_in;

	sec = pulsar_security_of(spec->service_url, spec->options);
	ps->ws = pulsar_ws_new(&sec, err, sizeof(err));
	if (ps->ws == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not start a Pulsar client: %s", err),
				 sec.tls ? errhint("Check source.options.\"tls.ca.pem\" or \"tls.ca.location\".") : 0));
	ps->admin = pulsar_admin_new(spec->service_url, &sec, slot);
	ps->batch_ctx = AllocSetContextCreate(TopMemoryContext, "pulsar batch", ALLOCSET_SMALL_SIZES);
	ps->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (ps->epfd < 0)
		ereport(ERROR,
				(errcode_for_socket_access(),
				 errmsg("could not create an epoll set for Pulsar: %m")));
	refresh_partitions(ps);
	return &ps->base;
}

/*
 * Learn the topic's partitions and start a reader on each new one this
 * subtask owns.  A broker that does not answer is noted in ps->error and
 * asked again soon; the readers already open go on.  New partitions are
 * positioned all together or not at all, so that the topic is either
 * unpositioned (it starts per the spec) or every partition of it has a
 * position that checkpoints keep.
 */
static void
refresh_partitions(PulsarSource *ps)
{
	char		why[400] = "";
	char	   *path = psprintf("/admin/v2/persistent/%s/partitions", ps->spec->topic);
	int64		n;
	TimestampTz now = GetCurrentTimestamp();
	int			first_new = ps->nparts;
	/*
	 * The topic starts per the spec only at this subtask's first answer of
	 * the metadata, as for Kafka: after it, even with no partition of its
	 * own (parallelism above the partition count), every partition is new
	 * and read from its beginning, however late this subtask learns of it.
	 */
	bool		positioned = ps->topic_known || ps->nparts > 0 ||
		(ps->restored != NULL &&
		 getKeyJsonValueFromContainer(&ps->restored->root, ps->base.topic_names[0],
									  strlen(ps->base.topic_names[0]), NULL) != NULL);

	if (!pulsar_admin_get(ps->admin, path, why, sizeof(why)) || !pulsar_json_number(ps->admin->body, "partitions", &n) ||
		n < 0 || n > 100000)
	{
		if (why[0] == '\0')
			snprintf(why, sizeof(why), "GET %s: not an answer of Pulsar's admin API (no \"partitions\" count)", path);
		goto failed;
	}
	/* Not partitioned (0): the topic itself is partition 0. */
	ps->partitioned = n > 0;
	for (int32 p = 0; p < Max(n, 1); p++)
	{
		PulsarPartition *pp;
		const char *start;
		bool		found = false;

		if (!source_owns(0, p, ps->subtask, ps->parallelism))
			continue;
		for (int i = 0; i < ps->nparts && !found; i++)
			found = ps->parts[i].partition == p;
		if (found)
			continue;
		if (ps->parts == NULL)
			ps->parts = MemoryContextAllocZero(TopMemoryContext, sizeof(PulsarPartition) * 8);
		else if (ps->nparts % 8 == 0)
			ps->parts = repalloc(ps->parts, sizeof(PulsarPartition) * (ps->nparts + 8));
		pp = &ps->parts[ps->nparts];
		memset(pp, 0, sizeof(*pp));
		pp->partition = p;
		pp->reader_topic = MemoryContextStrdup(TopMemoryContext,
											   ps->partitioned ? psprintf("%s-partition-%d", ps->spec->topic, p)
											   : ps->spec->topic);
		pp->last.ledger = -1;
		pp->mark.ledger = -2;
		pp->checked.ledger = -1;
		pp->end_ledger = pp->reported_ledger = pp->fits_ledger = pp->asked_ledger =
			pp->closed_ledger = pp->lag_end = -1;
		pp->count = Max(restored_count(ps, p), 0);
		start = restored_string(ps, p);
		if (start == NULL && !positioned && ps->spec->start_latest)
		{
			PulsarMessageId last;

			/* Resolved now, so that a checkpoint before any message pins it. */
			if (!last_message_id(ps, pp, &last, why, sizeof(why)))
				goto failed;
			/* An entry of -1: nothing written yet, so everything to come is after "latest". */
			if (last.entry < 0 || !pulsar_message_id_encode(&last, pp->start, sizeof(pp->start)))
				strlcpy(pp->start, "earliest", sizeof(pp->start));
			ps->base.unpinned = true;
		}
		else
			/* A partition added after the topic was positioned, or a start from the beginning. */
			strlcpy(pp->start, start ? start : "earliest", sizeof(pp->start));
		/* Messages up to the start are behind the partition's position (wait_job, repeats). */
		if (strcmp(pp->start, "earliest") != 0 && !pulsar_message_id_decode(pp->start, &pp->last))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("the checkpoint's position of partition %d of Pulsar topic \"%s\" is not a message id: \"%s\"",
							p, ps->base.topic_names[0], pp->start),
					 errhint("Restore an earlier checkpoint with mailer.restore_job, or create the job again.")));
		pp->metrics = ps->nparts < JOB_SLOT_MAX_PARTITIONS ? ps->nparts : -1;
		if (pp->metrics >= 0)
			ps->base.slot->partitions[pp->metrics].records_in = pp->count;
		ps->nparts++;
	}
	ps->topic_known = true;
	for (int i = first_new; i < ps->nparts; i++)
		open_reader(ps, &ps->parts[i]);
	for (int i = 0; i < first_new; i++)
		check_retention(ps, &ps->parts[i]);
	ps->error[0] = '\0';
	ps->next_refresh = TimestampTzPlusMilliseconds(now, METADATA_INTERVAL_MS);
	poll_lag(ps);
	update_metrics(ps);
	/* The lag of every partition is the broker's, published (tests hold the worker here). */
	TEST_POINT("pulsar_lag_polled");
	if (ps->mark_pending)
		take_marks(ps);
	return;

failed:
	/* Nothing of this refresh: the next one tries all of it again. */
	for (int i = first_new; i < ps->nparts; i++)
		pfree(ps->parts[i].reader_topic);
	ps->nparts = first_new;
	/*
	 * An outage shows as lag unknown, not as the last lag seen (poll_lag);
	 * the first refresh after it polls every partition's lag again, past the
	 * budget and whatever internalStats counted, as at the job's start.
	 */
	for (int i = 0; i < ps->nparts; i++)
	{
		ps->parts[i].lag_end = -1;
		ps->parts[i].lag_polled = false;
		ps->parts[i].counted_at = 0;
		ps->parts[i].lag_retry_at = 0;
		ps->parts[i].lag_retry_ms = 0;
	}
	snprintf(ps->error, sizeof(ps->error), "waiting for Pulsar: topic \"%s\": %s",
			 ps->base.topic_names[0], why);
	ps->next_refresh = TimestampTzPlusMilliseconds(now, METADATA_RETRY_MS);
}

static bool
last_message_id(PulsarSource *ps, PulsarPartition *pp, PulsarMessageId *id, char *why, size_t whysize)
{
	char	   *path = psprintf("/admin/v2/persistent/%s/lastMessageId", pp->reader_topic);
	int64		ledger,
				entry,
				batch_index;
	bool		ok = pulsar_admin_get(ps->admin, path, why, whysize);

	if (ok && (!pulsar_json_number(ps->admin->body, "ledgerId", &ledger) || !pulsar_json_number(ps->admin->body, "entryId", &entry)))
	{
		snprintf(why, whysize, "GET %s: not an answer of Pulsar's admin API (no \"ledgerId\" and \"entryId\")", path);
		ok = false;
	}
	pfree(path);
	if (!ok)
		return false;
	id->ledger = ledger;
	id->entry = entry;
	id->partition = ps->partitioned ? pp->partition : -1;
	/*
	 * The last message of a batched entry (any Java, Go or C++ producer's
	 * default): a poll may hand out part of an entry, so the target of
	 * wait_job, and a "latest" start, is that message, not the entry.
	 */
	if (!pulsar_json_number(ps->admin->body, "batchIndex", &batch_index) || batch_index < -1 || batch_index > PG_INT32_MAX)
		batch_index = -1;
	id->batch_index = (int32) batch_index;
	return true;
}

/* A partition's value in a {"topic": {"partition": value}} object of a checkpoint, or NULL. */
static JsonbValue *
restored_value(PulsarSource *ps, Jsonb *obj, int32 partition)
{
	JsonbValue *topic;
	char		key[16];

	if (obj == NULL)
		return NULL;
	topic = getKeyJsonValueFromContainer(&obj->root, ps->base.topic_names[0],
										 strlen(ps->base.topic_names[0]), NULL);
	if (topic == NULL || topic->type != jbvBinary)
		return NULL;
	snprintf(key, sizeof(key), "%d", partition);
	return getKeyJsonValueFromContainer(topic->val.binary.data, key, strlen(key), NULL);
}

/* The checkpoint's position of a partition (a string), or NULL. */
static const char *
restored_string(PulsarSource *ps, int32 partition)
{
	JsonbValue *v = restored_value(ps, ps->restored, partition);

	if (v == NULL)
		return NULL;
	if (v->type != jbvString || v->val.string.len >= ID_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the checkpoint's position of partition %d of Pulsar topic \"%s\" is not a message id",
						partition, ps->base.topic_names[0]),
				 errhint("Restore an earlier checkpoint with mailer.restore_job, or create the job again.")));
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* The checkpoint's records_in of a partition, or -1. */
static int64
restored_count(PulsarSource *ps, int32 partition)
{
	JsonbValue *v = restored_value(ps, ps->restored_records_in, partition);

	if (v == NULL || v->type != jbvNumeric)
		return -1;
	return DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v->val.numeric)));
}

/*
 * The next ledger an internalStats answer's "ledgers" list (ascending, the
 * current ledger last) names at or after *p, before end: its id and
 * listed entry count (the current ledger's is not its length yet); 1 with
 * *p past it, 0 at the list's end, -1 when the answer does not say.
 */
static int
stats_next_ledger(const char **p, const char *end, int64 *id, int64 *entries)
{
	if ((*p = strstr(*p, "\"ledgerId\"")) == NULL || *p >= end)
		return 0;
	if (!pulsar_json_number(*p, "ledgerId", id) || !pulsar_json_number(*p, "entries", entries))
		return -1;
	*p += 10;
	return 1;
}

/* The bounds of an internalStats answer's "ledgers" list; false when it has none. */
static bool
stats_ledger_list(const char *body, const char **start, const char **end)
{
	*start = strstr(body, "\"ledgers\"");
	*end = *start ? strchr(*start, ']') : NULL;
	return *end != NULL;
}

/*
 * What an internalStats answer's "ledgers" says of ledger: 1 listed
 * (*entries; -1 for the current ledger, still growing), 0 not listed
 * (deleted, or never the topic's), -1 when the answer does not say.
 * *oldest and *newest: the first and the last listed, -1 when none is.
 */
static int
stats_ledger(const char *body, int64 ledger, int64 *entries, int64 *oldest, int64 *newest)
{
	const char *p,
			   *end;
	int64		id,
				n;
	int			found = 0,
				next;

	*oldest = *newest = -1;
	if (!stats_ledger_list(body, &p, &end))
		return -1;
	while ((next = stats_next_ledger(&p, end, &id, &n)) == 1)
	{
		if (*oldest < 0)
			*oldest = id;
		*newest = id;
		if (id == ledger)
		{
			*entries = n;
			found = 1;
		}
	}
	if (next < 0)
		return -1;
	if (found && *newest == ledger)
		*entries = -1;
	return found;
}

/* GET pp's internalStats into ps->admin->body, with its ledger list; false with why. */
static bool
get_stats(PulsarSource *ps, PulsarPartition *pp, int64 ledger, int64 *entries, int64 *oldest,
		  int64 *newest, int *found, char *why, size_t whysize)
{
	char	   *path = psprintf("/admin/v2/persistent/%s/internalStats", pp->reader_topic);
	bool		ok = pulsar_admin_get(ps->admin, path, why, whysize);

	if (ok && (*found = stats_ledger(ps->admin->body, ledger, entries, oldest, newest)) < 0)
	{
		snprintf(why, whysize, "GET %s: not an answer of Pulsar's admin API (no \"ledgers\" list)", path);
		ok = false;
	}
	pfree(path);
	return ok;
}

/*
 * Report that the ledger of from, the job's position, was deleted before
 * the reader read on (up to ledger upto): a WARNING and the job's last
 * error, once per ledger, and the job goes on, as it does for Kafka.  When
 * the ledger's length was noted while it was listed, the entries after the
 * position are known, and counted in offsets_skipped (a lower bound: a
 * batched entry holds several messages, and ledgers of the topic between
 * it and upto, deleted too, were never seen); none after it is no loss.
 * Else how many is not known, and the message says so.
 */
static void
report_deleted(PulsarSource *ps, PulsarPartition *pp, PulsarMessageId from, int64 upto)
{
	bool		known = pp->end_ledger == from.ledger && pp->end_entries >= 0;
	int64		lost = known ? pp->end_entries - 1 - from.entry : -1;
	char	   *msg;

	if (known && lost <= 0)
		return;					/* read to its end */
	pp->reported_ledger = from.ledger;
	msg = psprintf("partition %d of Pulsar topic \"%s\": ledger " INT64_FORMAT
				   " of the job's position " INT64_FORMAT ":" INT64_FORMAT
				   " was deleted (retention) before the job read on; messages after it, up to ledger "
				   INT64_FORMAT ", %s; it goes on from the oldest message left",
				   pp->partition, ps->base.topic_names[0], from.ledger, from.ledger, from.entry, upto,
				   known ? psprintf("were deleted unread: at least " INT64_FORMAT
									" entries (counted in offsets_skipped; a batched entry holds several messages)", lost)
				   : "may have been deleted unread: how many is not known (the ledger was deleted before its length was learnt)");
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("%s", msg),
			 errhint("Give the namespace a retention longer than a job may stop or fall behind for.")));
	job_slot_set_error(ps->base.slot, msg);
	if (known && pp->metrics >= 0)
		ps->base.slot->partitions[pp->metrics].offsets_skipped += lost;
}

/*
 * The job's position of pp is not one of the partition's: its ledger is
 * past the partition's end.  Ledger ids are those of the BookKeeper
 * cluster behind the service URL, so this is another cluster (rebuilt, or
 * a failover), and every message would be taken for one already handed
 * out, for ever: the job fails, as for a Kafka position past the log's end.
 */
static void
position_not_in_topic(PulsarSource *ps, PulsarPartition *pp, const char *end)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("partition %d of Pulsar topic \"%s\" ends at %s, before the job's position "
					INT64_FORMAT ":" INT64_FORMAT,
					pp->partition, ps->base.topic_names[0], end, pp->last.ledger, pp->last.entry),
			 errdetail("Ledger ids are those of the cluster behind the service URL: it was rebuilt, or is "
					   "another cluster, so the job's positions no longer fit the topic, and every message "
					   "would be taken for one already read. To go on, restore a checkpoint whose positions "
					   "the topic holds with mailer.restore_job, or drop the job and create it again to read "
					   "the topic anew."),
			 errhint("Retrying cannot help: the job stays failed until one of these.")));
}

/*
 * The reader's first message in a new ledger, id: the rest of the last
 * one may have been deleted under it.  A reader holds nothing back: the
 * broker deletes a ledger whatever a reader has read of it, and the
 * reader, which cannot read on there, goes on from the next ledger without
 * a word.  Checked here, before the message is handed out, so that no
 * checkpoint holds a position past the switch unchecked: a stop, a kill or
 * a server restart right after the switch cannot lose the report (the next
 * run meets the same switch).  The old ledger still listed was read to its
 * end; deleted, it is reported.  The new ledger's length is noted when it
 * is closed, should it be deleted under the reader in turn.  False, with
 * why, when the broker could not be asked: the message waits.  The same
 * covers a restart after a deleted position: the first message comes from
 * a later ledger.
 */
static bool
check_switch(PulsarSource *ps, PulsarPartition *pp, const PulsarMessageId *id, char *why, size_t whysize)
{
	int64		entries = -1,
				oldest,
				newest;
	int			found;

	if (pp->last.ledger == pp->reported_ledger)
		return true;
	if (!get_stats(ps, pp, pp->last.ledger, &entries, &oldest, &newest, &found, why, whysize))
		return false;
	if (found == 0)
		report_deleted(ps, pp, pp->last, id->ledger);
	note_length(ps, pp, id->ledger);
	return true;
}

/*
 * Note the length of ledger, the reader's now, from the internalStats
 * answer in ps->admin->body, when it is closed: should it be deleted under
 * the reader, the loss is then known (report_deleted).
 */
static void
note_length(PulsarSource *ps, PulsarPartition *pp, int64 ledger)
{
	int64		entries = -1,
				oldest,
				newest;

	pp->asked_ledger = ledger;
	if (stats_ledger(ps->admin->body, ledger, &entries, &oldest, &newest) == 1 && entries >= 0)
	{
		pp->end_ledger = ledger;
		pp->end_entries = entries;
	}
}

/*
 * A reader that handed out nothing since the last metadata refresh
 * (stalled: once per position) has its ledger looked up in internalStats,
 * at the refresh: deleted, it is reported now, not when a message comes
 * (check_switch then says nothing more of it); past the partition's newest
 * ledger, the position is not the topic's, and the job fails.  Still
 * listed, a caught-up reader's ledger's length is its last confirmed
 * entry, noted so that the ledger deleted after is no loss.
 */
static void
check_retention(PulsarSource *ps, PulsarPartition *pp)
{
	bool		stalled = pp->count == pp->count_at_refresh && pp->last.ledger >= 0 &&
		(pp->checked.ledger != pp->last.ledger || pp->checked.entry != pp->last.entry ||
		 pp->checked.batch_index != pp->last.batch_index);
	PulsarMessageId from = pp->last;
	char		why[400];
	int64		entries = -1,
				oldest = -1,
				newest = -1;
	int			found;

	pp->count_at_refresh = pp->count;
	if (!stalled || pp->held != NULL || from.ledger == pp->reported_ledger)
		return;
	if (!get_stats(ps, pp, from.ledger, &entries, &oldest, &newest, &found, why, sizeof(why)))
		return;					/* asked again at the next refresh */
	pp->checked = pp->last;
	if (found == 1)
	{
		/* hand_out forgets the length once the ledger grows. */
		const char *lac = strstr(ps->admin->body, "\"lastConfirmedEntry\":\"");	/* 22 bytes */
		int64		lac_ledger,
					lac_entry;

		pp->fits_ledger = from.ledger;
		if (entries < 0 && lac != NULL &&
			sscanf(lac + 22, INT64_FORMAT ":" INT64_FORMAT, &lac_ledger, &lac_entry) == 2 &&
			lac_ledger == from.ledger && lac_entry == from.entry)
			entries = lac_entry + 1;
		pp->end_ledger = entries >= 0 ? from.ledger : -1;
		pp->end_entries = entries;
		return;
	}
	if (newest >= 0 && from.ledger > newest)
		position_not_in_topic(ps, pp, psprintf("ledger " INT64_FORMAT " (its newest)", newest));
	if (oldest >= 0 && from.ledger < oldest)
		report_deleted(ps, pp, from, oldest);
}

/*
 * Start the partition's reader just after the last message handed out
 * (or at its start).  Whether that position is still there is learnt from
 * where the reader goes on (check_switch), not asked before each open:
 * a reader reopened every second through an outage would ask the broker's
 * heaviest admin call as often.
 */
static void
open_reader(PulsarSource *ps, PulsarPartition *pp)
{
	char		err[512];
	char		from[ID_LEN];

	if (!pp->handed)
		strlcpy(from, pp->start, sizeof(from));
	else if (!pulsar_message_id_encode(&pp->last, from, sizeof(from)))
		elog(ERROR, "could not encode a Pulsar message id");
	pp->conn = pulsar_ws_reader(ps->ws, ps->spec->service_url, pp->reader_topic, from,
								RECEIVER_QUEUE, err, sizeof(err));
	if (pp->conn == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not start a Pulsar reader of \"%s\": %s", pp->reader_topic, err)));
}

static int
pulsar_poll(Source *src, SourceMessage *out, int max)
{
	PulsarSource *ps = (PulsarSource *) src;
	TimestampTz now = GetCurrentTimestamp();
	int			n = 0;

	for (int i = 0; i < ps->nframes; i++)
		pulsar_ws_frame_free(ps->frames[i]);
	ps->nframes = 0;
	MemoryContextReset(ps->batch_ctx);
	if (ps->capacity < max)
	{
		ps->frames = ps->frames ? repalloc(ps->frames, sizeof(char *) * max)
			: MemoryContextAlloc(TopMemoryContext, sizeof(char *) * max);
		ps->props = ps->props ? repalloc(ps->props, sizeof(MessageProperties) * max)
			: MemoryContextAlloc(TopMemoryContext, sizeof(MessageProperties) * max);
		ps->capacity = max;
	}
	ps->admin->slow = false;
	if (now >= ps->next_refresh)
		refresh_partitions(ps);
	if (pulsar_ws_service(ps->ws, 0) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("libwebsockets failed while reading Pulsar")));

	for (int k = 0; k < ps->nparts && n < max; k++)
	{
		PulsarPartition *pp = &ps->parts[(ps->next_part + k) % ps->nparts];
		char	   *frame;
		size_t		len;
		const char *why;

		if (pp->conn == NULL)
		{
			if (now >= pp->reopen_at)
				open_reader(ps, pp);
			continue;
		}
		/* A held message first: nothing of the partition goes before it. */
		if (pp->held != NULL)
		{
			char	   *held = pp->held;

			if (now < pp->held_retry_at)
				continue;
			pp->held = NULL;
			if (hand_out(ps, pp, held, pp->held_len, &out[n]))
				n++;
		}
		while (n < max && pp->held == NULL && (frame = pulsar_ws_take(pp->conn, &len)) != NULL)
			if (hand_out(ps, pp, frame, len, &out[n]))
				n++;
		if (pulsar_ws_state(pp->conn, NULL) == PULSAR_WS_OPEN)
			pp->reopen_ms = 0;
		/* Closed, and every frame it received handed out: open again after the last. */
		if (n < max && pp->held == NULL && pulsar_ws_state(pp->conn, &why) == PULSAR_WS_CLOSED)
		{
			snprintf(pp->why, sizeof(pp->why), "waiting for Pulsar: reader of \"%s\": %s",
					 pp->reader_topic, why ? why : "closed");
			pulsar_ws_close(pp->conn);
			pp->conn = NULL;
			/*
			 * A reader closes when its topic is unloaded (a bundle move, a
			 * broker restart), which closes the ledger it reads: its
			 * length is listed now, and may be deleted before the reader's
			 * next message (retention may trim at once), so a
			 * caught-up reader would be reported at the switch.  Asked
			 * once per ledger, not per reopen, and only by a reader that
			 * read: an outage's reopens cost the broker nothing more.
			 */
			if (pp->handed && pp->end_ledger != pp->last.ledger && pp->closed_ledger != pp->last.ledger)
			{
				int64		entries,
							oldest,
							newest;
				int			found;
				char		err[400];

				pp->closed_ledger = pp->last.ledger;
				if (get_stats(ps, pp, pp->last.ledger, &entries, &oldest, &newest, &found, err, sizeof(err)))
					note_length(ps, pp, pp->last.ledger);
			}
			/* A broker that keeps refusing is asked less often, down to every REOPEN_MAX_MS. */
			pp->reopen_ms = pp->reopen_ms == 0 ? REOPEN_MS : Min(pp->reopen_ms * 2, REOPEN_MAX_MS);
			pp->reopen_at = TimestampTzPlusMilliseconds(now, pp->reopen_ms);
		}
	}
	if (ps->nparts > 0)
		ps->next_part = (ps->next_part + 1) % ps->nparts;
	/* The acknowledgements go out now, not after the wait. */
	if (n > 0)
		(void) pulsar_ws_service(ps->ws, 0);
	update_metrics(ps);
	/* What the source waits on: the metadata, else a reader that is not open. */
	ps->base.error = ps->error[0] ? ps->error : NULL;
	for (int i = 0; i < ps->nparts && ps->base.error == NULL; i++)
	{
		PulsarPartition *pp = &ps->parts[i];

		if ((pp->held != NULL || pp->conn == NULL || pulsar_ws_state(pp->conn, NULL) == PULSAR_WS_CLOSED) &&
			pp->why[0])
			ps->base.error = pp->why;
		else if (pulsar_ws_state(pp->conn, NULL) == PULSAR_WS_OPEN)
			pp->why[0] = '\0';
	}
	return n;
}

/*
 * Parse one frame of pp's reader into out; false (the frame freed) when it
 * repeats a message already handed out.  A frame without a message id is
 * the broker's fault: the job fails, and goes on from its checkpoint.  A
 * message this source cannot read (a Pulsar message may have any number
 * of properties, and a NUL in its key or a property, which the parser
 * does not hold) is handed out all the same, unreadable: its record fails
 * at decode, a dead letter naming its message id, and the job reads on,
 * rather than meet it again at every restart.
 */
static bool
hand_out(PulsarSource *ps, PulsarPartition *pp, char *frame, size_t len, SourceMessage *out)
{
	PulsarMessage msg_parsed;
	PulsarMessage *msg = &msg_parsed;
	MessageProperties *props = &ps->props[ps->nframes];
	PulsarMessageId id;
	char		err[256];
	char	   *ack;
	size_t		ack_len;

	bool		parsed = pulsar_parse_message(frame, len, msg, err, sizeof(err));
	char		why[400];
	int64		entries,
				oldest,
				newest;
	int			found;

	if (msg->message_id == NULL || !pulsar_message_id_decode(msg->message_id, &id))
	{
		pulsar_ws_frame_free(frame);
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("the Pulsar reader of \"%s\" received a frame that is not a message: %s",
						pp->reader_topic, parsed ? "its messageId is not one" : err),
				 errhint("The job starts again from its last checkpoint.")));
	}
	/*
	 * A reader starts after last, so a message of an earlier ledger says
	 * that last is not a position of this partition (position_not_in_topic)
	 * when the broker's last message is before it too; asked once per
	 * ledger of last, and again at the next such message if the broker did
	 * not answer.
	 */
	if (pp->last.ledger >= 0 && id.ledger < pp->last.ledger && pp->fits_ledger != pp->last.ledger)
	{
		PulsarMessageId end;

		if (last_message_id(ps, pp, &end, why, sizeof(why)))
		{
			if (end.ledger < pp->last.ledger)
			{
				pulsar_ws_frame_free(frame);
				position_not_in_topic(ps, pp, psprintf("message " INT64_FORMAT ":" INT64_FORMAT,
													   end.ledger, end.entry));
			}
			pp->fits_ledger = pp->last.ledger;
		}
	}
	/* A new ledger: checked before its first message is handed out (check_switch). */
	if (pp->last.ledger >= 0 && id.ledger > pp->last.ledger && !check_switch(ps, pp, &id, why, sizeof(why)))
	{
		snprintf(pp->why, sizeof(pp->why),
				 "waiting for Pulsar: reader of \"%s\": its switch to ledger " INT64_FORMAT
				 " is checked for deleted messages before it reads on: %s",
				 pp->reader_topic, id.ledger, why);
		pp->held = frame;
		pp->held_len = len;
		pp->held_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), METADATA_RETRY_MS);
		return false;
	}
	/*
	 * The first ledger a run reads in (no switch to it seen): its length,
	 * once, for the same reason; a broker that does not answer holds
	 * nothing back, the loss is then reported without its size.
	 */
	else if (id.ledger != pp->asked_ledger && id.ledger != pp->end_ledger &&
			 (pp->last.ledger < 0 || id.ledger == pp->last.ledger))
	{
		pp->asked_ledger = id.ledger;
		if (get_stats(ps, pp, id.ledger, &entries, &oldest, &newest, &found, why, sizeof(why)))
			note_length(ps, pp, id.ledger);
	}
	/* Flow control only: a reader's acknowledgement moves no position. */
	if ((ack = pulsar_frame_ack(msg->message_id, &ack_len)) != NULL)
	{
		(void) pulsar_ws_send(pp->conn, ack, ack_len);
		free(ack);
	}
	if (pp->last.ledger >= 0 &&
		(id.ledger < pp->last.ledger ||
		 (id.ledger == pp->last.ledger && (id.entry < pp->last.entry ||
										   (id.entry == pp->last.entry && id.batch_index <= pp->last.batch_index)))))
	{
		/* Already handed out: never twice. */
		pulsar_ws_frame_free(frame);
		return false;
	}
	if (id.ledger == pp->end_ledger && id.entry >= pp->end_entries)
		pp->end_ledger = -1;		/* it grew: its length is not known any more */
	pp->last = id;
	pp->handed = true;
	ps->frames[ps->nframes++] = frame;
	out->unreadable = NULL;
	if (!parsed)
	{
		out->unreadable = MemoryContextStrdup(ps->batch_ctx,
											  psprintf("the Pulsar message %s (ledger " INT64_FORMAT ", entry " INT64_FORMAT
													   ", batch index %d) of \"%s\" could not be read: %s",
													   msg->message_id, id.ledger, id.entry, id.batch_index,
													   pp->reader_topic, err));
		msg->key = NULL;
		msg->payload = NULL;
		msg->payload_len = 0;
		msg->nproperties = 0;
		msg->event_time[0] = msg->publish_time[0] = '\0';
	}
	/* Only the pointers: a message's parse is 1 kB, a batch holds thousands. */
	props->n = msg->nproperties;
	if (props->n > 0)
	{
		props->names = MemoryContextAlloc(ps->batch_ctx, sizeof(char *) * props->n);
		props->values = MemoryContextAlloc(ps->batch_ctx, sizeof(char *) * props->n);
		memcpy(props->names, msg->property_names, sizeof(char *) * props->n);
		memcpy(props->values, msg->property_values, sizeof(char *) * props->n);
	}
	out->key = msg->key;
	out->key_len = msg->key ? (int) strlen(msg->key) : 0;
	out->value = (const char *) msg->payload;
	out->value_len = (int) msg->payload_len;
	out->topic = 0;
	out->partition = pp->partition;
	out->offset = pp->count++;
	out->timestamp = message_time(msg->event_time[0] ? msg->event_time : msg->publish_time);
	out->opaque = props;
	if (pp->metrics >= 0)
		ps->base.slot->partitions[pp->metrics].records_in++;
	return true;
}

/*
 * A time the broker sends: ISO 8601 with an offset, or milliseconds since
 * the epoch; DT_NOBEGIN when absent or not understood, as a Kafka message
 * without a timestamp.
 */
static TimestampTz
message_time(const char *text)
{
	TimestampTz t;
	int64		ms;
	char	   *end;

	if (text[0] == '\0')
		return DT_NOBEGIN;
	if (iso_time_parse(text, strlen(text), &t))
		return t;
	errno = 0;
	ms = strtoll(text, &end, 10);
	return *end == '\0' && errno == 0 ? kafka_timestamp(ms) : DT_NOBEGIN;
}

/* The message's properties as a jsonb object, or NULL when it has none. */
static Jsonb *
pulsar_headers(Source *src, SourceMessage *m)
{
	MessageProperties *props = (MessageProperties *) m->opaque;
	JsonbParseState *state = NULL;

	if (props->n == 0)
		return NULL;
	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int i = 0; i < props->n; i++)
	{
		const char *name = props->names[i];
		const char *value = props->values[i];
		JsonbValue	v;

		/* As for Kafka's headers: a bad name fails the record, a bad value shows as null. */
		if (!pg_verify_mbstr(GetDatabaseEncoding(), name, strlen(name), true))
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("a property name is not valid text in the database encoding"),
					 errdetail("Property %d of the message.", i + 1)));
		jsonb_push_key(&state, name);
		if (value != NULL && pg_verify_mbstr(GetDatabaseEncoding(), value, strlen(value), true))
			jsonb_string_value(&v, value, strlen(value));
		else
			v.type = jbvNull;
		pushJsonbValue(&state, WJB_VALUE, &v);
	}
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

/*
 * Bring the epoll set in step with the sockets libwebsockets wants watched,
 * and say how long the worker may wait.
 */
static long
pulsar_wait_ms(Source *src)
{
	PulsarSource *ps = (PulsarSource *) src;
	struct pollfd fds[MAX_FDS];
	int			max_wait;
	int			n = pulsar_ws_poll_set(ps->ws, fds, MAX_FDS, &max_wait);
	TimestampTz now = GetCurrentTimestamp();
	long		wait = Min(max_wait, TimestampDifferenceMilliseconds(now, ps->next_refresh));

	for (int i = 0; i < ps->nregistered; i++)
	{
		bool		kept = false;

		for (int j = 0; j < n && !kept; j++)
			kept = fds[j].fd == ps->registered[i];
		/* A socket closed since left the set by itself: an error here is no matter. */
		if (!kept)
			(void) epoll_ctl(ps->epfd, EPOLL_CTL_DEL, ps->registered[i], NULL);
	}
	for (int j = 0; j < n; j++)
	{
		struct epoll_event ev = {0};

		ev.events = ((fds[j].events & POLLIN) ? EPOLLIN : 0) | ((fds[j].events & POLLOUT) ? EPOLLOUT : 0);
		ev.data.fd = fds[j].fd;
		if (epoll_ctl(ps->epfd, EPOLL_CTL_MOD, fds[j].fd, &ev) != 0 &&
			epoll_ctl(ps->epfd, EPOLL_CTL_ADD, fds[j].fd, &ev) != 0)
			wait = 0;			/* cannot be watched: look again at once */
		ps->registered[j] = fds[j].fd;
	}
	ps->nregistered = n;
	for (int i = 0; i < ps->nparts; i++)
	{
		if (ps->parts[i].conn == NULL)
			wait = Min(wait, TimestampDifferenceMilliseconds(now, ps->parts[i].reopen_at));
		if (ps->parts[i].held != NULL)
			wait = Min(wait, TimestampDifferenceMilliseconds(now, ps->parts[i].held_retry_at));
	}
	return Max(wait, 0);
}

static pgsocket
pulsar_event_fd(Source *src)
{
	return ((PulsarSource *) src)->epfd;
}

/* {"persistent://t/ns/topic": {"partition": "last message id" | "earliest" | start id}}. */
static Jsonb *
pulsar_positions(Source *src)
{
	PulsarSource *ps = (PulsarSource *) src;
	JsonbParseState *state = NULL;
	JsonbValue *restored = NULL;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	if (ps->restored != NULL)
		restored = getKeyJsonValueFromContainer(&ps->restored->root, ps->base.topic_names[0],
												strlen(ps->base.topic_names[0]), NULL);
	/* A topic never positioned is left out, so that the next start still starts it per the spec. */
	if (ps->nparts > 0 || (restored != NULL && restored->type == jbvBinary))
	{
		jsonb_push_key(&state, ps->base.topic_names[0]);
		pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
		for (int i = 0; i < ps->nparts; i++)
		{
			PulsarPartition *pp = &ps->parts[i];
			char		id[ID_LEN];
			JsonbValue	v;

			if (!pp->handed)
				strlcpy(id, pp->start, sizeof(id));
			else if (!pulsar_message_id_encode(&pp->last, id, sizeof(id)))
				elog(ERROR, "could not encode a Pulsar message id");
			jsonb_push_key(&state, psprintf("%d", pp->partition));
			/* The value points to its text until the object is built: a copy per partition. */
			pushJsonbValue(&state, WJB_VALUE, jsonb_string_value(&v, pstrdup(id), strlen(id)));
		}
		/* An owned partition restored and not open yet (the broker was away) keeps its position. */
		push_restored_not_open(ps, ps->restored, &state);
		pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	}
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

/*
 * Push, into the topic's object being built, the values obj (restored
 * positions or records_in) holds for partitions this subtask owns and has
 * not open: the broker was away since the start, and what the checkpoint
 * had must survive the next one.
 */
static void
push_restored_not_open(PulsarSource *ps, Jsonb *obj, JsonbParseState **state)
{
	JsonbValue *topic = NULL;
	JsonbIterator *it;
	JsonbValue	k,
				v;
	JsonbIteratorToken tok;

	if (obj != NULL)
		topic = getKeyJsonValueFromContainer(&obj->root, ps->base.topic_names[0],
											 strlen(ps->base.topic_names[0]), NULL);
	if (topic == NULL || topic->type != jbvBinary)
		return;
	it = JsonbIteratorInit(topic->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		char	   *key;
		int32		p;
		bool		open = false;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(k.val.string.val, k.val.string.len);
		(void) JsonbIteratorNext(&it, &v, true);
		p = atoi(key);
		for (int i = 0; i < ps->nparts && !open; i++)
			open = ps->parts[i].partition == p;
		if (open || !source_owns(0, p, ps->subtask, ps->parallelism))
			continue;
		jsonb_push_key(state, key);
		pushJsonbValue(state, WJB_VALUE, &v);
	}
}

/*
 * {"topic": {"partition": messages handed out}}: the offsets go on after a
 * restart, also through a run that never reached the broker.
 */
static Jsonb *
pulsar_records_in(Source *src)
{
	PulsarSource *ps = (PulsarSource *) src;
	JsonbParseState *state = NULL;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	jsonb_push_key(&state, ps->base.topic_names[0]);
	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int i = 0; i < ps->nparts; i++)
	{
		JsonbValue	v;

		jsonb_push_key(&state, psprintf("%d", ps->parts[i].partition));
		v.type = jbvNumeric;
		v.val.numeric = int64_to_numeric(ps->parts[i].count);
		pushJsonbValue(&state, WJB_VALUE, &v);
	}
	push_restored_not_open(ps, ps->restored_records_in, &state);
	pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

static void
pulsar_committed(Source *src)
{
	/* The positions a "latest" start took are in the checkpoint now. */
	src->unpinned = false;
}

static bool
pulsar_finished(Source *src)
{
	return false;				/* a topic has no end */
}

static int
pulsar_partition_count(Source *src)
{
	return ((PulsarSource *) src)->nparts;
}

static void
pulsar_partition_at(Source *src, int i, int *topic, int32 *partition)
{
	*topic = 0;
	*partition = ((PulsarSource *) src)->parts[i].partition;
}

/* Note the input available now: partitions added since count too, so refresh first. */
static void
pulsar_mark_end(Source *src)
{
	PulsarSource *ps = (PulsarSource *) src;

	ps->mark_pending = true;
	ps->admin->slow = false;
	refresh_partitions(ps);
}

/*
 * Each partition's last message id now; until the broker answers, no mark,
 * and why goes to last_error, where wait_job's timeout points (the
 * metadata's own failure is there already, as ps->error).
 */
static void
take_marks(PulsarSource *ps)
{
	char		why[400];

	if (ps->error[0] != '\0')
		return;
	for (int i = 0; i < ps->nparts; i++)
	{
		PulsarPartition *pp = &ps->parts[i];

		if (!last_message_id(ps, pp, &pp->mark, why, sizeof(why)))
		{
			char		msg[600];

			snprintf(msg, sizeof(msg), "waiting for Pulsar: topic \"%s\": wait_job's mark of partition %d: %s",
					 ps->base.topic_names[0], pp->partition, why);
			job_slot_set_error(ps->base.slot, msg);
			return;				/* asked again at the next refresh */
		}
		/* A position past the partition's last message would make wait_job's target one already reached. */
		if (pp->mark.entry >= 0 && pp->last.ledger > pp->mark.ledger)
			position_not_in_topic(ps, pp, psprintf("message " INT64_FORMAT ":" INT64_FORMAT,
												   pp->mark.ledger, pp->mark.entry));
	}
	ps->mark_pending = false;
}

/*
 * Every partition has handed out its mark's message, or had none (entry
 * -1).  Within a batched entry, the batch index counts: a poll may stop
 * mid-entry (its max, or the bytes a read brought).  A mark without one
 * (-1, an entry not batched) is reached at its entry.
 */
static bool
pulsar_reached_end(Source *src)
{
	PulsarSource *ps = (PulsarSource *) src;

	if (ps->mark_pending)
		return false;
	for (int i = 0; i < ps->nparts; i++)
	{
		PulsarPartition *pp = &ps->parts[i];

		if (pp->mark.ledger == -2 || pp->mark.entry < 0)
			continue;
		if (pp->last.ledger < pp->mark.ledger ||
			(pp->last.ledger == pp->mark.ledger &&
			 (pp->last.entry < pp->mark.entry ||
			  (pp->last.entry == pp->mark.entry && pp->last.batch_index < pp->mark.batch_index))))
			return false;
	}
	return true;
}

/*
 * Poll the lag of the partitions, from where the last refresh stopped, for
 * at most LAG_BUDGET_MS of the worker's time (at least one partition): a
 * topic of many partitions has each one's lag a few refreshes old rather
 * than a refresh that holds up its records (docs/ARCHITECTURE.md, "Source
 * poll").  A partition never polled is polled past the budget, so that a
 * job's first metrics show every lag, as a Kafka source's do.
 *
 * Each call is bounded by LAG_CALL_MS (a first one, which may load the
 * topic on the broker, by BROKER_TIMEOUT_MS), and its timeout does not make the
 * admin client's other calls of the refresh (wait_job's marks, retention
 * checks) fail: a partition whose call fails is not asked again for
 * lag_retry_ms, doubled while it fails.  A failure that spends the budget
 * ends the round, never polled partitions included, and every partition
 * not polled in it shows its lag unknown: a broker that hangs shows as
 * unknown lags within one refresh, not as the last ones seen.
 */
static void
poll_lag(PulsarSource *ps)
{
	TimestampTz start = GetCurrentTimestamp();
	int			first = ps->lag_next;
	bool		spent = false,
				cut = false;

	ps->lag_round++;
	for (int k = 0; k < ps->nparts && !cut; k++)
	{
		PulsarPartition *pp = &ps->parts[(first + k) % ps->nparts];
		bool		ok;

		if (spent && pp->lag_polled)
			continue;
		if (!spent)
			ps->lag_next = (first + k + 1) % ps->nparts;
		if (pp->lag_retry_at != 0 && start < pp->lag_retry_at)
		{
			pp->lag_end = -1;
			continue;
		}
		/* A first poll may load the topic on the broker: the admin GET's bound. */
		ps->admin->timeout_ms = pp->lag_polled ? LAG_CALL_MS : BROKER_TIMEOUT_MS;
		ok = poll_partition_lag(ps, pp, start);
		pp->lag_polled = true;
		pp->lag_round = ps->lag_round;
		spent = spent || TimestampDifferenceExceeds(start, GetCurrentTimestamp(), LAG_BUDGET_MS);
		if (ok)
		{
			pp->lag_retry_at = 0;
			pp->lag_retry_ms = 0;
			continue;
		}
		pp->lag_end = -1;
		pp->lag_retry_ms = pp->lag_retry_ms == 0 ? LAG_RETRY_MS : Min(pp->lag_retry_ms * 2, LAG_RETRY_MAX_MS);
		pp->lag_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), pp->lag_retry_ms);
		cut = spent;
	}
	ps->admin->timeout_ms = 0;
	for (int i = 0; cut && i < ps->nparts; i++)
		if (ps->parts[i].lag_round != ps->lag_round)
			ps->parts[i].lag_end = -1;
}

static bool
same_message(const PulsarMessageId *a, const PulsarMessageId *b)
{
	return a->ledger == b->ledger && a->entry == b->entry && a->batch_index == b->batch_index;
}

/* a comes before b in the partition (a batch index of -1: the entry's only message). */
static bool
message_before(const PulsarMessageId *a, const PulsarMessageId *b)
{
	if (a->ledger != b->ledger)
		return a->ledger < b->ledger;
	if (a->entry != b->entry)
		return a->entry < b->entry;
	return a->batch_index < b->batch_index;
}

/* pp->lag_end set to pp->count + behind, unknown if that is not an int64. */
static void
set_lag_end(PulsarPartition *pp, int64 behind)
{
	if (behind < 0 || pg_add_s64_overflow(pp->count, behind, &pp->lag_end))
		pp->lag_end = -1;
	pp->lag_unread = pp->lag_end > pp->count;
}

/*
 * pp->lag_end: the partition's end in the units of pp->count (messages
 * handed out), so that partition_metrics' lag (end_offset less position)
 * shrinks as the reader reads, between polls.  Behind is counted in
 * entries after the reader's (a lower bound of messages: a batched entry
 * holds several; update_metrics keeps the lag above 0 until the end's
 * message is handed out), and in messages within the partition's last
 * entry when both ids have a batch index.  In the partition's last ledger
 * that is its lastMessageId less the position; from an earlier ledger, the
 * entries of the later ledgers internalStats lists (asked at most every
 * LAG_STATS_MS, and not again while neither end moved; an end that moved on
 * within the ledger it was counted to adds its entries).  Unknown (NULL)
 * when the position is past the broker's end, or the counts are not
 * possible (negative, or past an int64).  False when the broker did not
 * answer (poll_lag backs off).
 */
static bool
poll_partition_lag(PulsarSource *ps, PulsarPartition *pp, TimestampTz now)
{
	PulsarMessageId end;
	const PulsarMessageId *from = &pp->last;
	char		why[400];
	const char *p,
			   *list_end;
	int64		behind = 0,
				id,
				entries,
				oldest,
				newest;
	int			found,
				next;

	if (!last_message_id(ps, pp, &end, why, sizeof(why)))
		return false;
	pp->lag_end_id = end;
	if (from->ledger == end.ledger)
	{
		if (end.entry > from->entry)
			behind = end.entry - from->entry;
		else if (end.entry == from->entry && from->batch_index >= 0 && end.batch_index > from->batch_index)
			behind = end.batch_index - from->batch_index;
		else if (end.entry < from->entry)
			behind = -1;		/* past the end: check_retention's to report */
		set_lag_end(pp, behind);
		return true;
	}
	if (from->ledger > end.ledger)
	{
		pp->lag_end = -1;
		return true;
	}
	/*
	 * A reader one ledger or more behind: its last count (or a reply that
	 * was not one) holds a while, and for good while neither end moves.
	 */
	if (pp->counted_at != 0 &&
		((pp->lag_end >= 0 && same_message(&pp->counted_from, from) && same_message(&pp->counted_to, &end)) ||
		 !TimestampDifferenceExceeds(pp->counted_at, now, LAG_STATS_MS)))
	{
		/* The end moved on within the ledger it was counted to: its new entries, without a call. */
		if (pp->lag_end >= 0 && end.ledger == pp->counted_to.ledger && end.entry > pp->counted_to.entry)
		{
			if (pg_add_s64_overflow(pp->lag_end, end.entry - pp->counted_to.entry, &pp->lag_end))
				pp->lag_end = -1;
			pp->lag_unread = pp->lag_end > pp->count;
			pp->counted_to = end;
		}
		return true;
	}
	pp->counted_at = now;
	pp->counted_from = *from;
	pp->counted_to = end;
	pp->lag_end = -1;
	if (!get_stats(ps, pp, -1, &entries, &oldest, &newest, &found, why, sizeof(why)))
	{
		pp->counted_at = 0;		/* not answered: asked again after poll_lag's back-off, not LAG_STATS_MS */
		return false;
	}
	if (!stats_ledger_list(ps->admin->body, &p, &list_end))
		return true;
	/* Ledgers before the position's were read; those after end's are empty (the current one, not written yet). */
	while ((next = stats_next_ledger(&p, list_end, &id, &entries)) == 1)
	{
		int64		n;

		if (id < from->ledger || id > end.ledger)
			continue;
		n = id == end.ledger ? end.entry + 1 : entries;
		if (id == from->ledger)
			n -= from->entry + 1;
		if (entries < 0 || pg_add_s64_overflow(behind, Max(n, 0), &behind))
			return true;		/* not a count: unknown */
	}
	if (next == 0)
		set_lag_end(pp, behind);
	return true;
}

/*
 * A partition's end in the units of its position, -1 unknown.  The count
 * of entries behind may be below the messages behind (batched entries):
 * until the reader hands out the end's message of the last poll, the end
 * is past the position, so that a lag of 0 means read up to that message.
 * An end at entry -1 (a ledger not written yet) names no message: there,
 * whether the poll counted any after the position.
 */
static int64
published_end(PulsarPartition *pp)
{
	if (pp->lag_end < 0)
		return -1;
	if (!message_before(&pp->last, &pp->lag_end_id))
		return pp->count;
	if (pp->lag_end_id.entry >= 0 || pp->lag_unread)
		return Max(pp->lag_end, pp->count + 1);
	return Max(pp->lag_end, pp->count);
}

/*
 * The partitions' positions (messages handed out) and ends in the same
 * units; consumer_lag is their sum, -1 (unknown) while one partition's lag
 * is: a partition whose broker does not answer must not make the job look
 * caught up.
 */
static void
update_metrics(PulsarSource *ps)
{
	JobSlot    *slot = ps->base.slot;
	int64		lag = 0;

	for (int i = 0; i < ps->nparts; i++)
	{
		PulsarPartition *pp = &ps->parts[i];
		int64		end = published_end(pp);

		if (end < 0 || lag < 0 || pg_add_s64_overflow(lag, end - pp->count, &lag))
			lag = -1;
		if (pp->metrics < 0)
			continue;
		strlcpy(slot->partitions[pp->metrics].topic, ps->base.topic_names[0], JOB_SLOT_TOPIC_LEN);
		slot->partitions[pp->metrics].partition = pp->partition;
		slot->partitions[pp->metrics].position = pp->count;
		slot->partitions[pp->metrics].end_offset = end;
	}
	slot->npartitions = Min(ps->nparts, JOB_SLOT_MAX_PARTITIONS);
	/* A subtask that owns no partition of a known topic is caught up; before the metadata, unknown. */
	slot->consumer_lag = ps->topic_known || ps->nparts > 0 ? lag : -1;
}

static const SourceOps pulsar_ops = {
	.poll = pulsar_poll,
	.headers = pulsar_headers,
	.wait_ms = pulsar_wait_ms,
	.event_fd = pulsar_event_fd,
	.positions = pulsar_positions,
	.records_in = pulsar_records_in,
	.committed = pulsar_committed,
	.finished = pulsar_finished,
	.partition_count = pulsar_partition_count,
	.partition_at = pulsar_partition_at,
	.mark_end = pulsar_mark_end,
	.reached_end = pulsar_reached_end,
};
