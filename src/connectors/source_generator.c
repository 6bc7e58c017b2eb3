/*
 * source_generator.c
 *		The built-in generator: deterministic synthetic orders, shaped as a
 *		Kafka "orders" topic would carry them, for demos, tests and
 *		benchmarks.
 *
 * Event n is a pure function of (seed, n): key "c<k>", value
 * {"order_id": n, "customer_id": "c<k>", "amount": a.bc, "ts": "..."} with
 * ts = start_time + n * step.  Event n belongs to partition n % partitions,
 * and a partition's position is its next event number, so a job replays
 * exactly what it lost after a crash, at any parallelism: the subtasks
 * split the partitions between them as they split a topic's.
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "base/jsonb_build.h"
#include "connectors/source.h"

typedef struct GeneratorSource
{
	Source		base;
	GeneratorSpec spec;
	int			nowned;			/* partitions this subtask owns */
	int32	   *owned;			/* their numbers, increasing */
	int64	   *next;			/* each owned partition's next event number */
	int			live;			/* owned partitions with events left */
	int64		round;			/* the cursor: event round * partitions + owned[cursor] */
	int			cursor;
	bool		marked;			/* wait_job asked */
	double		rate;			/* this subtask's share of the job's rate */
	TimestampTz rate_start;		/* when the rate clock started */
	int64		produced;		/* events handed out since rate_start */
	StringInfoData buf;			/* the last batch's keys and values */
} GeneratorSource;

/* Defined at the end, once its functions are. */
static const SourceOps generator_ops;

/* splitmix64: a well-mixed 64-bit hash of (seed, n). */
static uint64
mix(uint64 x)
{
	x += UINT64CONST(0x9E3779B97F4A7C15);
	x = (x ^ (x >> 30)) * UINT64CONST(0xBF58476D1CE4E5B9);
	x = (x ^ (x >> 27)) * UINT64CONST(0x94D049BB133111EB);
	return x ^ (x >> 31);
}

/*
 * The first event number of partition p that is n or more (events p,
 * p + parts, p + 2 * parts, ...); PG_INT64_MAX past the last one there is.
 * With n = events it is where a finished partition's position stays.
 */
static int64
first_from(int64 n, int32 p, int parts)
{
	int64		k;

	if (n <= p)
		return p;
	k = (n - p - 1) / parts + 1;
	if (k > (PG_INT64_MAX - p) / parts)
		return PG_INT64_MAX;
	return p + k * parts;
}

static bool
partition_done(GeneratorSource *g, int i)
{
	return g->spec.events >= 0 && g->next[i] >= g->spec.events;
}

static void
malformed_positions(const char *detail, int32 partition)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("checkpoint positions of the generator source are malformed"),
			 errdetail(detail, partition),
			 errhint("Restore an earlier checkpoint with mailer.restore_job, or drop the job and create it again.")));
}

/*
 * Each owned partition's next event number from a checkpoint's positions:
 * {"generator": {"<p>": next event number of p, ...}} (those of other
 * subtasks are ignored), or the single-partition form {"next": n}, meaning
 * every event below n was handed out.  Restored positions are the merge of
 * every subtask's: both forms may be there.
 */
static void
restore_positions(GeneratorSource *g, Jsonb *positions)
{
	JsonbValue *next = getKeyJsonValueFromContainer(&positions->root, "next", 4, NULL);
	JsonbValue *parts = getKeyJsonValueFromContainer(&positions->root, "generator", 9, NULL);

	if (next != NULL && next->type != jbvNumeric)
		malformed_positions("\"next\" is not a number.", 0);
	if (parts != NULL && parts->type != jbvBinary)
		malformed_positions("\"generator\" is not an object.", 0);
	for (int i = 0; i < g->nowned; i++)
	{
		int32		p = g->owned[i];
		char		key[16];
		JsonbValue *v = NULL;

		snprintf(key, sizeof(key), "%d", p);
		if (parts != NULL)
			v = getKeyJsonValueFromContainer(parts->val.binary.data, key, strlen(key), NULL);
		if (v != NULL)
		{
			if (v->type != jbvNumeric)
				malformed_positions("The position of partition %d is not a number.", p);
			g->next[i] = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v->val.numeric)));
			if (g->next[i] < 0 || g->next[i] % g->spec.partitions != p)
				malformed_positions("The position of partition %d is not an event number of it.", p);
		}
		else if (next != NULL)
			g->next[i] = first_from(DatumGetInt64(DirectFunctionCall1(numeric_int8,
																	   NumericGetDatum(next->val.numeric))),
									p, g->spec.partitions);
		else
			malformed_positions("They hold no position of partition %d.", p);
	}
}

/*
 * Subtask k of a job of the given parallelism owns the partitions p with
 * p % parallelism == k, and hands out their events in increasing event
 * number: at parallelism 1, the whole sequence in order, as a single
 * partition would.
 */
Source *
generator_source_open(GeneratorSpec *spec, Jsonb *positions, JobSlot *slot,
					  int subtask, int parallelism)
{
	GeneratorSource *g = palloc0(sizeof(GeneratorSource));
	int			parts = Max(spec->partitions, 1);

	Assert(parallelism >= 1 && subtask >= 0 && subtask < parallelism);
	g->base.ops = &generator_ops;
	g->base.ntopics = 1;
	g->base.topic_names = palloc(sizeof(char *));
	g->base.topic_names[0] = "generator";
	g->base.slot = slot;
	g->spec = *spec;
	g->spec.partitions = parts;
	g->owned = palloc(sizeof(int32) * parts);
	g->next = palloc(sizeof(int64) * parts);
	for (int32 p = subtask; p < parts; p += parallelism)
	{
		g->owned[g->nowned] = p;
		g->next[g->nowned++] = p;
	}
	if (positions)
		restore_positions(g, positions);

	/*
	 * The cursor starts at the round of the earliest event left.  Positions
	 * of a rescaled job may be rounds apart: a partition ahead waits for
	 * the cursor's round to reach it.
	 */
	g->round = PG_INT64_MAX;
	for (int i = 0; i < g->nowned; i++)
	{
		if (partition_done(g, i))
			continue;
		g->live++;
		g->round = Min(g->round, (g->next[i] - g->owned[i]) / parts);
	}
	g->cursor = 0;

	/*
	 * The rate is the job's, whatever its parallelism: each partition gets
	 * an equal share, and the subtask the shares of its partitions, so that
	 * event time goes on at the same pace as at parallelism 1.
	 */
	g->rate = spec->rate * g->nowned / parts;
	g->rate_start = GetCurrentTimestamp();
	initStringInfo(&g->buf);

	SpinLockAcquire(&slot->mutex);
	slot->npartitions = Min(g->nowned, JOB_SLOT_MAX_PARTITIONS);
	for (int i = 0; i < slot->npartitions; i++)
	{
		strlcpy(slot->partitions[i].topic, "generator", JOB_SLOT_TOPIC_LEN);
		slot->partitions[i].partition = g->owned[i];
		slot->partitions[i].position = g->next[i];
		slot->partitions[i].end_offset = spec->events >= 0 ? first_from(spec->events, g->owned[i], parts) : -1;
		slot->partitions[i].watermark = DT_NOBEGIN;
	}
	SpinLockRelease(&slot->mutex);
	return &g->base;
}

/* Events the rate allows now, counted from the rate clock's start. */
static int64
allowed_now(GeneratorSource *g)
{
	double		secs;

	if (g->spec.rate <= 0)
		return PG_INT64_MAX;
	secs = (double) (GetCurrentTimestamp() - g->rate_start) / USECS_PER_SEC;
	return (int64) (secs * g->rate) - g->produced;
}

/*
 * The index of the owned partition whose next event comes first, or -1
 * when none has events left.  The cursor walks the owned partitions round
 * by round (round r holds the event numbers r * partitions to
 * (r + 1) * partitions - 1): each is handed out in the round its next
 * event falls in.
 */
static int
next_partition(GeneratorSource *g)
{
	if (g->live == 0)
		return -1;
	for (;;)
	{
		if (g->cursor == g->nowned)
		{
			g->cursor = 0;
			g->round++;
		}
		if (g->next[g->cursor] == g->round * g->spec.partitions + g->owned[g->cursor] &&
			!partition_done(g, g->cursor))
			return g->cursor;
		g->cursor++;
	}
}

static int
generator_poll(Source *src, SourceMessage *out, int max)
{
	GeneratorSource *g = (GeneratorSource *) src;
	int64		n = Min(max, allowed_now(g));
	int			got = 0;
	int		   *key_off;
	int		   *value_off;

	if (n <= 0 || g->live == 0)
		return 0;

	/* Offsets first: buf may move while it grows. */
	resetStringInfo(&g->buf);
	key_off = palloc(sizeof(int) * n);
	value_off = palloc(sizeof(int) * n);
	for (; got < n; got++)
	{
		int			i = next_partition(g);
		int64		id;
		uint64		h;
		int64		customer;
		int64		cents;
		TimestampTz ts;
		struct pg_tm tm;
		fsec_t		fsec;

		if (i < 0)
			break;
		id = g->next[i];
		h = mix((uint64) g->spec.seed ^ mix((uint64) id));
		customer = (int64) (h % (uint64) g->spec.keys);
		cents = (int64) ((h >> 32) % 100000);
		ts = g->spec.start_time + id * g->spec.step_us;
		key_off[got] = g->buf.len;
		appendStringInfo(&g->buf, "c" INT64_FORMAT, customer);
		appendStringInfoChar(&g->buf, '\0');
		value_off[got] = g->buf.len;
		if (timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
					 errmsg("generator event " INT64_FORMAT " has a timestamp out of range", id)));
		/* No pointer into buf among the arguments: appending may move it. */
		appendStringInfo(&g->buf,
						 "{\"order_id\": " INT64_FORMAT ", \"customer_id\": \"c" INT64_FORMAT "\", "
						 "\"amount\": " INT64_FORMAT ".%02d, "
						 "\"ts\": \"%04d-%02d-%02dT%02d:%02d:%02d.%06dZ\"}",
						 id, customer, cents / 100, (int) (cents % 100),
						 tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int) fsec);
		appendStringInfoChar(&g->buf, '\0');
		out[got].topic = 0;
		out[got].partition = g->owned[i];
		out[got].offset = id;
		out[got].timestamp = ts;
		out[got].opaque = NULL;
		out[got].unreadable = NULL;

		g->next[i] += g->spec.partitions;
		if (partition_done(g, i))
			g->live--;
		g->cursor++;
		if (i < JOB_SLOT_MAX_PARTITIONS)
		{
			g->base.slot->partitions[i].position = g->next[i];
			g->base.slot->partitions[i].records_in++;
		}
	}
	for (int i = 0; i < got; i++)
	{
		out[i].key = g->buf.data + key_off[i];
		out[i].key_len = strlen(out[i].key);
		out[i].value = g->buf.data + value_off[i];
		out[i].value_len = strlen(out[i].value);
	}
	/* The worker polls outside any transaction, in a long-lived context. */
	pfree(key_off);
	pfree(value_off);
	g->produced += got;
	return got;
}

static Jsonb *
generator_headers(Source *src, SourceMessage *msg)
{
	return NULL;
}

/* Every owned partition is at its end; at once for a subtask that owns none. */
static bool
generator_finished(Source *src)
{
	GeneratorSource *g = (GeneratorSource *) src;

	return g->nowned == 0 || (g->spec.events >= 0 && g->live == 0);
}

static long
generator_wait_ms(Source *src)
{
	GeneratorSource *g = (GeneratorSource *) src;

	if (generator_finished(src))
		return -1;
	if (g->spec.rate <= 0)
		return 0;
	/* Until the next event is due. */
	return Max((long) (1000.0 / g->rate), 1);
}

static pgsocket
generator_event_fd(Source *src)
{
	return PGINVALID_SOCKET;
}

/*
 * A single partition's position is {"next": n}, as before partitions
 * existed (checkpoints of 0.1.0 hold it); otherwise {"generator": {"<p>":
 * next event number of p}} for the owned partitions, the shape of Kafka's
 * positions, so that the subtasks' positions merge as Kafka's do.
 */
static Jsonb *
generator_positions(Source *src)
{
	GeneratorSource *g = (GeneratorSource *) src;
	JsonbParseState *state = NULL;
	JsonbValue	next;

	next.type = jbvNumeric;
	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	if (g->spec.partitions == 1 && g->nowned == 1)
	{
		next.val.numeric = int64_to_numeric(g->next[0]);
		jsonb_push_key(&state, "next");
		pushJsonbValue(&state, WJB_VALUE, &next);
	}
	else
	{
		jsonb_push_key(&state, "generator");
		pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
		for (int i = 0; i < g->nowned; i++)
		{
			next.val.numeric = int64_to_numeric(g->next[i]);
			jsonb_push_key(&state, psprintf("%d", g->owned[i]));
			pushJsonbValue(&state, WJB_VALUE, &next);
		}
		pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	}
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

static void
generator_committed(Source *src)
{
}

static int
generator_partition_count(Source *src)
{
	return ((GeneratorSource *) src)->nowned;
}

static void
generator_partition_at(Source *src, int i, int *topic, int32 *partition)
{
	*topic = 0;
	*partition = ((GeneratorSource *) src)->owned[i];
}

static void
generator_mark_end(Source *src)
{
	((GeneratorSource *) src)->marked = true;
}

/*
 * A bounded generator's input is all of its events; an unbounded one's,
 * those handed out when wait_job asked.
 */
static bool
generator_reached_end(Source *src)
{
	GeneratorSource *g = (GeneratorSource *) src;

	return g->marked && (g->spec.events < 0 || g->live == 0);
}

static const SourceOps generator_ops = {
	.poll = generator_poll,
	.headers = generator_headers,
	.wait_ms = generator_wait_ms,
	.event_fd = generator_event_fd,
	.positions = generator_positions,
	.committed = generator_committed,
	.finished = generator_finished,
	.partition_count = generator_partition_count,
	.partition_at = generator_partition_at,
	.mark_end = generator_mark_end,
	.reached_end = generator_reached_end,
	/* No backlog: NULL, never a partition with records left to read. */
};

