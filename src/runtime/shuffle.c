/*
 * shuffle.c
 *		Records, watermarks and barriers between subtasks (shuffle.h).
 *
 * A subtask runs a batch's records through their stateless steps as a job
 * of one worker does; a record bound for the keyed stage is handed to the
 * stage of the subtask that owns its key group, here or over the
 * exchange.  What crosses is what the keyed stage needs and what a dead
 * letter shows: the group key, the event time, the aggregates' arguments,
 * and the message's topic, partition, offset, key and value.  The
 * receiver counts the record (accepted, late or dead-lettered); the
 * sender counted it read.
 *
 * Each queue carries, in order, a sender's records, its source watermark
 * after them, and at a checkpoint a barrier after everything it read up to
 * the epoch's positions.  An input that delivered barrier E is not read
 * again until the receiver has cut E: the receiver's state then holds
 * exactly the records before every sender's cut (aligned checkpoints).
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#include "postgres.h"

#include "utils/datum.h"
#include "utils/memutils.h"

#include "base/guard.h"
#include "base/key_groups.h"
#include "operators/keyed.h"
#include "runtime/accounting.h"
#include "runtime/shuffle.h"
#include "runtime/subtasks.h"

#define ENTRY_RECORD	'R'
#define ENTRY_WATERMARK 'W'
#define ENTRY_BARRIER	'B'

struct Shuffle
{
	Exchange   *ex;
	int			naggs;
	int16	   *typlen;			/* [naggs] */
	bool	   *typbyval;
	StringInfoData group;		/* the record being routed's group key */
	StringInfoData entry;		/* its entry, made whole before it joins an outbox */

	/* Per input (this subtask's own source included): its latest watermark. */
	TimestampTz *in_watermark;
	bool	   *in_idle;
	TimestampTz watermark;		/* what shuffle_watermark last gave */

	int64		barrier_seen;
	bool		barrier_final;

	/* Records received, taken in a batch at a time. */
	struct Arrived *arrived;
	int			narrived;
	int			arrived_capacity;
};

/* A record another subtask sent, decoded. */
typedef struct Arrived
{
	SourceMessage msg;
	TimestampTz event_time;
	const char *group;
	int			group_len;
	Datum	   *args;
	bool	   *nulls;
} Arrived;

static void take_in(Job *job, int from, const char *data, Size len);
static void add_arrived(Job *job);

Shuffle *
shuffle_create(Job *job, Exchange *ex)
{
	Shuffle    *sh = palloc0(sizeof(Shuffle));
	int			n = job->parallelism;

	sh->ex = ex;
	sh->naggs = job->keyed ? keyed_naggs(job->keyed) : 0;
	sh->typlen = palloc0(sizeof(int16) * Max(sh->naggs, 1));
	sh->typbyval = palloc0(sizeof(bool) * Max(sh->naggs, 1));
	for (int a = 0; a < sh->naggs; a++)
		keyed_arg_type(job->keyed, a, &sh->typlen[a], &sh->typbyval[a]);
	initStringInfo(&sh->group);
	initStringInfo(&sh->entry);
	sh->in_watermark = palloc(sizeof(TimestampTz) * n);
	sh->in_idle = palloc0(sizeof(bool) * n);
	for (int k = 0; k < n; k++)
		sh->in_watermark[k] = DT_NOBEGIN;
	sh->watermark = DT_NOBEGIN;
	return sh;
}

static void
put_bytes(StringInfo out, const char *data, int len)
{
	appendBinaryStringInfo(out, (const char *) &len, sizeof(int));
	if (len > 0)
		appendBinaryStringInfo(out, data, len);
}

static const char *
get_bytes(const char **p, int *len)
{
	const char *data;

	memcpy(len, *p, sizeof(int));
	*p += sizeof(int);
	if (*len < 0)
		return NULL;
	data = *p;
	*p += *len;
	return data;
}

#define PUT(out, v)		appendBinaryStringInfo((out), (const char *) &(v), sizeof(v))
#define GET(p, v)		(memcpy(&(v), (p), sizeof(v)), (p) += sizeof(v))

ShuffleRoute
shuffle_route(Job *job, SourceMessage *msg, Record *rec, const Datum *args, const bool *nulls)
{
	Shuffle    *sh = job->shuffle;
	StringInfo	out;
	int			owner;
	char		kind = ENTRY_RECORD;
	TimestampTz t = rec->event_time;

	keyed_group_key(job->keyed, rec, &sh->group);
	owner = key_group_owner(key_group_of(sh->group.data, sh->group.len, job->key_groups),
							job->parallelism, job->key_groups);
	if (owner == job->subtask)
		return keyed_add_group(job->keyed, sh->group.data, sh->group.len, t, args, nulls) ?
			SHUFFLE_ADDED : SHUFFLE_LATE;

	/*
	 * The entry is made aside and appended whole: a record that fails on the
	 * way (a value too big) leaves no half entry in the outbox.
	 */
	out = &sh->entry;
	resetStringInfo(out);
	PUT(out, kind);
	PUT(out, t);
	PUT(out, msg->topic);
	PUT(out, msg->partition);
	PUT(out, msg->offset);
	PUT(out, msg->timestamp);
	put_bytes(out, msg->key, msg->key ? msg->key_len : -1);
	put_bytes(out, msg->value, msg->value ? msg->value_len : -1);
	put_bytes(out, sh->group.data, sh->group.len);
	for (int a = 0; a < sh->naggs; a++)
	{
		Datum		v = args[a];
		Size		size;
		char	   *at;

		/* A toasted argument travels as its value, not as a pointer into this process. */
		if (!nulls[a] && sh->typlen[a] == -1)
			v = PointerGetDatum(PG_DETOAST_DATUM_PACKED(v));
		size = datumEstimateSpace(v, nulls[a], sh->typbyval[a], sh->typlen[a]);
		enlargeStringInfo(out, size);
		at = out->data + out->len;
		datumSerialize(v, nulls[a], sh->typbyval[a], sh->typlen[a], &at);
		out->len += size;
		out->data[out->len] = '\0';
	}
	appendBinaryStringInfo(exchange_outbox(sh->ex, owner), out->data, out->len);
	return SHUFFLE_SENT;
}

/* While a queue is full: the others' records come in, and a subtask gone ends the wait. */
static void
drain_callback(void *arg)
{
	Job		   *job = (Job *) arg;

	subtasks_check(job);
	shuffle_drain(job);
}

void
shuffle_flush(Job *job)
{
	exchange_flush(job->shuffle->ex, drain_callback, job);
}

void
shuffle_drain(Job *job)
{
	Shuffle    *sh = job->shuffle;
	int			from;
	const char *data;
	Size		len;

	while (exchange_receive(sh->ex, &from, &data, &len))
	{
		take_in(job, from, data, len);
		MemoryContextReset(job->batch_context);
	}
}

/* One message from input from: its records, then what follows them. */
static void
take_in(Job *job, int from, const char *data, Size len)
{
	Shuffle    *sh = job->shuffle;
	const char *p = data;
	const char *end = data + len;
	MemoryContext old = MemoryContextSwitchTo(job->batch_context);

	sh->narrived = 0;
	while (p < end)
	{
		char		kind;

		GET(p, kind);
		if (kind == ENTRY_RECORD)
		{
			Arrived    *a;

			if (sh->narrived == sh->arrived_capacity)
			{
				sh->arrived_capacity = Max(64, sh->arrived_capacity * 2);
				sh->arrived = sh->arrived ?
					repalloc(sh->arrived, sizeof(Arrived) * sh->arrived_capacity) :
					MemoryContextAlloc(job->job_context, sizeof(Arrived) * sh->arrived_capacity);
			}
			a = &sh->arrived[sh->narrived++];
			GET(p, a->event_time);
			GET(p, a->msg.topic);
			GET(p, a->msg.partition);
			GET(p, a->msg.offset);
			GET(p, a->msg.timestamp);
			a->msg.key = get_bytes(&p, &a->msg.key_len);
			a->msg.value = get_bytes(&p, &a->msg.value_len);
			a->msg.opaque = NULL;
			a->msg.unreadable = NULL;
			a->group = get_bytes(&p, &a->group_len);
			a->args = palloc(sizeof(Datum) * Max(sh->naggs, 1));
			a->nulls = palloc(sizeof(bool) * Max(sh->naggs, 1));
			for (int i = 0; i < sh->naggs; i++)
			{
				char	   *q = (char *) p;

				a->args[i] = datumRestore(&q, &a->nulls[i]);
				p = q;
			}
			continue;
		}
		/* Records come before what follows them. */
		add_arrived(job);
		if (kind == ENTRY_WATERMARK)
		{
			GET(p, sh->in_watermark[from]);
			GET(p, sh->in_idle[from]);
		}
		else if (kind == ENTRY_BARRIER)
		{
			int64		epoch;
			bool		final;

			GET(p, epoch);
			GET(p, final);
			sh->barrier_seen = Max(sh->barrier_seen, epoch);
			sh->barrier_final |= final;
			exchange_block(sh->ex, from);
			Assert(p == end);
		}
		else
			elog(ERROR, "unknown exchange entry %d from subtask %d", kind, from);
	}
	add_arrived(job);
	MemoryContextSwitchTo(old);
}

static void
add_one(void *arg, int i)
{
	Job		   *job = (Job *) arg;
	Arrived    *a = &job->shuffle->arrived[i];

	job->stage = "aggregate";
	if (keyed_add_group(job->keyed, a->group, a->group_len, a->event_time, a->args, a->nulls))
		job->counters[JC_RECORDS_ACCEPTED]++;
	else
		job_record_late(job, &a->msg, a->event_time);
}

static void
add_failed(void *arg, int i, ErrorData *edata)
{
	Job		   *job = (Job *) arg;

	keyed_abort_record(job->keyed);
	job_record_failed(job, &job->shuffle->arrived[i].msg, "aggregate", guard_error_text(edata));
}

/* The records taken in so far, into the keyed stage, each failing alone. */
static void
add_arrived(Job *job)
{
	Shuffle    *sh = job->shuffle;
	int			n = sh->narrived;

	if (n == 0)
		return;
	sh->narrived = 0;
	guard_each(n, add_one, add_failed, job, job->batch_context);
}

void
shuffle_send_watermark(Job *job, TimestampTz watermark, bool idle)
{
	Shuffle    *sh = job->shuffle;
	char		kind = ENTRY_WATERMARK;

	if (sh->in_watermark[job->subtask] == watermark && sh->in_idle[job->subtask] == idle)
		return;
	sh->in_watermark[job->subtask] = watermark;
	sh->in_idle[job->subtask] = idle;
	for (int k = 0; k < job->parallelism; k++)
	{
		StringInfo	out = exchange_outbox(sh->ex, k);

		if (k == job->subtask)
			continue;
		PUT(out, kind);
		PUT(out, watermark);
		PUT(out, idle);
	}
}

TimestampTz
shuffle_watermark(Job *job)
{
	Shuffle    *sh = job->shuffle;
	TimestampTz low = DT_NOEND;
	TimestampTz high = DT_NOBEGIN;
	bool		any_active = false;

	for (int k = 0; k < job->parallelism; k++)
	{
		high = Max(high, sh->in_watermark[k]);
		if (sh->in_idle[k])
			continue;
		any_active = true;
		low = Min(low, sh->in_watermark[k]);
	}
	sh->watermark = Max(sh->watermark, any_active ? low : high);
	return sh->watermark;
}

void
shuffle_send_barrier(Job *job, int64 epoch, bool final)
{
	Shuffle    *sh = job->shuffle;
	char		kind = ENTRY_BARRIER;

	/* Whatever was routed before the cut goes before the barrier. */
	shuffle_flush(job);
	for (int k = 0; k < job->parallelism; k++)
	{
		StringInfo	out = exchange_outbox(sh->ex, k);

		if (k == job->subtask)
			continue;
		PUT(out, kind);
		PUT(out, epoch);
		PUT(out, final);
	}
	shuffle_flush(job);
}

int64
shuffle_barrier_seen(Job *job, bool *final)
{
	if (final)
		*final = job->shuffle->barrier_final;
	return job->shuffle->barrier_seen;
}

bool
shuffle_aligned(Job *job)
{
	for (int k = 0; k < job->parallelism; k++)
		if (k != job->subtask && !exchange_is_blocked(job->shuffle->ex, k))
			return false;
	return true;
}

void
shuffle_end_alignment(Job *job)
{
	exchange_unblock_all(job->shuffle->ex);
	job->shuffle->barrier_final = false;
}
