/*
 * watermark.c
 *		Event-time watermarks (watermark.h).
 *
 * A partition that has not spoken yet holds the job's watermark back, as
 * one that might still deliver old events must.  With idle_timeout, a
 * partition silent that long (by the wall clock) stops holding it back and
 * rejoins when it speaks again; one with records left to read (a backlog
 * the source knows of), or one restored from the checkpoint that the
 * source has not assigned yet, is never idle, however long it is silent.
 * When every partition is idle, the job's watermark is the largest of
 * theirs: nothing is arriving, so what was seen is all there is for now.
 *
 * Design: docs/ARCHITECTURE.md, "Watermarks".
 */
#include "postgres.h"

#include "common/int.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "base/jsonb_build.h"
#include "base/mailer.h"
#include "operators/watermark.h"

typedef struct PartitionWatermark
{
	int			topic;
	int32		partition;
	int			source_index;	/* the source's (and the slot's) index, -1 unknown */
	TimestampTz max_event;		/* DT_NOBEGIN: nothing seen */
	TimestampTz last_active;	/* wall clock */
	bool		backlog;		/* the source has records of it left to read */
	bool		idle;
	bool		ahead;			/* the source stopped fetching it (watermark_align) */
	bool		heard;			/* a record of it reached the pipeline, failed ones too */
	TimestampTz resumed_at;		/* wall clock when last no longer ahead */
} PartitionWatermark;

/*
 * A partition resumed is not paused again sooner: a partition whose clock
 * runs late keeps having records left and none in turn when read live,
 * and every pause drops what librdkafka fetched of the paused one.
 */
#define ALIGN_REPAUSE_US	(500 * 1000)

struct WatermarkTracker
{
	MemoryContext ctx;			/* where parts grows */
	int64		ooo_us;
	int64		idle_us;		/* -1: never idle */
	int			n;
	int			capacity;
	PartitionWatermark *parts;
	int			last_hit;
	TimestampTz now;			/* wall clock of the current batch */
	TimestampTz watermark;
	bool		finished;
};

WatermarkTracker *
watermark_create(int64 max_out_of_orderness_us, int64 idle_timeout_us)
{
	WatermarkTracker *wt = palloc0(sizeof(WatermarkTracker));

	wt->ctx = CurrentMemoryContext;
	wt->ooo_us = max_out_of_orderness_us;
	wt->idle_us = idle_timeout_us;
	wt->watermark = DT_NOBEGIN;
	wt->now = GetCurrentTimestamp();
	return wt;
}

static int
find_or_add(WatermarkTracker *wt, int topic, int32 partition)
{
	PartitionWatermark *p;

	if (wt->last_hit < wt->n && wt->parts[wt->last_hit].topic == topic &&
		wt->parts[wt->last_hit].partition == partition)
		return wt->last_hit;
	for (int i = 0; i < wt->n; i++)
		if (wt->parts[i].topic == topic && wt->parts[i].partition == partition)
			return wt->last_hit = i;
	if (wt->n == wt->capacity)
	{
		wt->capacity = Max(8, wt->capacity * 2);
		wt->parts = wt->parts ? repalloc(wt->parts, sizeof(PartitionWatermark) * wt->capacity) :
			MemoryContextAlloc(wt->ctx, sizeof(PartitionWatermark) * wt->capacity);
	}
	p = &wt->parts[wt->n];
	p->topic = topic;
	p->partition = partition;
	p->source_index = -1;
	p->max_event = DT_NOBEGIN;
	p->last_active = wt->now;
	p->backlog = false;
	p->idle = false;
	p->ahead = false;
	p->heard = false;
	p->resumed_at = DT_NOBEGIN;
	return wt->last_hit = wt->n++;
}

void
watermark_sync_partitions(WatermarkTracker *wt, Source *src)
{
	int			n = src->ops->partition_count(src);

	wt->now = GetCurrentTimestamp();
	for (int i = 0; i < n; i++)
	{
		int			topic;
		int32		partition;

		int			idx;

		src->ops->partition_at(src, i, &topic, &partition);
		idx = find_or_add(wt, topic, partition);	/* may move wt->parts */
		wt->parts[idx].source_index = i;
		wt->parts[idx].backlog = src->ops->backlog != NULL && src->ops->backlog(src, i);
	}
}

void
watermark_observe(WatermarkTracker *wt, int topic, int32 partition, TimestampTz t)
{
	int			idx = find_or_add(wt, topic, partition);	/* may move wt->parts */
	PartitionWatermark *p = &wt->parts[idx];

	if (t > p->max_event)
		p->max_event = t;
	p->last_active = wt->now;
}

void
watermark_heard(WatermarkTracker *wt, const SourceMessage *msgs, int n)
{
	for (int i = 0; i < n; i++)
		if (i == 0 || msgs[i].partition != msgs[i - 1].partition || msgs[i].topic != msgs[i - 1].topic)
			wt->parts[find_or_add(wt, msgs[i].topic, msgs[i].partition)].heard = true;
}

static TimestampTz
partition_watermark(WatermarkTracker *wt, PartitionWatermark *p)
{
	return p->max_event == DT_NOBEGIN ? DT_NOBEGIN : p->max_event - wt->ooo_us;
}

static TimestampTz
watermark_advance(WatermarkTracker *wt, TimestampTz now)
{
	TimestampTz lowest_active = DT_NOEND;
	TimestampTz highest = DT_NOBEGIN;
	bool		any_active = false;
	TimestampTz candidate;

	if (wt->finished)
		return wt->watermark = DT_NOEND;
	for (int i = 0; i < wt->n; i++)
	{
		PartitionWatermark *p = &wt->parts[i];
		TimestampTz pw = partition_watermark(wt, p);

		/*
		 * Silence with records left to read is the broker's or the worker's
		 * delay, not idleness; so is that of a partition of the checkpoint
		 * the source has not assigned again (the broker is away): it may
		 * hold anything.
		 */
		p->idle = !p->backlog && p->source_index >= 0 && wt->idle_us >= 0 &&
			now - p->last_active >= wt->idle_us;
		highest = Max(highest, pw);
		if (!p->idle)
		{
			any_active = true;
			lowest_active = Min(lowest_active, pw);
		}
	}
	candidate = wt->n == 0 ? DT_NOBEGIN : any_active ? lowest_active : highest;
	if (candidate > wt->watermark)
		wt->watermark = candidate;
	return wt->watermark;
}

/* Whether a is more than us after b, for any two finite timestamps. */
static bool
further_than(TimestampTz a, TimestampTz b, int64 us)
{
	int64		diff;

	if (pg_sub_s64_overflow(a, b, &diff))
		return a > b;
	return diff > us;
}

/*
 * Watermark alignment.  A partition read far ahead of the others does not
 * move the job's watermark, the smallest; it only keeps the windows of
 * every key open, as the records it brings wait for the slowest partition.
 * So a partition whose watermark is more than drift ahead of the slowest
 * one still catching up (not idle, records left to read) stops being
 * fetched, leaving the broker's responses to the partitions behind, and is
 * fetched again once within drift / 2 of it, or once no partition is
 * catching up.  One with records left that no record of has reached yet
 * is the slowest of all: it may hold anything.  One whose records all
 * failed has no watermark to compare, and does not count: it must not
 * hold the others back for as long as its producer writes.  The slowest
 * is never paused, so the job always reads on.  Alignment is per source:
 * a parallel job's subtasks each align their own partitions.
 */
static void
watermark_align(WatermarkTracker *wt, Source *src, int64 drift_us)
{
	TimestampTz slowest = DT_NOEND;

	if (src->ops->set_ahead == NULL)
		return;
	for (int i = 0; i < wt->n; i++)
	{
		PartitionWatermark *p = &wt->parts[i];

		if (p->source_index >= 0 && !p->idle && p->backlog && (p->max_event != DT_NOBEGIN || !p->heard))
			slowest = Min(slowest, partition_watermark(wt, p));
	}
	for (int i = 0; i < wt->n; i++)
	{
		PartitionWatermark *p = &wt->parts[i];
		TimestampTz pw = partition_watermark(wt, p);
		bool		ahead;

		if (p->source_index < 0)
			continue;
		if (wt->finished || slowest == DT_NOEND || pw == DT_NOBEGIN)
			ahead = false;
		else if (slowest == DT_NOBEGIN)
			ahead = p->ahead || p->backlog;
		else if (p->ahead)
			ahead = further_than(pw, slowest, drift_us / 2);
		else
			ahead = p->backlog && further_than(pw, slowest, drift_us) &&
				(p->resumed_at == DT_NOBEGIN || wt->now - p->resumed_at >= ALIGN_REPAUSE_US);
		if (ahead != p->ahead)
		{
			p->ahead = ahead;
			if (!ahead)
				p->resumed_at = wt->now;
			src->ops->set_ahead(src, p->source_index, ahead);
		}
	}
}

/* A bounded source is done: every window may fire. */
static void
watermark_finish(WatermarkTracker *wt)
{
	wt->finished = true;
	wt->watermark = DT_NOEND;
}

TimestampTz
watermark_step(WatermarkTracker *wt, Source *src, bool finished, int64 align_drift_us)
{
	TimestampTz wm;

	/* Partitions restored from the checkpoint show their watermarks before any record. */
	watermark_sync_partitions(wt, src);
	if (finished)
		watermark_finish(wt);
	wm = watermark_advance(wt, GetCurrentTimestamp());
	if (align_drift_us >= 0)
		watermark_align(wt, src, align_drift_us);
	return wm;
}

bool
watermark_idle(WatermarkTracker *wt)
{
	if (wt->finished)
		return false;
	for (int i = 0; i < wt->n; i++)
		if (!wt->parts[i].idle)
			return false;
	return true;
}

TimestampTz
watermark_current(WatermarkTracker *wt)
{
	return wt->watermark;
}

/*
 * {"topic": {"partition": largest event time in microseconds since 1970}}.
 * Built as a JsonbValue: the same jsonb that parsing its text gave (keys
 * sorted, a later duplicate topic name winning).
 */
Jsonb *
watermark_save(WatermarkTracker *wt, Source *src)
{
	JsonbParseState *state = NULL;
	JsonbValue	v;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int t = 0; t < src->ntopics; t++)
	{
		jsonb_push_key(&state, src->topic_names[t]);
		pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
		for (int i = 0; i < wt->n; i++)
		{
			PartitionWatermark *p = &wt->parts[i];

			if (p->topic != t || p->max_event == DT_NOBEGIN)
				continue;
			jsonb_push_key(&state, psprintf("%d", p->partition));
			v.type = jbvNumeric;
			v.val.numeric = int64_to_numeric(p->max_event + UNIX_OFFSET_US);
			pushJsonbValue(&state, WJB_VALUE, &v);
		}
		pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	}
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

/* Whether owned (positions, same shape) names topic t's partition in key k. */
static bool
owns(Jsonb *owned, const char *topic, JsonbValue *k)
{
	JsonbValue *parts;

	if (owned == NULL)
		return true;
	parts = getKeyJsonValueFromContainer(&owned->root, topic, strlen(topic), NULL);
	return parts && parts->type == jbvBinary &&
		getKeyJsonValueFromContainer(parts->val.binary.data, k->val.string.val,
									 k->val.string.len, NULL) != NULL;
}

void
watermark_restore(WatermarkTracker *wt, Source *src, Jsonb *saved, TimestampTz job_watermark,
				  Jsonb *owned)
{
	wt->watermark = job_watermark;
	if (saved == NULL)
		return;
	for (int t = 0; t < src->ntopics; t++)
	{
		JsonbValue *parts = getKeyJsonValueFromContainer(&saved->root, src->topic_names[t],
														 strlen(src->topic_names[t]), NULL);
		JsonbIterator *it;
		JsonbValue	k,
					v;
		JsonbIteratorToken tok;

		if (parts == NULL || parts->type != jbvBinary)
			continue;
		it = JsonbIteratorInit(parts->val.binary.data);
		while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
		{
			int32		partition;

			if (tok != WJB_KEY)
				continue;
			if (!owns(owned, src->topic_names[t], &k))
			{
				(void) JsonbIteratorNext(&it, &v, true);
				continue;
			}
			partition = atoi(pnstrdup(k.val.string.val, k.val.string.len));
			(void) JsonbIteratorNext(&it, &v, true);
			if (v.type == jbvNumeric)
			{
				int			idx = find_or_add(wt, t, partition);	/* may move wt->parts */

				wt->parts[idx].max_event =
					DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v.val.numeric))) -
					UNIX_OFFSET_US;
			}
		}
	}
}

void
watermark_publish(WatermarkTracker *wt, JobSlot *slot)
{
	for (int i = 0; i < wt->n; i++)
	{
		PartitionWatermark *p = &wt->parts[i];

		if (p->source_index < 0 || p->source_index >= JOB_SLOT_MAX_PARTITIONS)
			continue;
		slot->partitions[p->source_index].watermark = partition_watermark(wt, p);
		slot->partitions[p->source_index].idle = p->idle;
	}
	slot->watermark = wt->watermark;
}
