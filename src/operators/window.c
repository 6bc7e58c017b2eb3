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
 * Timers are kept in memory (timer_index.c) and made again from the window
 * entries when the stage starts.  Sliding windows whose aggregates combine
 * exactly are kept as panes of slide (see "Panes" below).
 *
 * Design: docs/ARCHITECTURE.md, "Windows and timers".
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "common/int.h"
#include "miscadmin.h"
#include "utils/fmgrprotos.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "base/cpu_prefetch.h"
#include "base/mailer.h"
#include "operators/window.h"

/* The windows changed since the checkpoint, of a stage that keeps panes. */
typedef struct ChangedSlot
{
	StateKey	key;			/* group key, window start */
	uint32		hash;
	char		status;
} ChangedSlot;

#define SH_PREFIX wchanged
#define SH_ELEMENT_TYPE ChangedSlot
#include "state/state_key_table.h"

static bool session_add(KeyedStage *stage, TimestampTz t, const char *group, int group_len);
static uint32 *session_hashes(KeyedStage *stage, List *timers);
static void session_prefetch(KeyedStage *stage, const uint32 *hashes, int n, int i);
static void fire_timer(KeyedStage *stage, const char *key, int klen);
static void purge_timer(KeyedStage *stage, const char *key, int klen);
static void purge_window(KeyedStage *stage, const char *group, int group_len, KeyedEntry *e,
						 Session *s);
static void schedule_purge(KeyedStage *stage, const char *group, int group_len,
						   TimestampTz start, TimestampTz end);
static void put_timer(KeyedStage *stage, char kind, TimestampTz when, const char *group,
					  int group_len, TimestampTz start);
static List *due_timers(KeyedStage *stage, char kind, TimestampTz watermark);
static void each_due_timer(KeyedStage *stage, char kind, List *timers);
static StateKey *timer_state_key(char kind, TimestampTz when, const char *tail, int tail_len);
static List *merge_timers(List *a, List *b);
static bool timer_window(KeyedStage *stage, const char *key, int klen, KeyedEntry **e,
						 Session **session);
static KeyedEntry *lookup_window(KeyedStage *stage, char kind, const char *group, int group_len,
								 TimestampTz start, bool create);
static void window_key(KeyedStage *stage, char kind, const char *group, int group_len,
					   TimestampTz start);
static KeyedEntry *lookup_unended(KeyedStage *stage, char kind, const char *group,
								  int group_len, TimestampTz start, bool make);
static Session *find_session(KeyedEntry *e, TimestampTz start);
static KeyedEntry *lookup_sessions(KeyedStage *stage, const char *group, int group_len,
								   uint64 *hash, bool *hashed);
static void count_session_key(KeyedStage *stage, uint64 hash, int delta);
static void panes_to_windows(KeyedStage *stage);
static void restore_timer(KeyedStage *stage, const char *group, int group_len,
						  TimestampTz start, TimestampTz end, bool fired);
static bool pane_add(KeyedStage *stage, TimestampTz t, const char *group, int group_len);
static void pane_fire(KeyedStage *stage, const char *key, int klen, List **purges);
static void pane_fired(KeyedStage *stage, const char *group, int group_len, TimestampTz start,
					   TimestampTz end, List **purges);
static List *pane_fire_due(KeyedStage *stage, List *timers);
static void pane_scan_fire(KeyedStage *stage, List *timers, int first, int last, List **purges);
static void pane_range(KeyedStage *stage, const StateKey *timer, StringInfo lo, StringInfo hi);
static bool pane_scan_keeps(KeyedStage *stage, int i);
static KeyedEntry *pane_scan_cached(KeyedStage *stage, const char *key, int klen, TimestampTz pane);
static bool pane_scan_window_begin(KeyedStage *stage, const StateKey *timer, StringInfo lo,
								   StringInfo hi);
static void pane_scan_window_end(KeyedStage *stage, StringInfo lo, const bool *seen, bool found,
								 List **purges);
static void pane_purge(KeyedStage *stage, const char *group, int group_len, TimestampTz start,
					   TimestampTz end);

/* A timer as a state key of format 1: kind, time, group key, window start. */
#define TIMER_GROUP(key) ((key) + 9)
#define TIMER_GROUP_LEN(klen) ((klen) - 17)
#define TIMER_START(key, klen) keyed_key_read_time((key) + (klen) - 8)

static int128
floor_div(int128 a, int64 b)
{
	int128		q = a / b;

	if (a % b != 0 && (a < 0) != (b < 0))
		q--;
	return q;
}

/*
 * The start of the latest window (or pane) holding t: aligned to slide.  In
 * 128 bits, so that no sum wraps near the ends of the range.
 */
static int128
latest_start(WindowSpec *w, TimestampTz t)
{
	return floor_div((int128) t + UNIX_OFFSET_US, w->slide_us) * w->slide_us - UNIX_OFFSET_US;
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
	if (stage->panes)
		return pane_add(stage, t, group, group_len);

	/*
	 * Every window [start, start + size) holding t, start aligned to slide:
	 * size/slide of them, from first down.
	 */
	nwindows = (int) (w->size_us / w->slide_us);
	first = latest_start(w, t);
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
		e = lookup_unended(stage, 'W', group, group_len, start, true);
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
	uint64		hash;
	bool		hashed;
	bool		new_timer;

	check_window_range(t, t, (int128) t + w->gap_us);
	end = t + w->gap_us;
	e = lookup_sessions(stage, group, group_len, &hash, &hashed);
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
	if (e->sessions == NIL)
		count_session_key(stage, hashed ? hash : session_keys_hash(group, group_len), +1);
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
		{
			e->sessions = list_delete_ptr(e->sessions, s);
			keyed_drop_session(stage, s);
		}
	}
	MemoryContextSwitchTo(old);

	/*
	 * One timer per session.  Timers are keyed by the session's start: a
	 * new start needs new ones, and a fired session extended past the
	 * watermark needs its fire timer again.  An extension otherwise keeps
	 * the timer it has: when due, it is set again at the session's new end
	 * (fire_timer, purge_timer), so timers do not pile up one per record.
	 */
	new_timer = overlap == NIL || start != target->start ||
		(target->fired && end > stage->watermark);
	target->emitted_start = kept_row ? start : DT_NOBEGIN;
	target->start = start;
	target->end = end;
	target->fired = end <= stage->watermark;
	target->unemitted = true;
	keyed_mark_dirty(stage, e);

	/*
	 * Last, since a purge frees the session (keyed_drop_session).  None
	 * comes here: a new session past its lateness returned above, and a
	 * merged one ends no earlier than a live session it took in.
	 */
	Assert(purge_time(stage, end) > stage->watermark);
	if (new_timer)
	{
		if (end <= stage->watermark)
			schedule_purge(stage, group, group_len, start, end);
		else
			put_timer(stage, 'F', end, group, group_len, start);
	}
	return true;
}

void
window_fire(KeyedStage *stage, TimestampTz watermark)
{
	List	   *timers = due_timers(stage, 'F', watermark);
	List	   *purges = NIL;

	if (stage->panes)
		purges = pane_fire_due(stage, timers);
	else
		each_due_timer(stage, 'F', timers);
	each_due_timer(stage, 'P', merge_timers(due_timers(stage, 'P', watermark), purges));
	if (stage->session_keys)
		session_keys_trim(stage->session_keys);
}

/* A step's due timers of a kind, one by one in their order (sessions fetched ahead). */
static void
each_due_timer(KeyedStage *stage, char kind, List *timers)
{
	uint32	   *hashes = stage->session_keys ? session_hashes(stage, timers) : NULL;
	ListCell   *lc;

	foreach(lc, timers)
	{
		StateKey   *k = lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		if (hashes)
			session_prefetch(stage, hashes, list_length(timers), foreach_current_index(lc));
		if (kind == 'F')
			fire_timer(stage, k->data, k->len);
		else if (stage->panes)
			pane_purge(stage, TIMER_GROUP(k->data), TIMER_GROUP_LEN(k->len),
					   TIMER_START(k->data, k->len),
					   TIMER_START(k->data, k->len) + stage->plan->window->size_us);
		else
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

		due = lappend(due, timer_state_key(kind, t->when, t->tail, t->len));
	}
	return due;
}

/* A timer as a state key, sized exactly: a watermark step may list every window of the stage. */
static StateKey *
timer_state_key(char kind, TimestampTz when, const char *tail, int tail_len)
{
	StateKey   *k = palloc(sizeof(StateKey));
	StringInfoData key;

	key.maxlen = 1 + 8 + tail_len + 1;
	key.data = palloc(key.maxlen);
	key.len = 0;
	key.data[0] = '\0';
	key.cursor = 0;
	appendStringInfoChar(&key, kind);
	keyed_key_append_time(&key, when);
	appendBinaryStringInfo(&key, tail, tail_len);
	k->data = key.data;
	k->len = key.len;
	return k;
}

/* Two lists of timer keys in their order, as one in that order, each timer once. */
static List *
merge_timers(List *a, List *b)
{
	List	   *merged = NIL;
	int			i = 0;
	int			j = 0;

	if (b == NIL)
		return a;
	while (i < list_length(a) || j < list_length(b))
	{
		StateKey   *x = i < list_length(a) ? list_nth(a, i) : NULL;
		StateKey   *y = j < list_length(b) ? list_nth(b, j) : NULL;
		int			c = x == NULL ? 1
			: y == NULL ? -1
			: state_key_cmp(x->data, x->len, y->data, y->len);

		merged = lappend(merged, c <= 0 ? x : y);
		i += c <= 0;
		j += c >= 0;
	}
	return merged;
}

/*
 * A watermark step fires and purges sessions of many keys, in the order of
 * their keys, from a cache of megabytes: a timer's session was a chain of
 * loads that missed the CPU's caches one after the other (the key's slot,
 * its entry, the entry's list, the session, its values: nearly all of
 * timer_window's time in a session job's profile).  The loop asks for each
 * link some timers ahead, the slot first and each next link once the one
 * before it has had time to come in, as the pipeline does for records
 * (keyed.h's hints).  Hints only: a hash another key shares, or an entry
 * the step changed since, costs a wasted fetch.  Tumbling windows' timers
 * showed no gain from the slot and entry alone (BENCHMARKS.md, "Sessions:
 * fetched ahead, dropped at once").
 */
#define TIMER_AHEAD 6			/* timers between one link's fetch and the next's */
#define PREFETCH_SESSIONS 4		/* a key's first sessions: most keys hold one or two */

/* The cache hash of each timer's key's sessions entry ('S' <group key>). */
static uint32 *
session_hashes(KeyedStage *stage, List *timers)
{
	uint32	   *hashes = palloc(sizeof(uint32) * Max(list_length(timers), 1));
	ListCell   *lc;

	foreach(lc, timers)
	{
		StateKey   *k = lfirst(lc);

		window_key(stage, 'S', TIMER_GROUP(k->data), TIMER_GROUP_LEN(k->len), 0);
		hashes[foreach_current_index(lc)] = keyed_cache_hash(stage->key.data, stage->key.len);
	}
	return hashes;
}

/*
 * Have the CPU fetch one link of a cached sessions entry e (NULL: none),
 * once the link before it has come in: 0 its list (the header and first
 * cells, which lappend keeps in one chunk until it grows past them), 1 its
 * first sessions, 2 their values.
 */
void
window_prefetch_sessions(KeyedStage *stage, KeyedEntry *e, int link)
{
	ListCell   *lc;

	if (e == NULL || e->sessions == NIL)
		return;
	if (link == 0)
	{
		cpu_prefetch_lines(e->sessions, offsetof(List, initial_elements) +
						   PREFETCH_SESSIONS * sizeof(ListCell));
		return;
	}
	foreach(lc, e->sessions)
	{
		Session    *s = lfirst(lc);

		if (foreach_current_index(lc) == PREFETCH_SESSIONS)
			break;
		if (link == 1)
			cpu_prefetch_lines(s, sizeof(Session));
		else
			cpu_prefetch_lines(s->values, sizeof(AggValue) * stage->naggs);
	}
}

/* Before timer i of n: fetch the links of the timers ahead of it. */
static void
session_prefetch(KeyedStage *stage, const uint32 *hashes, int n, int i)
{
	if (i + 4 * TIMER_AHEAD < n)
		keyed_cache_prefetch_slot(stage, hashes[i + 4 * TIMER_AHEAD]);
	if (i + 3 * TIMER_AHEAD < n)
		keyed_cache_prefetch_entry(stage, hashes[i + 3 * TIMER_AHEAD]);
	if (i + 2 * TIMER_AHEAD < n)
		window_prefetch_sessions(stage, keyed_cache_peek(stage, hashes[i + 2 * TIMER_AHEAD]), 0);
	if (i + TIMER_AHEAD < n)
		window_prefetch_sessions(stage, keyed_cache_peek(stage, hashes[i + TIMER_AHEAD]), 1);
	if (i + TIMER_AHEAD / 2 < n)
		window_prefetch_sessions(stage, keyed_cache_peek(stage, hashes[i + TIMER_AHEAD / 2]), 2);
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
	{
		/* Extended since: the session fires at its new end. */
		if (s->fired)
			return;				/* a late extension: its purge timer stands */
		if (s->end > stage->watermark)
		{
			put_timer(stage, 'F', s->end, group, group_len, start);
			return;
		}
		end = s->end;			/* due in this step too */
	}
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
	/* Purged at once (no lateness): the window found here is the timer's. */
	if (purge_time(stage, end) <= stage->watermark)
		purge_window(stage, group, group_len, e, s);
	else
		put_timer(stage, 'P', purge_time(stage, end), group, group_len, start);
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
	KeyedEntry *e;
	Session    *s;

	if (timer_window(stage, key, klen, &e, &s))
		purge_window(stage, TIMER_GROUP(key), TIMER_GROUP_LEN(klen), e, s);
}

/* A window whose purge timer is due: e, and s for a session (else NULL). */
static void
purge_window(KeyedStage *stage, const char *group, int group_len, KeyedEntry *e, Session *s)
{
	if (s)
	{
		if (purge_time(stage, s->end) > stage->watermark)
		{
			/* Extended since: purged later, by one timer (held once) */
			put_timer(stage, 'P', purge_time(stage, s->end), group, group_len, s->start);
			return;
		}
		/* Updated within lateness since its row was written: write it before it goes. */
		if (s->unemitted)
			keyed_emit(stage, group, group_len, s->start, s->end, s->values, false);
		e->sessions = list_delete_ptr(e->sessions, s);
		keyed_drop_session(stage, s);
		if (e->sessions == NIL)
		{
			e->deleted = true;
			count_session_key(stage, session_keys_hash(group, group_len), -1);
		}
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
 * again).  A pane stands for the windows that hold it (the index holds a
 * timer once, however many panes ask for it).  The state holds the subtask's own key groups only, so
 * these are the timers of its keys.  A timer at or before the watermark
 * was handled before the checkpoint was taken (the stage reaches the
 * checkpoint's watermark first), and is not made.
 */
static void
restore_kind(KeyedStage *stage, char kind)
{
	MemoryContext ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer timer rebuild",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old;
	WindowSpec *w = stage->plan->window;
	KeyedCodec	codec = stage->codec;
	char		to = kind + 1;
	StateIterator *it;
	const char *key;
	const char *val;
	int			klen;
	int			vlen;
	int64		n = 0;

	/* The iterator outlives the resets of ctx: it is made outside it. */
	codec.ctx = ctx;
	it = stage->state->ops->iterate(stage->state, &kind, 1, &to, 1);
	old = MemoryContextSwitchTo(ctx);
	while (stage->state->ops->next(it, &key, &klen, &val, &vlen))
	{
		const char *group = key + 1;
		int			group_len = klen - 1 - (kind == 'S' ? 0 : 8);
		KeyedEntry	e;
		ListCell   *lc;

		if (++n % 10000 == 0)
		{
			CHECK_FOR_INTERRUPTS();
			MemoryContextReset(ctx);
		}
		if (kind == 'L')
		{
			TimestampTz first = keyed_key_read_time(key + klen - 8);

			/* The pane's windows, the latest first: purged ones end it. */
			for (int i = 0; i < stage->npanes; i++)
			{
				TimestampTz start = first - i * w->slide_us;
				TimestampTz end = start + w->size_us;

				if (purge_time(stage, end) <= stage->watermark)
					break;
				restore_timer(stage, group, group_len, start, end, end <= stage->watermark);
			}
			continue;
		}
		if (kind == 'W')
			stage->legacy_windows = stage->panes;
		memset(&e, 0, sizeof(e));
		e.key.data = (char *) key;
		e.key.len = klen;
		if (kind == 'W')
			e.values = keyed_values_new(&codec);
		keyed_entry_deserialize(&codec, &e, val, vlen);
		if (kind == 'W')
			restore_timer(stage, group, group_len, e.start, e.end, e.fired);
		if (e.sessions != NIL)
			session_keys_change(stage->session_keys, session_keys_hash(group, group_len), +1);
		foreach(lc, e.sessions)
		{
			Session    *s = lfirst(lc);

			restore_timer(stage, group, group_len, s->start, s->end, s->fired);
		}
	}
	stage->state->ops->iterate_end(it);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(ctx);
}

/*
 * State of panes opened by a stage that keeps window entries (a job of
 * parallelism 1 rescaled to more, or restored to an epoch of parallelism
 * 1): each pane is merged into the entries of the unpurged windows that
 * hold it, and goes.  The state was written by one subtask, so the
 * restored watermark is its own and says exactly which windows fired.
 * Every changed window was emitted at that checkpoint, or waits for its
 * firing.  Done in chunks, each scan from past the last pane, and again
 * at the next start if the job stops before its next checkpoint (the state
 * opens from the checkpoint).
 */
static void
pane_to_windows(StateBackend *state, const char *key, int klen, const char *val, int vlen,
				void *arg)
{
	KeyedStage *stage = arg;
	WindowSpec *w = stage->plan->window;
	int			npanes = (int) (w->size_us / w->slide_us);
	KeyedCodec	codec = stage->codec;
	KeyedEntry	pane;

	/* Values made here go with the chunk's memory, not the cache's. */
	codec.ctx = CurrentMemoryContext;
	memset(&pane, 0, sizeof(pane));
	pane.key.data = key;
	pane.key.len = klen;
	pane.values = keyed_values_new(&codec);
	keyed_entry_deserialize(&codec, &pane, val, vlen);
	for (int i = 0; i < npanes; i++)
	{
		TimestampTz start = pane.start - i * w->slide_us;
		TimestampTz end = start + w->size_us;
		StringInfoData wkey;
		StringInfoData wval;
		KeyedEntry	win;

		if (purge_time(stage, end) <= stage->watermark)
			break;
		initStringInfo(&wkey);
		appendStringInfoChar(&wkey, 'W');
		appendBinaryStringInfo(&wkey, key + 1, klen - 1 - 8);
		keyed_key_append_time(&wkey, start);
		memset(&win, 0, sizeof(win));
		win.key.data = wkey.data;
		win.key.len = wkey.len;
		win.values = keyed_values_new(&codec);
		initStringInfo(&wval);
		if (state->ops->get(state, wkey.data, wkey.len, &wval))
			keyed_entry_deserialize(&codec, &win, wval.data, wval.len);
		else
		{
			win.start = start;
			win.end = end;
			win.fired = end <= stage->watermark;
		}
		for (int a = 0; a < stage->naggs; a++)
			aggregate_merge(stage->aggs[a], &win.values[a], &pane.values[a], &win.values[a]);
		win.unemitted = false;
		resetStringInfo(&wval);
		keyed_entry_serialize(&codec, &win, &wval);
		state->ops->put(state, wkey.data, wkey.len, wval.data, wval.len);
	}
	state->ops->delete(state, key, klen);
}

static void
panes_to_windows(KeyedStage *stage)
{
	keyed_state_rewrite_range(stage->state, 'L', 'M', pane_to_windows, stage);
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

/*
 * Whether the aggregates combine exactly in any order, so that a window's
 * panes give the value its records gave one by one.  Not float sums (their
 * rounding depends on the order), nor min and max of a type whose equal
 * values may print differently (numeric 1.0 and 1.00, float -0 and 0,
 * text under a nondeterministic collation): of equal ones, the one kept
 * depends on the order.  Sums that can overflow (int2 and int4 into a
 * bigint, numeric) keep headroom in each pane (pane_check_headroom), so
 * that no window combining them can; count, and sum and avg of int8 (an
 * int128), cannot overflow.
 */
static bool
panes_exact(KeyedStage *stage)
{
	for (int a = 0; a < stage->naggs; a++)
	{
		AggregateDef *agg = stage->aggs[a];

		switch (agg->impl)
		{
			case AGG_SUM_FLOAT4:
			case AGG_SUM_FLOAT8:
			case AGG_AVG_FLOAT:
			case AGG_GENERAL:	/* a combine function need not be exact, nor keep the order of inputs */
				return false;
			case AGG_MIN:
			case AGG_MAX:
				if (agg->arg_type != INT2OID && agg->arg_type != INT4OID &&
					agg->arg_type != INT8OID && agg->arg_type != DATEOID &&
					agg->arg_type != TIMESTAMPOID && agg->arg_type != TIMESTAMPTZOID)
					return false;
				break;
			default:
				break;
		}
	}
	return true;
}

static void
changed_reset(KeyedStage *stage)
{
	MemoryContextReset(stage->changed_context);
	stage->changed = wchanged_create(stage->changed_context, 1024, NULL);
	stage->changed_list = NULL;
	stage->nchanged = 0;
	stage->changed_capacity = 0;
}

void
window_setup(KeyedStage *stage)
{
	WindowSpec *w = stage->plan->window;

	stage->timers = timer_index_create(AllocSetContextCreate(stage->context, "mailer keyed timers",
															 ALLOCSET_DEFAULT_SIZES));
	initStringInfo(&stage->timer_tail);
	/*
	 * Panes at parallelism 1 only.  A pane window's "fired" follows from
	 * the watermark, and a parallel job restores the lowest of its
	 * subtasks' watermarks: a subtask that had got further would fire its
	 * windows in between again.  Window entries record their own.
	 */
	if (w->type == WINDOW_SLIDING && w->size_us > w->slide_us && panes_exact(stage) &&
		stage->plan->spec->parallelism == 1)
	{
		stage->panes = true;
		stage->npanes = (int) (w->size_us / w->slide_us);
		stage->panes_changed_from = DT_NOEND;
		stage->changed_context = AllocSetContextCreate(stage->context, "mailer keyed changed windows",
													   ALLOCSET_DEFAULT_SIZES);
		changed_reset(stage);
		stage->combined = palloc0(sizeof(AggValue) * Max(stage->naggs, 1));
	}
	if (w->type == WINDOW_SLIDING && !stage->panes)
		panes_to_windows(stage);
	if (w->type == WINDOW_SESSION)
	{
		stage->session_keys = session_keys_create(stage->context);
		restore_kind(stage, 'S');
	}
	else
	{
		if (stage->panes)
			restore_kind(stage, 'L');
		restore_kind(stage, 'W');
	}
}

/*
 * Panes.  A sliding window of size/slide panes keeps one entry per key and
 * pane ('L' <group key> <pane start>), so a record is one state write, not
 * size/slide.  A window exists while any of its panes does: its value is
 * its panes' combined (with, after an upgrade, its entry of format 1: the
 * records before it).  Whether it fired follows from the watermark (it
 * fires when the watermark reaches its end, and is made fired when it
 * begins late); which windows changed since their row was emitted is kept
 * in memory, as no checkpoint leaves one unemitted that would be emitted
 * (update, or fired) — a final window's change waits for its firing, which
 * emits it anyway.  A pane goes when the last window holding it (the one
 * it begins) is purged.
 */
static void
changed_add(KeyedStage *stage, const char *group, int group_len, TimestampTz start)
{
	StringInfo	k = &stage->timer_tail;
	StateKey	probe;
	ChangedSlot *slot;
	bool		found;

	resetStringInfo(k);
	appendBinaryStringInfo(k, group, group_len);
	keyed_key_append_time(k, start);
	probe.data = k->data;
	probe.len = k->len;
	slot = wchanged_insert(stage->changed, probe, &found);
	if (found)
		return;
	slot->key.data = MemoryContextAlloc(stage->changed_context, k->len);
	memcpy((char *) slot->key.data, k->data, k->len);
	if (stage->nchanged == stage->changed_capacity)
	{
		int			cap = Max(1024, stage->changed_capacity * 2);

		stage->changed_list = stage->changed_list ?
			repalloc(stage->changed_list, sizeof(StateKey) * cap) :
			MemoryContextAlloc(stage->changed_context, sizeof(StateKey) * cap);
		stage->changed_capacity = cap;
	}
	stage->changed_list[stage->nchanged++] = slot->key;
}

/* Whether the window changed since its row was emitted; it is not any more. */
static bool
changed_take(KeyedStage *stage, const char *group, int group_len, TimestampTz start)
{
	StringInfo	k = &stage->timer_tail;
	StateKey	probe;

	resetStringInfo(k);
	appendBinaryStringInfo(k, group, group_len);
	keyed_key_append_time(k, start);
	probe.data = k->data;
	probe.len = k->len;
	return wchanged_delete(stage->changed, probe);
}

void
window_undo_mark(KeyedStage *stage)
{
	stage->undo_nchanged = stage->nchanged;
	slist_init(&stage->undo_session_keys);
}

/*
 * A record failed: the windows it changed first are as they were, and so
 * are the counts of the keys holding sessions (its entries are back as
 * they were, keyed_abort_record).
 */
void
window_undo(KeyedStage *stage)
{
	slist_iter	it;

	slist_foreach(it, &stage->undo_session_keys)
	{
		SessionKeyChange *c = slist_container(SessionKeyChange, node, it.cur);

		session_keys_change(stage->session_keys, c->hash, -c->delta);
	}
	slist_init(&stage->undo_session_keys);
	if (!stage->panes)
		return;
	for (int i = stage->nchanged - 1; i >= stage->undo_nchanged; i--)
		wchanged_delete(stage->changed, stage->changed_list[i]);
	stage->nchanged = stage->undo_nchanged;
}

static bool
pane_usable(KeyedEntry *e)
{
	return e != NULL && !e->deleted && e->start != DT_NOBEGIN;
}

/* A pane's (or a legacy window entry's) values, into stage->combined. */
static void
pane_merge(KeyedStage *stage, const AggValue *values)
{
	for (int a = 0; a < stage->naggs; a++)
		aggregate_merge(stage->aggs[a], &stage->combined[a], &values[a], &stage->combined[a]);
}

/*
 * stage->combined := no rows, or, after an upgrade, the window's entry of
 * format 1 (the records before it); true when that entry was there.
 */
static bool
pane_values_begin(KeyedStage *stage, const char *group, int group_len, TimestampTz start)
{
	KeyedEntry *e;

	for (int a = 0; a < stage->naggs; a++)
		aggregate_init(stage->aggs[a], &stage->combined[a]);
	if (!stage->legacy_windows)
		return false;
	e = lookup_window(stage, 'W', group, group_len, start, false);
	if (!pane_usable(e))
		return false;
	pane_merge(stage, e->values);
	return true;
}

/* A window's values, into stage->combined; false when it has none (no pane). */
static bool
pane_values(KeyedStage *stage, const char *group, int group_len, TimestampTz start)
{
	WindowSpec *w = stage->plan->window;
	bool		found = pane_values_begin(stage, group, group_len, start);

	for (int i = 0; i < stage->npanes; i++)
	{
		/*
		 * A pane the backend does not have is cached as such (never made:
		 * not dirty, start DT_NOBEGIN), so that the other windows holding
		 * it do not ask the backend again.
		 */
		KeyedEntry *e = lookup_unended(stage, 'L', group, group_len, start + i * w->slide_us, false);

		if (!pane_usable(e))
			continue;
		pane_merge(stage, e->values);
		found = true;
	}
	return found;
}

/*
 * A sum kept in panes overflows, if ever, when a window combines them,
 * outside any record: the job would fail on every replay, where one by one
 * the record that overflowed went to the dead letters.  So a record is
 * refused, with the type's own error, as soon as its pane's sum is within
 * a factor of npanes + 1 of the limit (the panes of a window plus, after
 * an upgrade, its entry of format 1), and no window can overflow.  Only
 * inputs within that factor of the limit (9.2e18 for a bigint sum, 1e131072
 * for numeric) see a difference: there, a record one by one would have
 * kept may go to the dead letters.
 */
static void
pane_check_headroom(KeyedStage *stage, const AggValue *next)
{
	int64		factor = stage->npanes + 1;

	for (int a = 0; a < stage->naggs; a++)
	{
		AggregateDef *agg = stage->aggs[a];
		int64		product;

		if (next[a].count == 0)
			continue;
		switch (agg->impl)
		{
			case AGG_SUM_INT:
				if (pg_mul_s64_overflow(next[a].v.i64, factor, &product))
					ereport(ERROR,
							(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
							 errmsg("bigint out of range in %s", agg->text)));
				break;
			case AGG_SUM_NUMERIC:
			case AGG_AVG_NUMERIC:
				/*
				 * numeric_mul raises numeric's own overflow error; a scaled
				 * sum (below 2^127) times an int64 is far from it.
				 */
				if (next[a].scale != AGG_SCALE_DATUM)
					break;
				(void) DirectFunctionCall2(numeric_mul, next[a].v.datum,
										   NumericGetDatum(int64_to_numeric(factor)));
				break;
			default:
				break;
		}
	}
}

/*
 * Whether the windows a new pane at start shares with the pane before it
 * (every window holding the new pane but the one it begins) hold their
 * timers already: they do when that pane is cached and exists, as it made
 * them or found them made, and a window that has not been purged holds
 * its fire or purge timer.  Most new panes are a key's next, whose pane
 * before took its records a slide ago: one cache lookup then saves
 * size/slide - 1 lookups of the timer index, a tenth of a sliding job.
 * Not cached (let go at a checkpoint), or absent: each window's timer is
 * asked for, and held once.
 */
static bool
pane_before_held(KeyedStage *stage, const char *group, int group_len, TimestampTz start)
{
	window_key(stage, 'L', group, group_len, start - stage->plan->window->slide_us);
	return pane_usable(keyed_cache_find(stage, stage->key.data, stage->key.len));
}

static bool
pane_add(KeyedStage *stage, TimestampTz t, const char *group, int group_len)
{
	WindowSpec *w = stage->plan->window;
	int128		first;
	KeyedEntry *e;
	bool		made;
	bool		earlier_held = false;

	/* The pane holding t begins where the latest window holding t does. */
	first = latest_start(w, t);
	check_window_range(t, first - (int128) (stage->npanes - 1) * w->slide_us, first + w->size_us);
	if (purge_time(stage, (TimestampTz) first + w->size_us) <= stage->watermark)
		return false;			/* every window holding t is purged, or would be */
	e = lookup_unended(stage, 'L', group, group_len, (TimestampTz) first, true);
	keyed_compute(stage, e->values, stage->next);
	pane_check_headroom(stage, stage->next);

	/* Nothing fails from here on. */
	made = e->start == DT_NOBEGIN;
	if (made)
	{
		e->start = (TimestampTz) first;
		e->end = e->start + w->slide_us;
		earlier_held = pane_before_held(stage, group, group_len, e->start);
	}
	for (int i = 0; i < stage->npanes; i++)
	{
		TimestampTz start = (TimestampTz) (first - (int128) i * w->slide_us);
		TimestampTz end = start + w->size_us;

		if (purge_time(stage, end) <= stage->watermark)
			break;
		/* A new pane may make a window: its timers (held once, whichever pane asks first). */
		if (made && (i == 0 || !earlier_held))
			restore_timer(stage, group, group_len, start, end, end <= stage->watermark);

		/*
		 * With emit final, a window that has not ended goes out when it
		 * fires, changed or not: only a fired one's change is kept.
		 */
		if (w->emit_update || end <= stage->watermark)
			changed_add(stage, group, group_len, start);
	}
	keyed_store(stage, e->values, stage->next);
	e->unemitted = true;
	keyed_mark_dirty(stage, e);
	stage->panes_changed_from = Min(stage->panes_changed_from, e->start);
	return true;
}

static void
pane_fire(KeyedStage *stage, const char *key, int klen, List **purges)
{
	const char *group = TIMER_GROUP(key);
	int			group_len = TIMER_GROUP_LEN(klen);
	TimestampTz end = keyed_key_read_time(key + 1);
	TimestampTz start = TIMER_START(key, klen);

	if (pane_values(stage, group, group_len, start))
		pane_fired(stage, group, group_len, start, end, purges);
}

/*
 * A window whose values are stage->combined fires.  A purge due already
 * waits for the purges of this step all the same: in order of time, so
 * that an earlier window sharing the pane this one deletes is purged (and
 * emitted, if it changed) first.  Such purges (every one, without allowed
 * lateness) go to *purges, in the order of their timers as the fires come
 * in it, and window_fire merges them with the purge timers due; the
 * timer index is spared a timer put and taken out at once.  One out of
 * that order goes to the index.
 */
static void
pane_fired(KeyedStage *stage, const char *group, int group_len, TimestampTz start,
		   TimestampTz end, List **purges)
{
	TimestampTz when = purge_time(stage, end);
	StringInfo	tail = &stage->timer_tail;
	StateKey   *k;

	keyed_emit(stage, group, group_len, start, end, stage->combined, false);
	(void) changed_take(stage, group, group_len, start);
	if (when > stage->watermark)
	{
		put_timer(stage, 'P', when, group, group_len, start);
		return;
	}
	resetStringInfo(tail);
	appendBinaryStringInfo(tail, group, group_len);
	keyed_key_append_time(tail, start);
	k = timer_state_key('P', when, tail->data, tail->len);
	if (*purges != NIL && state_key_cmp(k->data, k->len, ((StateKey *) llast(*purges))->data,
										((StateKey *) llast(*purges))->len) < 0)
		put_timer(stage, 'P', when, group, group_len, start);
	else
		*purges = lappend(*purges, k);
}

/*
 * The windows a watermark step fires, in the order of their timers.
 * Sliding windows are aligned, so a step that crosses a slide boundary
 * fires a window of nearly every key, each reading its size/slide panes:
 * most of a step's reads when the cache was let go at the checkpoint
 * before.  The timers due at one time are sorted by group key, as are the
 * panes ('L' <group key> <pane start>), so one scan of the backend from
 * the first window's first pane to the last one's reads each pane in
 * between once (pane_scan_fire).  The scan reads the panes of the keys not
 * firing too: it is made when the panes wanted are at least an eighth of
 * the fire and purge timers held (a window whose panes may still exist
 * holds one, so they bound the panes there are), else the windows read
 * their panes one by one.  A key holds about lateness/slide purge timers,
 * so an allowed lateness past 8 x size turns the scan off.
 */
static List *
pane_fire_due(KeyedStage *stage, List *timers)
{
	List	   *purges = NIL;
	int			n = list_length(timers);
	int64		live = timer_index_count(stage->timers) + n;
	int			first = 0;

	while (first < n)
	{
		StateKey   *k0 = list_nth(timers, first);
		int			last = first + 1;

		/* The run of windows due at one time: they share their end. */
		while (last < n && memcmp(((StateKey *) list_nth(timers, last))->data + 1, k0->data + 1, 8) == 0)
			last++;
		if ((int64) (last - first) * stage->npanes * 8 >= live)
			pane_scan_fire(stage, timers, first, last, &purges);
		else
		{
			for (int i = first; i < last; i++)
			{
				StateKey   *k = list_nth(timers, i);

				CHECK_FOR_INTERRUPTS();
				pane_fire(stage, k->data, k->len, &purges);
			}
		}
		first = last;
	}
	return purges;
}

/*
 * One scan for the panes of the windows first to last - 1 of timers,
 * sorted by group key, each window fired as the scan passes its range.
 * With emit final, a pane's values are combined where they are read, not
 * cached: a step reads about size/slide panes a key, which would overrun
 * the cache, and the next window holding a pane fires a slide later.  A
 * cached pane is newer than the backend's (a record changed it since the
 * checkpoint) and is taken instead, and one the scan does not meet may be
 * new since, so the cache is asked for it, if it is no earlier than the
 * first pane a record changed since (pane_scan_cached).  A window's first
 * pane is cached all the same (or its absence), for the purge that
 * deletes it; with emit update every pane is, for the checkpoint's rows of
 * the windows changed since (window_emit_panes), which hold the later ones.
 * The iterator is ended on an ERROR too (an interrupt, a corrupt value, a
 * failing emit).
 */
static void
pane_scan_fire(KeyedStage *stage, List *timers, int first, int last, List **purges)
{
	WindowSpec *w = stage->plan->window;
	StringInfoData lo;
	StringInfoData hi;
	StringInfoData next_lo;
	StateIterator *it;
	bool	   *seen;
	KeyedCodec	codec = stage->codec;
	KeyedEntry	read;

	/*
	 * Window i's panes are the keys in ['L' <group> <start>, 'L' <group>
	 * <start + size>).  The scan gives each window the keys of its range
	 * because the ranges follow each other without overlapping: no group key
	 * is a proper prefix of another (each key field is a fixed length or its
	 * length and bytes, serial_put_datum), so the runs' group keys sorted
	 * give their ranges sorted.  A key encoding without lengths would break
	 * this.
	 */
	initStringInfo(&lo);
	initStringInfo(&hi);
	initStringInfo(&next_lo);
#ifdef USE_ASSERT_CHECKING
	for (int i = first; i + 1 < last; i++)
	{
		pane_range(stage, list_nth(timers, i), &lo, &hi);
		pane_range(stage, list_nth(timers, i + 1), &next_lo, &lo);
		Assert(state_key_cmp(hi.data, hi.len, next_lo.data, next_lo.len) <= 0);
	}
#endif
	pane_range(stage, list_nth(timers, last - 1), &next_lo, &hi);
	pane_range(stage, list_nth(timers, first), &lo, &next_lo);
	seen = palloc0(sizeof(bool) * stage->npanes);

	/*
	 * A pane read and not cached: its values, out of line ones (a numeric
	 * sum past its scaled form) in the step's memory, which stage->combined
	 * may point at until the window's row is made.
	 */
	codec.ctx = CurrentMemoryContext;
	memset(&read, 0, sizeof(read));
	read.values = keyed_values_new(&codec);

	/*
	 * Window entries of format 1, left by an upgrade, read first: the scan
	 * asks the backend for nothing else (pane_values_begin finds them, or
	 * their absence, cached).
	 */
	if (stage->legacy_windows)
	{
		for (int i = first; i < last; i++)
		{
			StateKey   *k = list_nth(timers, i);

			(void) lookup_window(stage, 'W', TIMER_GROUP(k->data), TIMER_GROUP_LEN(k->len),
								 TIMER_START(k->data, k->len), true);
		}
	}

	it = stage->state->ops->iterate(stage->state, lo.data, lo.len, hi.data, hi.len);
	PG_TRY();
	{
		int			cur = first;
		bool		found;
		const char *key;
		const char *val;
		int			klen;
		int			vlen;

		found = pane_scan_window_begin(stage, list_nth(timers, cur), &lo, &hi);
		while (cur < last)
		{
			bool		more = stage->state->ops->next(it, &key, &klen, &val, &vlen);
			TimestampTz start;
			TimestampTz pane;
			KeyedEntry *e;
			int			i;

			/* Windows whose range the scan has passed fire. */
			while (cur < last && (!more || state_key_cmp(key, klen, hi.data, hi.len) >= 0))
			{
				CHECK_FOR_INTERRUPTS();
				pane_scan_window_end(stage, &lo, seen, found, purges);
				memset(seen, 0, sizeof(bool) * stage->npanes);
				if (++cur < last)
					found = pane_scan_window_begin(stage, list_nth(timers, cur), &lo, &hi);
			}
			if (!more || cur == last)
				break;
			if (state_key_cmp(key, klen, lo.data, lo.len) < 0 || klen != lo.len ||
				memcmp(key, lo.data, lo.len - 8) != 0)
				continue;		/* not a pane of this window's group */
			CHECK_FOR_INTERRUPTS();
			start = keyed_key_read_time(lo.data + lo.len - 8);
			pane = keyed_key_read_time(key + klen - 8);
			if ((pane - start) % w->slide_us != 0)
				continue;
			i = (int) ((pane - start) / w->slide_us);
			seen[i] = true;
			e = pane_scan_keeps(stage, i) ? keyed_lookup_known(stage, key, klen, true, val, vlen)
				: pane_scan_cached(stage, key, klen, pane);
			if (e != NULL)
			{
				if (!pane_usable(e))
					continue;
				pane_merge(stage, e->values);
			}
			else
			{
				read.key.data = key;
				read.key.len = klen;
				keyed_entry_deserialize(&codec, &read, val, vlen);
				pane_merge(stage, read.values);
			}
			found = true;
		}
	}
	PG_FINALLY();
	{
		stage->state->ops->iterate_end(it);
	}
	PG_END_TRY();
}

/*
 * Whether the scan caches a window's pane i (or its absence): the first,
 * for the purge that deletes it, and with emit update every one, for the
 * checkpoint's rows of the windows changed since (pane_scan_fire).
 */
static bool
pane_scan_keeps(KeyedStage *stage, int i)
{
	return i == 0 || stage->plan->window->emit_update;
}

/*
 * A pane the scan does not keep, if the cache has it newer than the
 * backend: only one a record changed since the checkpoint can be.  A purge
 * since (a deleted entry) is of a pane no window firing now holds: the
 * windows holding it end no later than the purged one, so they fired
 * before it was purged (a step fires before it purges), and none gets a
 * fire timer again (a window that has ended gets none, pane_add refuses a
 * record for a purged pane).  The hash probe of each pane read was a sixth
 * of the scan (BENCHMARKS.md, "Per-record speed (issue 16): the scan asks
 * the cache for recent panes only").
 */
static KeyedEntry *
pane_scan_cached(KeyedStage *stage, const char *key, int klen, TimestampTz pane)
{
	if (pane < stage->panes_changed_from)
	{
		Assert(keyed_cache_find(stage, key, klen) == NULL || !keyed_cache_find(stage, key, klen)->dirty);
		return NULL;
	}
	return keyed_cache_find(stage, key, klen);
}

/* The scan's next window: its range of pane keys, and stage->combined begun. */
static bool
pane_scan_window_begin(KeyedStage *stage, const StateKey *timer, StringInfo lo, StringInfo hi)
{
	pane_range(stage, timer, lo, hi);
	return pane_values_begin(stage, lo->data + 1, lo->len - 9,
							 keyed_key_read_time(lo->data + lo->len - 8));
}

/* A window's range of pane keys, from its fire timer ('F' <end> <group> <start>). */
static void
pane_range(KeyedStage *stage, const StateKey *timer, StringInfo lo, StringInfo hi)
{
	const char *group = TIMER_GROUP(timer->data);
	int			group_len = TIMER_GROUP_LEN(timer->len);
	TimestampTz start = TIMER_START(timer->data, timer->len);

	resetStringInfo(lo);
	appendStringInfoChar(lo, 'L');
	appendBinaryStringInfo(lo, group, group_len);
	keyed_key_append_time(lo, start);
	resetStringInfo(hi);
	appendStringInfoChar(hi, 'L');
	appendBinaryStringInfo(hi, group, group_len);
	keyed_key_append_time(hi, start + stage->plan->window->size_us);
}

/*
 * The scan has passed the window whose first pane key is lo: the panes it
 * did not meet, from the cache (their absence cached where a pane read
 * would be, pane_scan_fire), and the window fires if it has any.
 */
static void
pane_scan_window_end(KeyedStage *stage, StringInfo lo, const bool *seen, bool found,
					 List **purges)
{
	const char *group = lo->data + 1;
	int			group_len = lo->len - 9;
	TimestampTz start = keyed_key_read_time(lo->data + lo->len - 8);

	for (int i = 0; i < stage->npanes; i++)
	{
		TimestampTz pane;
		KeyedEntry *e;

		if (seen[i])
			continue;
		pane = start + i * stage->plan->window->slide_us;
		lo->len -= 8;
		keyed_key_append_time(lo, pane);
		e = pane_scan_keeps(stage, i) ? keyed_lookup_known(stage, lo->data, lo->len, true, NULL, 0)
			: pane_scan_cached(stage, lo->data, lo->len, pane);
		if (pane_usable(e))
		{
			pane_merge(stage, e->values);
			found = true;
		}
	}
	lo->len -= 8;
	keyed_key_append_time(lo, start);
	if (found)
		pane_fired(stage, group, group_len, start, start + stage->plan->window->size_us, purges);
}

/* A window goes: its row if it changed since emitted, and the pane it begins. */
static void
pane_purge(KeyedStage *stage, const char *group, int group_len, TimestampTz start,
		   TimestampTz end)
{
	KeyedEntry *e;

	if (changed_take(stage, group, group_len, start) &&
		pane_values(stage, group, group_len, start))
		keyed_emit(stage, group, group_len, start, end, stage->combined, false);
	e = lookup_window(stage, 'L', group, group_len, start, false);
	if (pane_usable(e))
	{
		e->deleted = true;
		keyed_mark_dirty(stage, e);
	}
	if (stage->legacy_windows)
	{
		e = lookup_window(stage, 'W', group, group_len, start, false);
		if (pane_usable(e))
		{
			e->deleted = true;
			keyed_mark_dirty(stage, e);
		}
	}
}

/*
 * A checkpoint is due: the rows of the windows changed since, that are
 * emitted now (update, or fired); the others wait for their firing.
 */
void
window_emit_panes(KeyedStage *stage)
{
	bool		update = stage->plan->window->emit_update;

	if (!stage->panes)
		return;
	for (int i = 0; i < stage->nchanged; i++)
	{
		StateKey	k = stage->changed_list[i];
		const char *group = k.data;
		int			group_len = k.len - 8;
		TimestampTz start = keyed_key_read_time(k.data + k.len - 8);
		TimestampTz end = start + stage->plan->window->size_us;

		/* Emitted since (fired or purged) */
		if (!wchanged_delete(stage->changed, k))
			continue;
		if ((update || end <= stage->watermark) && pane_values(stage, group, group_len, start))
		{
			keyed_emit(stage, group, group_len, start, end, stage->combined, false);
			/* stage->combined is made anew for the next window: nothing else lives in work_context */
			keyed_emit_slice(stage, false);
		}
	}
	changed_reset(stage);
}

void
window_emit_changed(KeyedStage *stage, KeyedEntry *e)
{
	bool		update = stage->plan->window->emit_update;
	const char *group = e->key.data + e->group_offset;
	ListCell   *lc;

	if (e->key.data[0] == 'L')
		return;					/* its windows: window_emit_panes */
	if (e->key.data[0] == 'W')
	{
		if (stage->panes)
			return;				/* a window of format 1, as one of the panes' */
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
	window_key(stage, kind, group, group_len, start);
	return keyed_lookup(stage, stage->key.data, stage->key.len, create);
}

/* stage->key := the state key of a window, a pane or (kind 'S') a key's sessions. */
static void
window_key(KeyedStage *stage, char kind, const char *group, int group_len, TimestampTz start)
{
	keyed_key_begin(stage, kind);
	appendBinaryStringInfo(&stage->key, group, group_len);
	if (kind == 'W' || kind == 'L')
		keyed_key_append_time(&stage->key, start);
}

void
window_first_key(KeyedStage *stage, TimestampTz t, const char *group, int group_len)
{
	WindowSpec *w = stage->plan->window;

	if (w->type == WINDOW_SESSION)
		window_key(stage, 'S', group, group_len, 0);
	else
		window_key(stage, stage->panes ? 'L' : 'W', group, group_len,
				   (TimestampTz) latest_start(w, t));
}

/*
 * The entry of a window (kind 'W') or of a pane (kind 'L', with the window
 * it begins): made when missing if make (a record's window or pane), else
 * NULL or, when the backend lacked it, an entry cached as absent
 * (pane_values).  A window that has not ended holds its fire timer, or
 * its purge timer once fired (made with the window, at a restore from its
 * entries, and taken away with a failed record's windows), and a pane
 * exists only while the window it begins does: one whose window has not
 * ended and holds neither timer is new, and the backend is not asked.
 * That is the first record of a key in each window or pane, which a job
 * whose cache was let go at the last checkpoint would otherwise look for
 * in vain: a tenth of a keyed tumbling job's worker (issue 16).  A window
 * that has ended may have its timer listed as due in this step
 * (window_fire), so it is looked up.
 */
static KeyedEntry *
lookup_unended(KeyedStage *stage, char kind, const char *group, int group_len,
			   TimestampTz start, bool make)
{
	TimestampTz end = start + stage->plan->window->size_us;
	StringInfo	tail = &stage->timer_tail;
	KeyedEntry *e;

	if (end <= stage->watermark)
		return lookup_window(stage, kind, group, group_len, start, true);
	window_key(stage, kind, group, group_len, start);
	/* Cached (most lookups, and a step's scanned first panes): no timer asked. */
	e = keyed_lookup_known(stage, stage->key.data, stage->key.len, false, NULL, 0);
	if (e != NULL)
		return e;
	resetStringInfo(tail);
	appendBinaryStringInfo(tail, group, group_len);
	keyed_key_append_time(tail, start);
	if (timer_index_holds(stage->timers, 'F', end, tail->data, tail->len))
		return keyed_lookup(stage, stage->key.data, stage->key.len, true);
	/*
	 * A parallel job restores the lowest of its subtasks' watermarks, so a
	 * window one of them fired may not have ended at the restored one: it
	 * holds its purge timer instead (panes are at parallelism 1 only).
	 */
	if (kind == 'W' &&
		timer_index_holds(stage->timers, 'P', purge_time(stage, end), tail->data, tail->len))
		return keyed_lookup(stage, stage->key.data, stage->key.len, true);
	return keyed_lookup_known(stage, stage->key.data, stage->key.len, make, NULL, 0);
}

/*
 * A key's sessions entry ('S' <group key>), made when missing.  A key not
 * counted in session_keys holds no session: its entry, if the backend has
 * one, was deleted with its last session, and the backend is not asked.
 * The key is hashed only when the cache misses (most records extend a
 * cached session): then *hash is its session_keys_hash, and *hashed true.
 * An assert build asks the backend all the same: every dirty entry is
 * written before the cache lets any go, so an uncached key it holds is a
 * key the counts missed.
 */
static KeyedEntry *
lookup_sessions(KeyedStage *stage, const char *group, int group_len, uint64 *hash, bool *hashed)
{
	KeyedEntry *e;

	*hashed = false;
	window_key(stage, 'S', group, group_len, 0);
	e = keyed_lookup_known(stage, stage->key.data, stage->key.len, false, NULL, 0);
	if (e != NULL)
		return e;
	*hash = session_keys_hash(group, group_len);
	*hashed = true;
	if (session_keys_may_hold(stage->session_keys, *hash))
		return keyed_lookup(stage, stage->key.data, stage->key.len, true);
#ifdef USE_ASSERT_CHECKING
	if (stage->state->ops->get(stage->state, stage->key.data, stage->key.len, &stage->value))
		elog(ERROR, "session key count missed a key the state holds");
#endif
	return keyed_lookup_known(stage, stage->key.data, stage->key.len, true, NULL, 0);
}

/*
 * A key's entry went from no session to some (+1) or back (-1).  Within a
 * record the change is kept for its undo: the undo's node is taken before
 * the count changes and linked after (neither can fail then), so that an
 * undo never takes back a change that was not made.
 */
static void
count_session_key(KeyedStage *stage, uint64 hash, int delta)
{
	SessionKeyChange *undo = NULL;

	if (stage->undo_active)
		undo = MemoryContextAlloc(stage->undo_context, sizeof(SessionKeyChange));
	session_keys_change(stage->session_keys, hash, delta);
	if (undo)
	{
		undo->hash = hash;
		undo->delta = delta;
		slist_push_head(&stage->undo_session_keys, &undo->node);
	}
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
