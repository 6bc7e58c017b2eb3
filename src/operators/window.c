/*
 * window.c
 *		Event-time windows of the keyed stage: tumbling and sliding windows
 *		aligned to the Unix epoch, session windows per key, their timers,
 *		firing, allowed lateness and purging (window.h; the state layout is
 *		in keyed_state.h).
 *
 * A window fires when the watermark reaches its end: its row is emitted
 * then (emit "final"), and also at each checkpoint while it changes (emit
 * "update", or a fired window updated within its allowed lateness).  Its
 * state is purged once the watermark passes end + allowed_lateness; a
 * record for it after that is late.  A window that receives its first
 * record when the watermark is already past its end (within lateness) is
 * complete at once: its row goes out at the next checkpoint.
 *
 * Design: docs/ARCHITECTURE.md, "Windows and timers".
 */
#include "postgres.h"

#include "common/int.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "base/mailer.h"
#include "operators/window.h"

static bool session_add(KeyedStage *stage, TimestampTz t, const char *group, int group_len);
static void fire_timer(KeyedStage *stage, const char *key, int klen);
static void purge_timer(KeyedStage *stage, const char *key, int klen);
static void schedule_purge(KeyedStage *stage, const char *group, int group_len,
						   TimestampTz start, TimestampTz end);
static void put_timer(KeyedStage *stage, char kind, TimestampTz when, const char *group,
					  int group_len, TimestampTz start);
static List *due_timers(KeyedStage *stage, char kind, TimestampTz watermark);
static bool timer_window(KeyedStage *stage, const char *key, int klen, KeyedEntry **e,
						 Session **session);
static KeyedEntry *lookup_window(KeyedStage *stage, char kind, const char *group, int group_len,
								 TimestampTz start, bool create);
static Session *find_session(KeyedEntry *e, TimestampTz start);
static void restore_timer(KeyedStage *stage, const char *group, int group_len,
						  TimestampTz start, TimestampTz end, bool fired);

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
purge_time(KeyedStage *stage, TimestampTz end)
{
	TimestampTz when;

	if (pg_add_s64_overflow(end, stage->plan->window->allowed_lateness_us, &when))
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
window_add(KeyedStage *stage, TimestampTz t, const char *group, int group_len)
{
	WindowSpec *w = stage->plan->window;
	int128		first;
	int			nwindows;
	int			naggs = Max(stage->naggs, 1);
	int			n = 0;

	if (w->type == WINDOW_SESSION)
		return session_add(stage, t, group, group_len);

	/*
	 * Every window [start, start + size) holding t, start aligned to slide:
	 * size/slide of them, from first down.  In 128 bits, so that no sum
	 * wraps near the ends of the range.
	 */
	nwindows = (int) (w->size_us / w->slide_us);
	first = floor_div((int128) t + UNIX_OFFSET_US, w->slide_us) * w->slide_us - UNIX_OFFSET_US;
	check_window_range(t, first - (int128) (nwindows - 1) * w->slide_us, first + w->size_us);
	keyed_scratch(stage, nwindows);
	for (int i = 0; i < nwindows; i++)
	{
		TimestampTz start = (TimestampTz) (first - (int128) i * w->slide_us);
		TimestampTz end = start + w->size_us;
		KeyedEntry *e;

		CHECK_FOR_INTERRUPTS();
		if (purge_time(stage, end) <= stage->watermark)
			break;				/* purged, or would be, as every older one */
		e = lookup_window(stage, 'W', group, group_len, start, true);
		/* A window not made yet (start DT_NOBEGIN) has the values of no rows. */
		keyed_compute(stage, e->values, &stage->next[n * naggs]);
		stage->windows[n++] = e;
	}
	for (int i = 0; i < n; i++)
	{
		KeyedEntry *e = stage->windows[i];

		if (e->start == DT_NOBEGIN)
		{
			e->start = (TimestampTz) (first - (int128) i * w->slide_us);
			e->end = e->start + w->size_us;
			if (e->end <= stage->watermark)
			{
				e->fired = true;
				schedule_purge(stage, group, group_len, e->start, e->end);
			}
			else
				put_timer(stage, 'F', e->end, group, group_len, e->start);
		}
		keyed_store(stage, e->values, &stage->next[i * naggs]);
		e->unemitted = true;
		keyed_mark_dirty(stage, e);
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
session_add(KeyedStage *stage, TimestampTz t, const char *group, int group_len)
{
	WindowSpec *w = stage->plan->window;
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
	e = lookup_window(stage, 'S', group, group_len, 0, true);
	foreach(lc, e->sessions)
	{
		Session    *s = lfirst(lc);

		if (s->start < end && t < s->end)
			overlap = lappend(overlap, s);
	}
	if (overlap == NIL && purge_time(stage, end) <= stage->watermark)
		return false;

	if (overlap == NIL)
		keyed_compute(stage, stage->empty, stage->next);
	else
	{
		target = linitial(overlap);
		keyed_compute(stage, target->values, stage->next);
		foreach(lc, overlap)
		{
			Session    *s = lfirst(lc);

			start = Min(start, s->start);
			end = Max(end, s->end);
			if (s == target)
				continue;
			CHECK_FOR_INTERRUPTS();
			for (int a = 0; a < stage->naggs; a++)
				aggregate_merge(stage->aggs[a], &stage->next[a], &s->values[a], &stage->next[a]);
		}
	}

	/* Nothing fails from here on. */
	/* The key's last session was purged since the checkpoint: the key lives on. */
	e->deleted = false;
	old = MemoryContextSwitchTo(stage->cache_context);
	if (overlap == NIL)
	{
		target = palloc0(sizeof(Session));
		target->values = keyed_values_new(&stage->codec);
		target->emitted_start = DT_NOBEGIN;
		target->start = t;
		target->end = end;
		e->sessions = lappend(e->sessions, target);
	}
	else
		target = linitial(overlap);
	keyed_store(stage, target->values, stage->next);

	foreach(lc, overlap)
	{
		Session    *s = lfirst(lc);

		/* A row emitted under another start than the merged one's must go. */
		if (s->emitted_start != DT_NOBEGIN)
		{
			if (s->emitted_start != start)
				keyed_emit(stage, group, group_len, s->emitted_start, s->end, s->values, true);
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
		if (end <= stage->watermark)
			schedule_purge(stage, group, group_len, start, end);
		else
			put_timer(stage, 'F', end, group, group_len, start);
	}
	target->emitted_start = kept_row ? start : DT_NOBEGIN;
	target->start = start;
	target->end = end;
	target->fired = end <= stage->watermark;
	target->unemitted = true;
	keyed_mark_dirty(stage, e);
	return true;
}

void
window_fire(KeyedStage *stage, TimestampTz watermark)
{
	List	   *timers;
	ListCell   *lc;

	timers = due_timers(stage, 'F', watermark);
	foreach(lc, timers)
	{
		StateKey   *k = lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		fire_timer(stage, k->data, k->len);
	}
	timers = due_timers(stage, 'P', watermark);
	foreach(lc, timers)
	{
		StateKey   *k = lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		purge_timer(stage, k->data, k->len);
	}
}

/*
 * The timers of a kind due at watermark, as state keys of the timer layout
 * (kind, time, group key, window start), in the order of those keys.
 */
static List *
due_timers(KeyedStage *stage, char kind, TimestampTz watermark)
{
	List	   *due = NIL;
	ListCell   *lc;

	foreach(lc, timer_index_due(stage->timers, kind, watermark))
	{
		DueTimer   *t = lfirst(lc);
		StringInfoData key;
		StateKey   *k = palloc(sizeof(StateKey));

		/* Sized exactly: a watermark step may list every window of the stage. */
		key.maxlen = 1 + 8 + t->len + 1;
		key.data = palloc(key.maxlen);
		key.len = 0;
		key.data[0] = '\0';
		key.cursor = 0;
		appendStringInfoChar(&key, kind);
		keyed_key_append_time(&key, t->when);
		appendBinaryStringInfo(&key, t->tail, t->len);
		k->data = key.data;
		k->len = key.len;
		due = lappend(due, k);
	}
	return due;
}

/* Timer keys: kind, time, group key, window start. */
static void
timer_key(StringInfo key, char kind, TimestampTz when, const char *group, int group_len,
		  TimestampTz start)
{
	initStringInfo(key);
	appendStringInfoChar(key, kind);
	keyed_key_append_time(key, when);
	appendBinaryStringInfo(key, group, group_len);
	keyed_key_append_time(key, start);
}

#define TIMER_GROUP(key) ((key) + 9)
#define TIMER_GROUP_LEN(klen) ((klen) - 17)
#define TIMER_START(key, klen) keyed_key_read_time((key) + (klen) - 8)

/*
 * The window a timer is for, or false when it is gone: *e is its entry,
 * *session the session for a session window (NULL otherwise).
 */
static bool
timer_window(KeyedStage *stage, const char *key, int klen, KeyedEntry **e, Session **session)
{
	const char *group = TIMER_GROUP(key);
	int			group_len = TIMER_GROUP_LEN(klen);
	TimestampTz start = TIMER_START(key, klen);

	*session = NULL;
	if (stage->plan->window->type == WINDOW_SESSION)
	{
		*e = lookup_window(stage, 'S', group, group_len, 0, false);
		*session = *e ? find_session(*e, start) : NULL;
		return *session != NULL;
	}
	*e = lookup_window(stage, 'W', group, group_len, start, false);
	/* A window a failed record looked up but never made has no timers; be sure. */
	return *e != NULL && !(*e)->deleted && (*e)->start != DT_NOBEGIN;
}

static void
fire_timer(KeyedStage *stage, const char *key, int klen)
{
	const char *group = TIMER_GROUP(key);
	int			group_len = TIMER_GROUP_LEN(klen);
	TimestampTz end = keyed_key_read_time(key + 1);
	TimestampTz start = TIMER_START(key, klen);
	KeyedEntry *e;
	Session    *s;
	bool	   *fired;

	if (!timer_window(stage, key, klen, &e, &s))
		return;
	if (s && s->end != end)
		return;					/* merged or extended since: another timer is due */
	fired = s ? &s->fired : &e->fired;
	if (!*fired)
	{
		keyed_emit(stage, group, group_len, start, end, s ? s->values : e->values, false);
		*fired = true;
		if (s)
		{
			s->unemitted = false;
			s->emitted_start = start;
		}
		else
			e->unemitted = false;
		keyed_mark_dirty(stage, e);
	}
	schedule_purge(stage, group, group_len, start, end);
}

/* Purge now if the watermark is past end + lateness, else set a timer. */
static void
schedule_purge(KeyedStage *stage, const char *group, int group_len, TimestampTz start, TimestampTz end)
{
	TimestampTz when = purge_time(stage, end);
	StringInfoData key;

	if (when > stage->watermark)
	{
		put_timer(stage, 'P', when, group, group_len, start);
		return;
	}
	timer_key(&key, 'P', when, group, group_len, start);
	purge_timer(stage, key.data, key.len);
}

static void
purge_timer(KeyedStage *stage, const char *key, int klen)
{
	const char *group = TIMER_GROUP(key);
	int			group_len = TIMER_GROUP_LEN(klen);
	KeyedEntry *e;
	Session    *s;

	if (!timer_window(stage, key, klen, &e, &s))
		return;
	if (s)
	{
		if (purge_time(stage, s->end) > stage->watermark)
			return;				/* extended since: purged later */
		/* Updated within lateness since its row was written: write it before it goes. */
		if (s->unemitted)
			keyed_emit(stage, group, group_len, s->start, s->end, s->values, false);
		e->sessions = list_delete_ptr(e->sessions, s);
		if (e->sessions == NIL)
			e->deleted = true;
	}
	else
	{
		if (e->unemitted)
		{
			keyed_emit(stage, group, group_len, e->start, e->end, e->values, false);
			e->unemitted = false;
		}
		e->deleted = true;
	}
	keyed_mark_dirty(stage, e);
}

/*
 * The timers of the restored state, from its window entries: an unfired
 * window fires at its end, a fired one is purged at end + lateness (the
 * timers a session's earlier extents left were no-ops, and are not made
 * again).  The state holds the subtask's own key groups only, so these
 * are the timers of its keys.  A timer at or before the watermark was
 * handled before the checkpoint was taken (the stage reaches the
 * checkpoint's watermark first), and is not made.
 */
void
window_restore_timers(KeyedStage *stage)
{
	MemoryContext ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer timer rebuild",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(ctx);
	KeyedCodec	codec = stage->codec;
	char		kind = stage->plan->window->type == WINDOW_SESSION ? 'S' : 'W';
	char		to = kind + 1;
	StateIterator *it;
	const char *key;
	const char *val;
	int			klen;
	int			vlen;
	int64		n = 0;

	codec.ctx = ctx;
	it = stage->state->ops->iterate(stage->state, &kind, 1, &to, 1);
	while (stage->state->ops->next(it, &key, &klen, &val, &vlen))
	{
		KeyedEntry	e;
		const char *group = key + 1;
		int			group_len = klen - 1 - (kind == 'W' ? 8 : 0);
		ListCell   *lc;

		memset(&e, 0, sizeof(e));
		e.key.data = key;
		e.key.len = klen;
		if (kind == 'W')
			e.values = keyed_values_new(&codec);
		keyed_entry_deserialize(&codec, &e, val, vlen);
		if (kind == 'W')
			restore_timer(stage, group, group_len, e.start, e.end, e.fired);
		foreach(lc, e.sessions)
		{
			Session    *s = lfirst(lc);

			restore_timer(stage, group, group_len, s->start, s->end, s->fired);
		}
		if (++n % 10000 == 0)
		{
			CHECK_FOR_INTERRUPTS();
			MemoryContextReset(ctx);
		}
	}
	stage->state->ops->iterate_end(it);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(ctx);
}

static void
restore_timer(KeyedStage *stage, const char *group, int group_len, TimestampTz start,
			  TimestampTz end, bool fired)
{
	char		kind = fired ? 'P' : 'F';
	TimestampTz when = fired ? purge_time(stage, end) : end;

	if (when > stage->watermark)
		put_timer(stage, kind, when, group, group_len, start);
}

void
window_emit_changed(KeyedStage *stage, KeyedEntry *e)
{
	bool		update = stage->plan->window->emit_update;
	const char *group = e->key.data + e->group_offset;
	ListCell   *lc;

	if (e->key.data[0] == 'W')
	{
		if (e->unemitted && (update || e->fired))
		{
			keyed_emit(stage, group, e->group_len, e->start, e->end, e->values, false);
			e->unemitted = false;
		}
		return;
	}
	foreach(lc, e->sessions)
	{
		Session    *s = lfirst(lc);

		if (s->unemitted && (update || s->fired))
		{
			keyed_emit(stage, group, e->group_len, s->start, s->end, s->values, false);
			s->unemitted = false;
			s->emitted_start = s->start;
		}
	}
}

/* A timer; the record's undo takes it away again (keyed_abort_record). */
static void
put_timer(KeyedStage *stage, char kind, TimestampTz when, const char *group, int group_len,
		  TimestampTz start)
{
	StringInfo	tail = &stage->timer_tail;
	TimerMark  *mark = NULL;

	resetStringInfo(tail);
	appendBinaryStringInfo(tail, group, group_len);
	keyed_key_append_time(tail, start);
	if (stage->undo_active)
	{
		MemoryContext old = MemoryContextSwitchTo(stage->undo_context);

		mark = palloc(sizeof(TimerMark));
		stage->undo_timers = lappend(stage->undo_timers, mark);
		MemoryContextSwitchTo(old);
	}
	timer_index_add(stage->timers, kind, when, tail->data, tail->len, mark);
}

static KeyedEntry *
lookup_window(KeyedStage *stage, char kind, const char *group, int group_len, TimestampTz start,
			  bool create)
{
	keyed_key_begin(stage, kind);
	appendBinaryStringInfo(&stage->key, group, group_len);
	if (kind == 'W')
		keyed_key_append_time(&stage->key, start);
	return keyed_lookup(stage, stage->key.data, stage->key.len, create);
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
