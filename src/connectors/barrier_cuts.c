/*
 * barrier_cuts.c
 *		Decode the records of __barrier_state and keep a barrier group's
 *		complete cuts (barrier_cuts.h).
 *
 * The format is krabka's: big-endian integers, strings as an int16 length
 * then UTF-8.  A record that does not follow it is counted and logged,
 * never fatal: the coordinator's topic is not the job's to police, and a
 * job that stopped on it would stop every job of the group.
 *
 * The reader has a librdkafka handle of its own: the cuts' topic is read
 * from its beginning at every start, with assign and seek (no consumer
 * group, nothing committed), while the source's handle reads the job's
 * topics at the job's positions.
 *
 * Design: docs/ARCHITECTURE.md, "Barrier cuts".
 */
#include "postgres.h"

#include <librdkafka/rdkafka.h>

#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/signals.h"
#include "connectors/barrier_cuts.h"
#include "connectors/kafka_client.h"
#include "plan/kafka_options.h"

#define BARRIER_FORMAT_VERSION	0
#define BARRIER_KIND_CUT		2
#define BARRIER_KIND_MAX		2
#define CUT_STATUS_COMPLETE		0
#define CUT_STATUS_PARTIAL		1
#define REFRESH_MS				5000
#define RETRY_MS				1000
#define BROKER_TIMEOUT_MS		2000
#define BATCH					256

/* A cursor over a record's bytes; ok turns false at the first short read. */
typedef struct Cursor
{
	const uint8 *p;
	const uint8 *end;
	bool		ok;
} Cursor;

struct BarrierReader
{
	MemoryContext ctx;			/* the cuts */
	rd_kafka_t *rk;
	rd_kafka_queue_t *queue;
	rd_kafka_queue_t *logs;
	rd_kafka_topic_t *rkt;
	const char *topic;
	const char *group;
	char	  **topics;			/* the source's */
	int			ntopics;
	int			nassigned;		/* partitions 0..nassigned-1 of the topic are read */
	int64	   *ends;			/* each one's end offset when it was assigned */
	bool		caught_up;		/* every partition was read to that end */
	TimestampTz next_refresh;
	BarrierCut *cuts;			/* by epoch, ascending */
	int			ncuts;
	int			cuts_capacity;
	uint64		partial;
	uint64		malformed;
	uint64		late;
	int64		decided;		/* the last cut the job decided on, as of the last poll */
	char		error[512];
	KafkaSecrets secrets;
	rd_kafka_message_t *batch[BATCH];
};

static bool
take(Cursor *c, size_t n)
{
	if (!c->ok || (size_t) (c->end - c->p) < n)
		c->ok = false;
	return c->ok;
}

static int64
read_int(Cursor *c, int bytes)
{
	uint64		v = 0;

	if (!take(c, bytes))
		return 0;
	for (int i = 0; i < bytes; i++)
		v = (v << 8) | *c->p++;
	/* Sign-extend the narrower integers. */
	if (bytes < 8 && (v & ((uint64) 1 << (bytes * 8 - 1))))
		v |= ~(uint64) 0 << (bytes * 8);
	return (int64) v;
}

/* A string's bytes (not terminated) and length; NULL after a short read. */
static const char *
read_string(Cursor *c, int *len)
{
	int64		n = read_int(c, 2);
	const char *s;

	if (n < 0)
		c->ok = false;
	if (!take(c, (size_t) Max(n, 0)))
		return NULL;
	s = (const char *) c->p;
	c->p += n;
	*len = (int) n;
	return s;
}

static int
topic_index(char **topics, int ntopics, const char *name, int len)
{
	for (int t = 0; t < ntopics; t++)
		if ((int) strlen(topics[t]) == len && memcmp(topics[t], name, len) == 0)
			return t;
	return -1;
}

static int
marker_cmp(const void *a, const void *b)
{
	const CutMarker *x = a;
	const CutMarker *y = b;

	if (x->topic != y->topic)
		return x->topic < y->topic ? -1 : 1;
	return x->partition < y->partition ? -1 : x->partition > y->partition ? 1 : 0;
}

#define MALFORMED(...) \
	do { snprintf(why, why_size, __VA_ARGS__); return BARRIER_RECORD_MALFORMED; } while (0)

/*
 * The value of a cut: its markers for the job's topics go into cut.  Each
 * count is judged against the bytes left before anything is allocated
 * for it, so a record cannot make the worker allocate more than its size.
 */
static BarrierRecordKind
decode_cut_value(Cursor *c, char **topics, int ntopics, BarrierCut *cut, char *why, size_t why_size)
{
	int64		version = read_int(c, 2);
	int64		status;
	int64		ntopic_entries;
	int64		nmissed;

	cut->triggered_at = kafka_timestamp(read_int(c, 8));
	cut->completed_at = kafka_timestamp(read_int(c, 8));
	status = read_int(c, 1);
	ntopic_entries = read_int(c, 4);
	if (!c->ok)
		MALFORMED("the cut's value is truncated in its header");
	if (version != BARRIER_FORMAT_VERSION)
		MALFORMED("the cut's value has version " INT64_FORMAT ", and only version 0 is known", version);
	if (status != CUT_STATUS_COMPLETE && status != CUT_STATUS_PARTIAL)
		MALFORMED("the cut's status is " INT64_FORMAT ", neither 0 (complete) nor 1 (partial)", status);
	/* A topic entry takes at least 6 bytes, a marker 12. */
	if (ntopic_entries < 0 || ntopic_entries > (c->end - c->p) / 6)
		MALFORMED("the cut names " INT64_FORMAT " topics, more than its bytes hold", ntopic_entries);
	cut->nmarkers = 0;
	cut->markers = NULL;
	for (int64 i = 0; i < ntopic_entries; i++)
	{
		int			len;
		const char *name = read_string(c, &len);
		int64		m = read_int(c, 4);
		int			t;

		if (!c->ok)
			MALFORMED("the cut is truncated in its topic " INT64_FORMAT, i);
		if (m < 0 || m > (c->end - c->p) / 12)
			MALFORMED("the cut's topic " INT64_FORMAT " names " INT64_FORMAT " partitions, more than its bytes hold", i, m);
		t = topic_index(topics, ntopics, name, len);
		if (t >= 0 && m > 0)
			cut->markers = cut->markers ?
				repalloc(cut->markers, sizeof(CutMarker) * (cut->nmarkers + m)) :
				palloc(sizeof(CutMarker) * m);
		for (int64 j = 0; j < m; j++)
		{
			int64		partition = read_int(c, 4);
			int64		offset = read_int(c, 8);

			if (!c->ok)
				MALFORMED("the cut is truncated in the markers of its topic " INT64_FORMAT, i);
			if (partition < 0 || offset < 0)
				MALFORMED("the cut has a negative partition or marker offset in its topic " INT64_FORMAT, i);
			if (t < 0)
				continue;
			cut->markers[cut->nmarkers].topic = t;
			cut->markers[cut->nmarkers].partition = (int32) partition;
			cut->markers[cut->nmarkers].offset = offset;
			cut->nmarkers++;
		}
	}
	/* The partitions that missed the marker: a complete cut lists none that matter here. */
	nmissed = read_int(c, 4);
	if (!c->ok)
		MALFORMED("the cut is truncated before its missed partitions");
	if (nmissed < 0 || nmissed > (c->end - c->p) / 6)
		MALFORMED("the cut lists " INT64_FORMAT " missed partitions, more than its bytes hold", nmissed);
	for (int64 i = 0; i < nmissed; i++)
	{
		int			len;

		(void) read_string(c, &len);
		(void) read_int(c, 4);
	}
	if (!c->ok)
		MALFORMED("the cut is truncated in its missed partitions");
	if (c->p != c->end)
		MALFORMED("the cut's value has %d bytes after its end", (int) (c->end - c->p));
	/* A partition with two markers has no one place to hold it. */
	if (cut->nmarkers > 1)
	{
		qsort(cut->markers, cut->nmarkers, sizeof(CutMarker), marker_cmp);
		for (int i = 1; i < cut->nmarkers; i++)
			if (marker_cmp(&cut->markers[i - 1], &cut->markers[i]) == 0)
				MALFORMED("the cut names partition %d of topic \"%s\" twice",
						  cut->markers[i].partition, topics[cut->markers[i].topic]);
	}
	return status == CUT_STATUS_COMPLETE ? BARRIER_RECORD_CUT : BARRIER_RECORD_PARTIAL;
}

BarrierRecordKind
barrier_record_decode(const char *key, size_t key_len, const char *value, size_t value_len,
					  const char *group, char **topics, int ntopics, BarrierCut *cut, int64 *epoch,
					  char *why, size_t why_size)
{
	Cursor		k = {(const uint8 *) key, (const uint8 *) key + key_len, key != NULL};
	Cursor		v = {(const uint8 *) value, (const uint8 *) value + value_len, true};
	int64		version = read_int(&k, 2);
	int64		kind = read_int(&k, 2);
	int			group_len = 0;
	const char *record_group = read_string(&k, &group_len);

	*epoch = read_int(&k, 8);
	if (!k.ok)
		MALFORMED("its key is missing or truncated");
	if (version != BARRIER_FORMAT_VERSION)
		MALFORMED("its key has version " INT64_FORMAT ", and only version 0 is known", version);
	if (kind < 0 || kind > BARRIER_KIND_MAX)
		MALFORMED("its key has kind " INT64_FORMAT ", and the kinds are 0 (group), 1 (injection start) and 2 (cut)", kind);
	if (k.p != k.end)
		MALFORMED("its key has %d bytes after its end", (int) (k.end - k.p));
	/* Another group's, or another kind. */
	if (kind != BARRIER_KIND_CUT || group_len != (int) strlen(group) ||
		memcmp(record_group, group, group_len) != 0)
		return BARRIER_RECORD_OTHER;
	if (*epoch <= 0)
		MALFORMED("its cut has epoch " INT64_FORMAT ", and epochs are positive", *epoch);
	cut->epoch = *epoch;
	if (value == NULL || value_len == 0)
		return BARRIER_RECORD_DELETED;
	return decode_cut_value(&v, topics, ntopics, cut, why, why_size);
}

uint64
barrier_cut_digest(const BarrierCut *cut)
{
	/* CutMarker has no padding: its bytes are its fields, sorted. */
	StaticAssertStmt(sizeof(CutMarker) == sizeof(int) + sizeof(int32) + sizeof(int64),
					 "CutMarker has padding");
	return hash_bytes_extended((const unsigned char *) cut->markers, sizeof(CutMarker) * cut->nmarkers,
							   (uint64) cut->epoch);
}

BarrierReader *
barrier_reader_open(KafkaSourceSpec *spec, const char *group_id, char **topics, int ntopics, int wake_fd)
{
	BarrierReader *reader = MemoryContextAllocZero(TopMemoryContext, sizeof(BarrierReader));
	rd_kafka_conf_t *conf = kafka_options_conf(spec, group_id, false);
	char		errstr[512];

	reader->ctx = AllocSetContextCreate(TopMemoryContext, "mailer barrier cuts", ALLOCSET_SMALL_SIZES);
	reader->topic = spec->barrier_topic;
	reader->group = spec->barrier_group;
	reader->topics = topics;
	reader->ntopics = ntopics;
	kafka_secrets_collect(&reader->secrets, spec->options);
	reader->rk = kafka_client_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (reader->rk == NULL)
	{
		kafka_secrets_mask(&reader->secrets, errstr, sizeof(errstr));
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not create the Kafka consumer of barrier cuts: %s", errstr)));
	}
	reader->logs = rd_kafka_queue_new(reader->rk);
	rd_kafka_set_log_queue(reader->rk, reader->logs);
	reader->queue = rd_kafka_queue_get_consumer(reader->rk);
	rd_kafka_queue_io_event_enable(reader->queue, wake_fd, "1", 1);
	reader->rkt = rd_kafka_topic_new(reader->rk, reader->topic, NULL);
	return reader;
}

/* Assign the topic's partitions not read yet, from their beginning. */
static void
refresh(BarrierReader *reader)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t err;
	int			count;

	CHECK_FOR_INTERRUPTS();
	err = rd_kafka_metadata(reader->rk, 0, reader->rkt, &md, BROKER_TIMEOUT_MS);
	if (err || md->topic_cnt != 1 || md->topics[0].err)
	{
		snprintf(reader->error, sizeof(reader->error), "cannot read the barrier cuts of topic \"%s\": %s",
				 reader->topic, rd_kafka_err2str(err ? err : md->topic_cnt == 1 ? md->topics[0].err :
												 RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART));
		kafka_secrets_mask(&reader->secrets, reader->error, sizeof(reader->error));
		if (md)
			rd_kafka_metadata_destroy(md);
		reader->next_refresh = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RETRY_MS);
		return;
	}
	reader->error[0] = '\0';
	count = md->topics[0].partition_cnt;
	rd_kafka_metadata_destroy(md);
	if (count > reader->nassigned)
	{
		rd_kafka_topic_partition_list_t *add;
		rd_kafka_error_t *error;
		int64	   *ends = MemoryContextAlloc(reader->ctx, sizeof(int64) * count);

		/* Where each partition ends now: the cuts published so far are read first. */
		for (int p = 0; p < count; p++)
		{
			int64		low;

			ends[p] = p < reader->nassigned ? reader->ends[p] : 0;
			if (p < reader->nassigned)
				continue;
			CHECK_FOR_INTERRUPTS();
			err = rd_kafka_query_watermark_offsets(reader->rk, reader->topic, p, &low, &ends[p],
												   BROKER_TIMEOUT_MS);
			if (err)
			{
				snprintf(reader->error, sizeof(reader->error),
						 "cannot read the end of partition %d of barrier topic \"%s\": %s",
						 p, reader->topic, rd_kafka_err2str(err));
				pfree(ends);
				reader->next_refresh = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RETRY_MS);
				return;
			}
			/* Nothing left to read (compacted or never written): nothing to wait for. */
			if (low >= ends[p])
				ends[p] = 0;
		}
		if (reader->ends)
			pfree(reader->ends);
		reader->ends = ends;
		add = rd_kafka_topic_partition_list_new(count - reader->nassigned);
		for (int p = reader->nassigned; p < count; p++)
			rd_kafka_topic_partition_list_add(add, reader->topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
		error = rd_kafka_incremental_assign(reader->rk, add);
		rd_kafka_topic_partition_list_destroy(add);
		if (error)
		{
			snprintf(reader->error, sizeof(reader->error), "cannot read the barrier cuts of topic \"%s\": %s",
					 reader->topic, rd_kafka_error_string(error));
			rd_kafka_error_destroy(error);
		}
		else
			reader->nassigned = count;
	}
	reader->next_refresh = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), REFRESH_MS);
}

/*
 * The index of the first of n items (stride bytes apart, their int64 key
 * at offset) whose key is not below key; *found: that item's key is key.
 */
static int
lower_bound(const void *items, int n, size_t stride, size_t offset, int64 key, bool *found)
{
	int			lo = 0,
				hi = n;

#define KEY_AT(i) (*(const int64 *) ((const char *) items + (size_t) (i) * stride + offset))
	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (KEY_AT(mid) < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < n && KEY_AT(lo) == key;
#undef KEY_AT
	return lo;
}

static int
find_cut(BarrierReader *reader, int64 epoch, bool *found)
{
	return lower_bound(reader->cuts, reader->ncuts, sizeof(BarrierCut), offsetof(BarrierCut, epoch),
					   epoch, found);
}


/* Put item at index i of an array of *n items of size bytes, growing it in ctx. */
static void
insert_at(void **items, int *n, int *capacity, size_t size, int i, const void *item, MemoryContext ctx)
{
	if (*n == *capacity)
	{
		*capacity = Max(16, *capacity * 2);
		*items = *items ? repalloc(*items, size * *capacity) : MemoryContextAlloc(ctx, size * *capacity);
	}
	memmove((char *) *items + size * (i + 1), (char *) *items + size * i, size * (*n - i));
	memcpy((char *) *items + size * i, item, size);
	(*n)++;
}

/* Take out the item at index i. */
static void
remove_at(void *items, int *n, size_t size, int i)
{
	memmove((char *) items + size * i, (char *) items + size * (i + 1), size * (*n - i - 1));
	(*n)--;
}

/* The latest record of an epoch stands: a complete cut replaces, a partial one removes. */
static void
note_cut(BarrierReader *reader, BarrierCut *cut, bool complete)
{
	bool		found;
	int			i = find_cut(reader, cut->epoch, &found);

	if (found)
	{
		if (reader->cuts[i].markers)
			pfree(reader->cuts[i].markers);
		if (complete)
		{
			reader->cuts[i] = *cut;
			return;
		}
		remove_at(reader->cuts, &reader->ncuts, sizeof(BarrierCut), i);
		return;
	}
	if (complete)
		insert_at((void **) &reader->cuts, &reader->ncuts, &reader->cuts_capacity, sizeof(BarrierCut), i,
				  cut, reader->ctx);
}

static void
take_record(BarrierReader *reader, rd_kafka_message_t *m)
{
	BarrierCut	cut;
	int64		epoch = 0;
	char		why[256];
	BarrierRecordKind kind;
	MemoryContext old = MemoryContextSwitchTo(reader->ctx);

	memset(&cut, 0, sizeof(cut));
	kind = barrier_record_decode(m->key, m->key_len, m->payload, m->len, reader->group,
								 reader->topics, reader->ntopics, &cut, &epoch, why, sizeof(why));
	MemoryContextSwitchTo(old);
	switch (kind)
	{
		case BARRIER_RECORD_OTHER:
			break;
		case BARRIER_RECORD_DELETED:
			note_cut(reader, &cut, false);
			break;
		case BARRIER_RECORD_MALFORMED:
			reader->malformed++;
			if (cut.markers)
				pfree(cut.markers);
			ereport(WARNING,
					(errmsg("skipped a malformed barrier record at offset " INT64_FORMAT " of partition %d of topic \"%s\": %s",
							m->offset, m->partition, reader->topic, why),
					 errhint("The record is not of the barrier cut format (version 0); the job goes on without it.")));
			break;
		case BARRIER_RECORD_PARTIAL:
			reader->partial++;
			if (cut.markers)
				pfree(cut.markers);
			note_cut(reader, &cut, false);
			break;
		case BARRIER_RECORD_CUT:
			/*
			 * Read after the start, at or below the cut the job decided on
			 * last: the job has gone past it (epochs out of order, or one far
			 * ahead).  Say so; the cuts read before the start were decided on
			 * by earlier runs.
			 */
			if (reader->caught_up && cut.epoch <= reader->decided)
			{
				/* The decided cut's record again (a producer's retry): nothing new. */
				if (cut.epoch == reader->decided)
				{
					if (cut.markers)
						pfree(cut.markers);
					break;
				}
				reader->late++;
				ereport(WARNING,
						(errmsg("barrier cut " INT64_FORMAT " of group \"%s\" came after the job took or skipped cut " INT64_FORMAT ": it is skipped",
								cut.epoch, reader->group, reader->decided),
						 errhint("A job takes the cuts of a group in the order of their epochs; a coordinator's epochs must grow.")));
				if (cut.markers)
					pfree(cut.markers);
				break;
			}
			cut.record_partition = m->partition;
			cut.record_offset = m->offset;
			note_cut(reader, &cut, true);
			break;
	}
}

void
barrier_reader_poll(BarrierReader *reader, int64 decided)
{
	ssize_t		got;

	reader->decided = decided;

	kafka_drain_logs(reader->logs, &reader->secrets);
	if (GetCurrentTimestamp() >= reader->next_refresh)
		refresh(reader);
	do
	{
		CHECK_FOR_INTERRUPTS();
		got = rd_kafka_consume_batch_queue(reader->queue, 0, reader->batch, BATCH);
		for (ssize_t i = 0; i < got; i++)
		{
			rd_kafka_message_t *m = reader->batch[i];

			if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
				take_record(reader, m);
			else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			{
				snprintf(reader->error, sizeof(reader->error), "cannot read the barrier cuts of topic \"%s\": %s",
						 reader->topic, rd_kafka_message_errstr(m));
				kafka_secrets_mask(&reader->secrets, reader->error, sizeof(reader->error));
			}
			rd_kafka_message_destroy(m);
		}
	} while (got == BATCH);
}

bool
barrier_reader_caught_up(BarrierReader *reader)
{
	rd_kafka_topic_partition_list_t *list;
	bool		done = true;

	if (reader->caught_up || reader->nassigned == 0)
		return reader->caught_up;
	list = rd_kafka_topic_partition_list_new(reader->nassigned);
	for (int p = 0; p < reader->nassigned; p++)
		rd_kafka_topic_partition_list_add(list, reader->topic, p);
	if (rd_kafka_position(reader->rk, list) != RD_KAFKA_RESP_ERR_NO_ERROR)
		done = false;
	/* Past a control record too: librdkafka's position moves over it. */
	for (int p = 0; p < list->cnt && done; p++)
		if (reader->ends[p] > 0 && list->elems[p].offset < reader->ends[p])
			done = false;
	rd_kafka_topic_partition_list_destroy(list);
	reader->caught_up = done;
	return done;
}

const BarrierCut *
barrier_reader_next(BarrierReader *reader, int64 above)
{
	int			drop = 0;

	while (drop < reader->ncuts && reader->cuts[drop].epoch <= above)
	{
		if (reader->cuts[drop].markers)
			pfree(reader->cuts[drop].markers);
		drop++;
	}
	if (drop > 0)
	{
		memmove(&reader->cuts[0], &reader->cuts[drop], sizeof(BarrierCut) * (reader->ncuts - drop));
		reader->ncuts -= drop;
	}
	return reader->ncuts > 0 ? &reader->cuts[0] : NULL;
}

const BarrierCut *
barrier_reader_find(BarrierReader *reader, int64 epoch, int32 partition, int64 offset, bool *withdrawn)
{
	rd_kafka_topic_partition_list_t *list;
	bool		read = false;
	bool		found;
	int			i;

	*withdrawn = false;
	if (partition < 0 || partition >= reader->nassigned)
		return NULL;
	list = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(list, reader->topic, partition);
	if (rd_kafka_position(reader->rk, list) == RD_KAFKA_RESP_ERR_NO_ERROR)
		read = list->elems[0].offset > offset;
	rd_kafka_topic_partition_list_destroy(list);
	if (!read)
		return NULL;
	i = find_cut(reader, epoch, &found);
	*withdrawn = !found;
	return found ? &reader->cuts[i] : NULL;
}

void
barrier_reader_counts(BarrierReader *reader, uint64 *partial, uint64 *malformed, uint64 *late)
{
	*partial = reader->partial;
	*malformed = reader->malformed;
	*late = reader->late;
}

const char *
barrier_reader_error(BarrierReader *reader)
{
	return reader->error[0] ? reader->error : NULL;
}

void
barrier_reader_close(BarrierReader *reader)
{
	rd_kafka_t *rk = reader->rk;
	sigset_t	saved;

	if (rk == NULL)
		return;
	reader->rk = NULL;
	rd_kafka_topic_destroy(reader->rkt);
	rd_kafka_queue_destroy(reader->queue);
	rd_kafka_queue_destroy(reader->logs);
	mailer_block_signals(&saved);
	rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	mailer_restore_signals(&saved);
}
