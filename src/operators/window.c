/*
 * window.c
 *		Event-time windows of the keyed stage: tumbling and sliding windows
 *		aligned to the Unix epoch, session windows per key, their timers,
 *		firing, allowed lateness and purging (see keyed_internal.h for the
 *		state layout).
 *
 * A window fires when the watermark reaches its end: its row is emitted
 * then (emit "final"), and also at each checkpoint while it changes (emit
 * "update", or a fired window updated within its allowed lateness).  Its
 * state is purged once the watermark passes end + allowed_lateness; a
 * record for it after that is late.  A window that receives its first
 * record when the watermark is already past its end (within lateness) is
 * complete at once: its row goes out at the next checkpoint.
 */
#include "postgres.h"

#include "common/int.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "operators/keyed_internal.h"
#include "state/serial.h"

#define UNIX_OFFSET_US ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

static bool session_add(KeyedStage *ks, TimestampTz t, const char *group, int group_len);
static void fire_timer(KeyedStage *ks, const char *key, int klen);
static void purge_timer(KeyedStage *ks, const char *key, int klen);
static void schedule_purge(KeyedStage *ks, const char *group, int group_len,
						   TimestampTz start, TimestampTz end);
static void put_timer(KeyedStage *ks, char kind, TimestampTz when, const char *group,
					  int group_len, TimestampTz start);
static List *due_timers(KeyedStage *ks, char kind, TimestampTz after, TimestampTz watermark);
static bool timer_window(KeyedStage *ks, const char *key, int klen, KeyedEntry **e,
						 Session **session);
static KeyedEntry *lookup_window(KeyedStage *ks, char kind, const char *group, int group_len,
								 TimestampTz start, bool create);
static Session *find_session(KeyedEntry *e, TimestampTz start);

static int128
floor_div(int128 a, int64 b)
{
	int128		q = a / b;

	if (a % b != 0 && (a < 0) != (b < 0))
		q--;
	return q;
}

/*
 * When a window ending at end is purged.  The sum can pass the end of
 * int64 for a window near the end of timestamptz: such a window lives until
 * the watermark is infinite (the end of a bounded stream).
 */
static TimestampTz
purge_time(KeyedStage *ks, TimestampTz end)
{
	TimestampTz when;

	if (pg_add_s64_overflow(end, ks->plan->window->allowed_lateness_us, &when))
		return DT_NOEND;
	return when;
}

/* A record's window must begin and end within timestamptz's range. */
static void
check_window_range(TimestampTz t, int128 start, int128 end)
{
	if (start < MIN_TIMESTAMP || end >= END_TIMESTAMP)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("a window of event time %s is out of the timestamp range",
						timestamptz_to_str(t)),
				 errhint("Windows must begin and end between 4714-11-24 BC and 294276-12-31 AD.")));
}

/*
 * In two passes: every window's new values are computed first, so that a
 * record that raises an error (an overflow, a window out of range) has
 * changed nothing; then windows and timers are made and the values stored.
 */
bool
window_add(KeyedStage *ks, Record *rec, const char *group, int group_len)
{
	WindowSpec *w = ks->plan->window;
	TimestampTz t = rec->event_time;
	int128		first;
	int			nwindows;
	int			naggs = Max(ks->naggs, 1);
	int			n = 0;

	if (w->type == WINDOW_SESSION)
		return session_add(ks, t, group, group_len);

	/*
	 * Every window [start, start + size) holding t, start aligned to slide:
	 * size/slide of them, from first down.  In 128 bits, so that no sum
	 * wraps near the ends of the range.
	 */
	nwindows = (int) (w->size_us / w->slide_us);
	first = floor_div((int128) t + UNIX_OFFSET_US, w->slide_us) * w->slide_us - UNIX_OFFSET_US;
	check_window_range(t, first - (int128) (nwindows - 1) * w->slide_us, first + w->size_us);
	keyed_scratch(ks, nwindows);
	for (int i = 0; i < nwindows; i++)
	{
		TimestampTz start = (TimestampTz) (first - (int128) i * w->slide_us);
		TimestampTz end = start + w->size_us;
		KeyedEntry *e;

		CHECK_FOR_INTERRUPTS();
		if (purge_time(ks, end) <= ks->watermark)
			break;				/* purged, or would be, as every older one */
		e = lookup_window(ks, 'W', group, group_len, start, true);
		/* A window not made yet (start DT_NOBEGIN) has the values of no rows. */
		keyed_compute(ks, e->values, &ks->next[n * naggs]);
		ks->windows[n++] = e;
	}
	for (int i = 0; i < n; i++)
	{
		KeyedEntry *e = ks->windows[i];

		if (e->start == DT_NOBEGIN)
		{
			e->start = (TimestampTz) (first - (int128) i * w->slide_us);
			e->end = e->start + w->size_us;
			if (e->end <= ks->watermark)
			{
				e->fired = true;
				schedule_purge(ks, group, group_len, e->start, e->end);
			}
			else
				put_timer(ks, 'F', e->end, group, group_len, e->start);
		}
		keyed_store(ks, e->values, &ks->next[i * naggs]);
		e->unemitted = true;
		keyed_mark_dirty(ks, e);
	}
	return n > 0;
}

/*
 * Sessions: an event at t spans [t, t + gap); the sessions of its key that
 * overlap that span merge with it into one.  A merged session's row
 * replaces the rows its parts were emitted under.  As for other windows,
 * the merged values are computed before anything changes.
 */
static bool
session_add(KeyedStage *ks, TimestampTz t, const char *group, int group_len)
{
	WindowSpec *w = ks->plan->window;
	KeyedEntry *e;
	List	   *overlap = NIL;
	ListCell   *lc;
	Session    *target;
	TimestampTz start = t;
	TimestampTz end;
	bool		kept_row = false;
	MemoryContext old;

	check_window_range(t, t, (int128) t + w->gap_us);
	end = t + w->gap_us;
	e = lookup_window(ks, 'S', group, group_len, 0, true);
	foreach(lc, e->sessions)
	{
		Session    *s = lfirst(lc);

		if (s->start < end && t < s->end)
			overlap = lappend(overlap, s);
	}
	if (overlap == NIL && purge_time(ks, end) <= ks->watermark)
		return false;

	if (overlap == NIL)
		keyed_compute(ks, ks->empty, ks->next);
	else
	{
		target = linitial(overlap);
		keyed_compute(ks, target->values, ks->next);
		foreach(lc, overlap)
		{
			Session    *s = lfirst(lc);

			start = Min(start, s->start);
			end = Max(end, s->end);
			if (s == target)
				continue;
			CHECK_FOR_INTERRUPTS();
			for (int a = 0; a < ks->naggs; a++)
				aggregate_merge(ks->aggs[a], &ks->next[a], &s->values[a], &ks->next[a]);
		}
	}

	/* Nothing fails from here on. */
	/* The key's last session was purged since the checkpoint: the key lives on. */
	e->deleted = false;
	old = MemoryContextSwitchTo(ks->cache_context);
	if (overlap == NIL)
	{
		target = palloc0(sizeof(Session));
		target->values = keyed_new_values(ks);
		target->emitted_start = DT_NOBEGIN;
		target->start = t;
		target->end = end;
		e->sessions = lappend(e->sessions, target);
	}
	else
		target = linitial(overlap);
	keyed_store(ks, target->values, ks->next);

	foreach(lc, overlap)
	{
		Session    *s = lfirst(lc);

		/* A row emitted under another start than the merged one's must go. */
		if (s->emitted_start != DT_NOBEGIN)
		{
			if (s->emitted_start != start)
				keyed_emit(ks, group, group_len, s->emitted_start, s->end, s->values, true);
			else
				kept_row = true;
		}
		if (s != target)
			e->sessions = list_delete_ptr(e->sessions, s);
	}
	MemoryContextSwitchTo(old);

	/* Timers are keyed by the session's start too: a new start needs new timers. */
	if (end != target->end || start != target->start || overlap == NIL)
	{
		if (end <= ks->watermark)
			schedule_purge(ks, group, group_len, start, end);
		else
			put_timer(ks, 'F', end, group, group_len, start);
	}
	target->emitted_start = kept_row ? start : DT_NOBEGIN;
	target->start = start;
	target->end = end;
	target->fired = end <= ks->watermark;
	target->unemitted = true;
	keyed_mark_dirty(ks, e);
	return true;
}

void
window_fire(KeyedStage *ks, TimestampTz previous, TimestampTz watermark)
{
	MemoryContext old = MemoryContextSwitchTo(ks->job->batch_context);
	List	   *timers;
	ListCell   *lc;

	timers = due_timers(ks, 'F', previous, watermark);
	foreach(lc, timers)
	{
		StateKey   *k = lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		fire_timer(ks, k->data, k->len);
	}
	timers = due_timers(ks, 'P', previous, watermark);
	foreach(lc, timers)
	{
		StateKey   *k = lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		purge_timer(ks, k->data, k->len);
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(ks->job->batch_context);
}

/* The timers of a kind due at watermark, copied (the caller changes state). */
static List *
due_timers(KeyedStage *ks, char kind, TimestampTz after, TimestampTz watermark)
{
	StringInfoData from;
	StringInfoData to;
	StateIterator *it;
	const char *key;
	const char *val;
	int			klen;
	int			vlen;
	List	   *due = NIL;

	/*
	 * Every timer at or before the previous watermark has been handled (no
	 * timer is ever set behind the watermark): starting after it skips
	 * their deletions, which RocksDB would otherwise scan again each time.
	 */
	initStringInfo(&from);
	appendStringInfoChar(&from, kind);
	if (after != DT_NOBEGIN)
		keyed_key_append_time(&from, after + 1);
	initStringInfo(&to);
	if (watermark == DT_NOEND)
		appendStringInfoChar(&to, kind + 1);
	else
	{
		appendStringInfoChar(&to, kind);
		keyed_key_append_time(&to, watermark + 1);
	}
	it = ks->state->ops->iterate(ks->state, from.data, from.len, to.data, to.len);
	while (ks->state->ops->next(it, &key, &klen, &val, &vlen))
	{
		StateKey   *k = palloc(sizeof(StateKey));
		char	   *copy = palloc(klen);

		memcpy(copy, key, klen);
		k->data = copy;
		k->len = klen;
		due = lappend(due, k);
	}
	ks->state->ops->iterate_end(it);
	return due;
}

/* Timer keys: kind, time, group key, window start. */
#define TIMER_GROUP(key) ((key) + 9)
#define TIMER_GROUP_LEN(klen) ((klen) - 17)
#define TIMER_START(key, klen) keyed_key_read_time((key) + (klen) - 8)

/*
 * The window a timer is for, or false when it is gone: *e is its entry,
 * *session the session for a session window (NULL otherwise).  The timer
 * itself is deleted: it is due.
 */
static bool
timer_window(KeyedStage *ks, const char *key, int klen, KeyedEntry **e, Session **session)
{
	const char *group = TIMER_GROUP(key);
	int			group_len = TIMER_GROUP_LEN(klen);
	TimestampTz start = TIMER_START(key, klen);

	keyed_undo_timer(ks, key, klen, false);
	ks->state->ops->delete(ks->state, key, klen);
	*session = NULL;
	if (ks->plan->window->type == WINDOW_SESSION)
	{
		*e = lookup_window(ks, 'S', group, group_len, 0, false);
		*session = *e ? find_session(*e, start) : NULL;
		return *session != NULL;
	}
	*e = lookup_window(ks, 'W', group, group_len, start, false);
	/* A window a failed record looked up but never made has no timers; be sure. */
	return *e != NULL && !(*e)->deleted && (*e)->start != DT_NOBEGIN;
}

static void
fire_timer(KeyedStage *ks, const char *key, int klen)
{
	const char *group = TIMER_GROUP(key);
	int			group_len = TIMER_GROUP_LEN(klen);
	TimestampTz end = keyed_key_read_time(key + 1);
	TimestampTz start = TIMER_START(key, klen);
	KeyedEntry *e;
	Session    *s;
	bool	   *fired;

	if (!timer_window(ks, key, klen, &e, &s))
		return;
	if (s && s->end != end)
		return;					/* merged or extended since: another timer is due */
	fired = s ? &s->fired : &e->fired;
	if (!*fired)
	{
		keyed_emit(ks, group, group_len, start, end, s ? s->values : e->values, false);
		*fired = true;
		if (s)
		{
			s->unemitted = false;
			s->emitted_start = start;
		}
		else
			e->unemitted = false;
		keyed_mark_dirty(ks, e);
	}
	schedule_purge(ks, group, group_len, start, end);
}

/* Purge now if the watermark is past end + lateness, else set a timer. */
static void
schedule_purge(KeyedStage *ks, const char *group, int group_len, TimestampTz start, TimestampTz end)
{
	TimestampTz when = purge_time(ks, end);
	StringInfoData key;

	if (when > ks->watermark)
	{
		put_timer(ks, 'P', when, group, group_len, start);
		return;
	}
	initStringInfo(&key);
	appendStringInfoChar(&key, 'P');
	keyed_key_append_time(&key, when);
	appendBinaryStringInfo(&key, group, group_len);
	keyed_key_append_time(&key, start);
	purge_timer(ks, key.data, key.len);
}

static void
purge_timer(KeyedStage *ks, const char *key, int klen)
{
	const char *group = TIMER_GROUP(key);
	int			group_len = TIMER_GROUP_LEN(klen);
	KeyedEntry *e;
	Session    *s;

	if (!timer_window(ks, key, klen, &e, &s))
		return;
	if (s)
	{
		if (purge_time(ks, s->end) > ks->watermark)
			return;				/* extended since: purged later */
		/* Updated within lateness since its row was written: write it before it goes. */
		if (s->unemitted)
			keyed_emit(ks, group, group_len, s->start, s->end, s->values, false);
		e->sessions = list_delete_ptr(e->sessions, s);
		if (e->sessions == NIL)
			e->deleted = true;
	}
	else
	{
		if (e->unemitted)
		{
			keyed_emit(ks, group, group_len, e->start, e->end, e->values, false);
			e->unemitted = false;
		}
		e->deleted = true;
	}
	keyed_mark_dirty(ks, e);
}

void
window_emit_changed(KeyedStage *ks, KeyedEntry *e)
{
	bool		update = ks->plan->window->emit_update;
	const char *group = e->key.data + e->group_offset;
	ListCell   *lc;

	if (e->key.data[0] == 'W')
	{
		if (e->unemitted && (update || e->fired))
		{
			keyed_emit(ks, group, e->group_len, e->start, e->end, e->values, false);
			e->unemitted = false;
		}
		return;
	}
	foreach(lc, e->sessions)
	{
		Session    *s = lfirst(lc);

		if (s->unemitted && (update || s->fired))
		{
			keyed_emit(ks, group, e->group_len, s->start, s->end, s->values, false);
			s->unemitted = false;
			s->emitted_start = s->start;
		}
	}
}

static void
put_timer(KeyedStage *ks, char kind, TimestampTz when, const char *group, int group_len,
		  TimestampTz start)
{
	StringInfoData key;

	initStringInfo(&key);
	appendStringInfoChar(&key, kind);
	keyed_key_append_time(&key, when);
	appendBinaryStringInfo(&key, group, group_len);
	keyed_key_append_time(&key, start);
	keyed_undo_timer(ks, key.data, key.len, true);
	ks->state->ops->put(ks->state, key.data, key.len, "", 0);
	pfree(key.data);
}

static KeyedEntry *
lookup_window(KeyedStage *ks, char kind, const char *group, int group_len, TimestampTz start,
			  bool create)
{
	keyed_key_begin(ks, kind);
	appendBinaryStringInfo(&ks->key, group, group_len);
	if (kind == 'W')
		keyed_key_append_time(&ks->key, start);
	return keyed_lookup(ks, ks->key.data, ks->key.len, create);
}

static Session *
find_session(KeyedEntry *e, TimestampTz start)
{
	ListCell   *lc;

	foreach(lc, e->sessions)
	{
		Session    *s = lfirst(lc);

		if (s->start == start)
			return s;
	}
	return NULL;
}

/*
 * Serialized forms:
 *		'W': start, end, fired, unemitted, aggregates
 *		'S': count, then per session: start, end, fired, unemitted,
 *			 emitted_start, aggregates
 */
void
window_serialize(KeyedStage *ks, KeyedEntry *e, StringInfo buf)
{
	ListCell   *lc;

	if (e->key.data[0] == 'W')
	{
		serial_put(buf, &e->start, sizeof(TimestampTz));
		serial_put(buf, &e->end, sizeof(TimestampTz));
		serial_put(buf, &e->fired, sizeof(bool));
		serial_put(buf, &e->unemitted, sizeof(bool));
		for (int a = 0; a < ks->naggs; a++)
			aggregate_serialize(ks->aggs[a], &e->values[a], buf);
		return;
	}
	{
		int32		n = list_length(e->sessions);

		serial_put(buf, &n, sizeof(int32));
	}
	foreach(lc, e->sessions)
	{
		Session    *s = lfirst(lc);

		serial_put(buf, &s->start, sizeof(TimestampTz));
		serial_put(buf, &s->end, sizeof(TimestampTz));
		serial_put(buf, &s->fired, sizeof(bool));
		serial_put(buf, &s->unemitted, sizeof(bool));
		serial_put(buf, &s->emitted_start, sizeof(TimestampTz));
		for (int a = 0; a < ks->naggs; a++)
			aggregate_serialize(ks->aggs[a], &s->values[a], buf);
	}
}

void
window_deserialize(KeyedStage *ks, KeyedEntry *e, const char *data, int len)
{
	MemoryContext old = MemoryContextSwitchTo(ks->cache_context);
	int			pos = 0;

	if (e->key.data[0] == 'W')
	{
		serial_get(data, len, &pos, &e->start, sizeof(TimestampTz));
		serial_get(data, len, &pos, &e->end, sizeof(TimestampTz));
		serial_get(data, len, &pos, &e->fired, sizeof(bool));
		serial_get(data, len, &pos, &e->unemitted, sizeof(bool));
		/* e->values is the entry's own (keyed_lookup) */
		for (int a = 0; a < ks->naggs; a++)
			aggregate_deserialize(ks->aggs[a], &e->values[a], data, len, &pos, ks->cache_context);
	}
	else
	{
		int32		n;

		serial_get(data, len, &pos, &n, sizeof(int32));
		for (int i = 0; i < n; i++)
		{
			Session    *s = palloc0(sizeof(Session));

			serial_get(data, len, &pos, &s->start, sizeof(TimestampTz));
			serial_get(data, len, &pos, &s->end, sizeof(TimestampTz));
			serial_get(data, len, &pos, &s->fired, sizeof(bool));
			serial_get(data, len, &pos, &s->unemitted, sizeof(bool));
			serial_get(data, len, &pos, &s->emitted_start, sizeof(TimestampTz));
			s->values = keyed_new_values(ks);
			for (int a = 0; a < ks->naggs; a++)
				aggregate_deserialize(ks->aggs[a], &s->values[a], data, len, &pos,
									  ks->cache_context);
			e->sessions = lappend(e->sessions, s);
		}
	}
	serial_check_end(len, pos);
	MemoryContextSwitchTo(old);
}
