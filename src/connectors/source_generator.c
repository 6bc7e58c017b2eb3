/*
 * source_generator.c
 *		The built-in generator: deterministic synthetic orders, shaped as a
 *		Kafka "orders" topic would carry them, for demos, tests and
 *		benchmarks.
 *
 * Event n is a pure function of (seed, n): key "c<k>", value
 * {"order_id": n, "customer_id": "c<k>", "amount": a.bc, "ts": "..."} with
 * ts = start_time + n * step.  Its position is the next event number, so a
 * job replays exactly what it lost after a crash.
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
	int64		next;			/* next event number */
	int64		end_mark;		/* wait_job target */
	TimestampTz rate_start;		/* when the rate clock started */
	int64		rate_base;		/* 'next' at that time */
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

Source *
generator_source_open(GeneratorSpec *spec, Jsonb *positions, JobSlot *slot)
{
	GeneratorSource *g = palloc0(sizeof(GeneratorSource));

	g->base.ops = &generator_ops;
	g->base.ntopics = 1;
	g->base.topic_names = palloc(sizeof(char *));
	g->base.topic_names[0] = "generator";
	g->base.slot = slot;
	g->spec = *spec;
	g->next = 0;
	if (positions)
	{
		JsonbValue *v = getKeyJsonValueFromContainer(&positions->root, "next", 4, NULL);

		if (v == NULL || v->type != jbvNumeric)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("checkpoint positions of the generator source are malformed")));
		g->next = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v->val.numeric)));
	}
	g->end_mark = -1;
	g->rate_start = GetCurrentTimestamp();
	g->rate_base = g->next;
	initStringInfo(&g->buf);

	SpinLockAcquire(&slot->mutex);
	slot->npartitions = 1;
	strlcpy(slot->partitions[0].topic, "generator", JOB_SLOT_TOPIC_LEN);
	slot->partitions[0].partition = 0;
	slot->partitions[0].position = g->next;
	slot->partitions[0].end_offset = spec->events;
	slot->partitions[0].watermark = DT_NOBEGIN;
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
	return g->rate_base + (int64) (secs * g->spec.rate) - g->next;
}

static int
generator_poll(Source *src, SourceMessage *out, int max)
{
	GeneratorSource *g = (GeneratorSource *) src;
	int64		n = max;
	int64		allowed = allowed_now(g);
	int		   *key_off;
	int		   *value_off;

	if (g->spec.events >= 0)
		n = Min(n, g->spec.events - g->next);
	n = Min(n, allowed);
	if (n <= 0)
		return 0;

	/* Offsets first: buf may move while it grows. */
	resetStringInfo(&g->buf);
	key_off = palloc(sizeof(int) * n);
	value_off = palloc(sizeof(int) * n);
	for (int i = 0; i < n; i++)
	{
		int64		id = g->next + i;
		uint64		h = mix((uint64) g->spec.seed ^ mix((uint64) id));
		int64		customer = (int64) (h % (uint64) g->spec.keys);
		int64		cents = (int64) ((h >> 32) % 100000);
		TimestampTz ts = g->spec.start_time + id * g->spec.step_us;
		struct pg_tm tm;
		fsec_t		fsec;

		key_off[i] = g->buf.len;
		appendStringInfo(&g->buf, "c" INT64_FORMAT, customer);
		appendStringInfoChar(&g->buf, '\0');
		value_off[i] = g->buf.len;
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
		out[i].topic = 0;
		out[i].partition = 0;
		out[i].offset = id;
		out[i].timestamp = ts;
		out[i].opaque = NULL;
	}
	for (int i = 0; i < n; i++)
	{
		out[i].key = g->buf.data + key_off[i];
		out[i].key_len = strlen(out[i].key);
		out[i].value = g->buf.data + value_off[i];
		out[i].value_len = strlen(out[i].value);
	}
	/* The worker polls outside any transaction, in a long-lived context. */
	pfree(key_off);
	pfree(value_off);
	g->next += n;
	g->base.slot->partitions[0].position = g->next;
	g->base.slot->partitions[0].records_in += n;
	return (int) n;
}

static Jsonb *
generator_headers(Source *src, SourceMessage *msg)
{
	return NULL;
}

static bool
generator_finished(Source *src)
{
	GeneratorSource *g = (GeneratorSource *) src;

	return g->spec.events >= 0 && g->next >= g->spec.events;
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
	return Max((long) (1000.0 / g->spec.rate), 1);
}

static pgsocket
generator_event_fd(Source *src)
{
	return PGINVALID_SOCKET;
}

static Jsonb *
generator_positions(Source *src)
{
	GeneratorSource *g = (GeneratorSource *) src;
	JsonbParseState *state = NULL;
	JsonbValue	next;

	next.type = jbvNumeric;
	next.val.numeric = int64_to_numeric(g->next);
	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	jsonb_push_key(&state, "next");
	pushJsonbValue(&state, WJB_VALUE, &next);
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

static void
generator_committed(Source *src)
{
}

static int
generator_partition_count(Source *src)
{
	return 1;
}

static void
generator_partition_at(Source *src, int i, int *topic, int32 *partition)
{
	*topic = 0;
	*partition = 0;
}

static void
generator_mark_end(Source *src)
{
	GeneratorSource *g = (GeneratorSource *) src;

	g->end_mark = g->spec.events >= 0 ? g->spec.events : g->next;
}

static bool
generator_reached_end(Source *src)
{
	GeneratorSource *g = (GeneratorSource *) src;

	return g->end_mark >= 0 && g->next >= g->end_mark;
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

