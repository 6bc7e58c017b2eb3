/*
 * timer_index.c
 *		Window timers in memory (timer_index.h).
 *
 * Timers used to be state keys ('F' and 'P' <time> <group key> <start>):
 * every window made and every timer due cost a put, a get (for the undo)
 * and a delete in the backend, and every watermark step a range scan.  A
 * timer follows from its window entry (an unfired window fires at its end,
 * a fired one is purged after its allowed lateness), so the stage keeps
 * them here and window.c rebuilds them from the entries when it starts.
 *
 * Per kind, a hash from due time to a bucket, and a min-heap of the due
 * times that have one.  Windows of many keys share their due times, so a
 * bucket holds the tails of all their timers, packed: an int32 length and
 * the bytes.  A bucket is only appended to; the undo of a record cuts it
 * back to its length before the record.  When a bucket is due its tails
 * are sorted by their bytes, which gives the order a range scan of the
 * state keys gave.
 *
 * A timer is held once, as a state key was: a window of panes is asked
 * for by each of its panes, a session by its merges.  A set of the timers
 * held (kind, time and the tail's offset in its bucket: 24 bytes a slot,
 * the tail's bytes are the bucket's) drops the copies as they come, so
 * that memory follows the windows, not the windows times their panes.
 *
 * Design: docs/ARCHITECTURE.md, "Windows and timers".
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "base/local_hash.h"
#include "operators/timer_index.h"
#include "state/state.h"

/* A due time's hash: seeded, since event times come from the stream. */
static inline uint32
time_hash(TimestampTz when)
{
	return local_hash_uint64((uint64) when);
}

typedef struct TimerBucket
{
	TimestampTz when;
	char		status;
	char	   *data;
	int			used;
	int			cap;
} TimerBucket;

#define SH_PREFIX tbucket
#define SH_ELEMENT_TYPE TimerBucket
#define SH_KEY_TYPE TimestampTz
#define SH_KEY when
#define SH_HASH_KEY(tb, key) time_hash(key)
#define SH_EQUAL(tb, a, b) ((a) == (b))
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

/* A timer held: its tail is at offset in the bucket of (kind, when). */
typedef struct TimerSlotKey
{
	TimestampTz when;
	int32		offset;			/* -1: the probe, TimerIndex.probe */
	char		kind;
} TimerSlotKey;

typedef struct TimerSlot
{
	TimerSlotKey key;
	uint32		hash;
	char		status;
} TimerSlot;

struct TimerIndex;
static uint32 slot_key_hash(struct TimerIndex *ti, const TimerSlotKey *k);
static bool slot_equal(struct TimerIndex *ti, const TimerSlotKey *a, const TimerSlotKey *b);

#define SH_PREFIX tset
#define SH_ELEMENT_TYPE TimerSlot
#define SH_KEY_TYPE TimerSlotKey
#define SH_KEY key
#define SH_GET_HASH(tb, a) (a)->hash
#define SH_HASH_KEY(tb, k) slot_key_hash((struct TimerIndex *) (tb)->private_data, &(k))
#define SH_EQUAL(tb, a, b) slot_equal((struct TimerIndex *) (tb)->private_data, &(a), &(b))
#define SH_STORE_HASH
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

typedef struct TimerKind
{
	tbucket_hash *buckets;
	TimestampTz *heap;			/* min-heap of the buckets' times */
	int			nheap;
	int			heap_cap;
} TimerKind;

struct TimerIndex
{
	MemoryContext context;
	TimerKind	kinds[2];		/* 'F', 'P' */
	tset_hash  *held;
	const char *probe;			/* the tail looked up */
	int			probe_len;
	int64		count;
};

static TimerKind *
kind_of(TimerIndex *ti, char kind)
{
	Assert(kind == 'F' || kind == 'P');
	return &ti->kinds[kind == 'F' ? 0 : 1];
}

/* A held timer's tail: its bucket's bytes from its offset. */
static const char *
slot_tail(TimerIndex *ti, const TimerSlotKey *s, int32 *len)
{
	TimerBucket *b;

	if (s->offset < 0)
	{
		*len = ti->probe_len;
		return ti->probe;
	}
	b = tbucket_lookup(kind_of(ti, s->kind)->buckets, s->when);
	Assert(b != NULL && s->offset < b->used);
	memcpy(len, b->data + s->offset, sizeof(int32));
	return b->data + s->offset + sizeof(int32);
}

static uint32
slot_key_hash(TimerIndex *ti, const TimerSlotKey *k)
{
	int32		len;
	const char *tail = slot_tail(ti, k, &len);
	uint32		h = local_hash_bytes(tail, len);

	h = hash_combine(h, time_hash(k->when));
	return hash_combine(h, (uint32) (unsigned char) k->kind);
}

static bool
slot_equal(TimerIndex *ti, const TimerSlotKey *a, const TimerSlotKey *b)
{
	const char *x;
	const char *y;
	int32		xl;
	int32		yl;

	if (a->when != b->when || a->kind != b->kind)
		return false;
	x = slot_tail(ti, a, &xl);
	y = slot_tail(ti, b, &yl);
	return xl == yl && memcmp(x, y, xl) == 0;
}

static TimerSlotKey
slot_probe(TimerIndex *ti, char kind, TimestampTz when, const char *tail, int len)
{
	TimerSlotKey p;

	memset(&p, 0, sizeof(p));
	p.kind = kind;
	p.when = when;
	p.offset = -1;
	ti->probe = tail;
	ti->probe_len = len;
	return p;
}

/* Forget the timer whose tail is at offset in bucket b (still there). */
static void
slot_forget(TimerIndex *ti, char kind, TimerBucket *b, int offset)
{
	int32		l;
	TimerSlotKey p;
	bool		deleted PG_USED_FOR_ASSERTS_ONLY;

	memcpy(&l, b->data + offset, sizeof(int32));
	p = slot_probe(ti, kind, b->when, b->data + offset + sizeof(int32), l);
	deleted = tset_delete(ti->held, p);
	Assert(deleted);
}

TimerIndex *
timer_index_create(MemoryContext context)
{
	TimerIndex *ti = MemoryContextAllocZero(context, sizeof(TimerIndex));

	ti->context = context;
	for (int k = 0; k < 2; k++)
	{
		ti->kinds[k].buckets = tbucket_create(context, 256, NULL);
		ti->kinds[k].heap_cap = 256;
		ti->kinds[k].heap = MemoryContextAlloc(context, sizeof(TimestampTz) * 256);
	}
	ti->held = tset_create(context, 1024, ti);
	return ti;
}

static void
heap_push(TimerIndex *ti, TimerKind *tk, TimestampTz when)
{
	int			i;

	if (tk->nheap == tk->heap_cap)
	{
		tk->heap_cap *= 2;
		tk->heap = repalloc(tk->heap, sizeof(TimestampTz) * tk->heap_cap);
	}
	i = tk->nheap++;
	while (i > 0 && tk->heap[(i - 1) / 2] > when)
	{
		tk->heap[i] = tk->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	tk->heap[i] = when;
}

static void
heap_pop(TimerKind *tk)
{
	TimestampTz last = tk->heap[--tk->nheap];
	int			i = 0;

	for (;;)
	{
		int			c = 2 * i + 1;

		if (c >= tk->nheap)
			break;
		if (c + 1 < tk->nheap && tk->heap[c + 1] < tk->heap[c])
			c++;
		if (tk->heap[c] >= last)
			break;
		tk->heap[i] = tk->heap[c];
		i = c;
	}
	if (tk->nheap > 0)
		tk->heap[i] = last;
}

void
timer_index_add(TimerIndex *ti, char kind, TimestampTz when, const char *tail, int len,
				TimerMark *mark)
{
	TimerKind  *tk = kind_of(ti, kind);
	TimerBucket *b;
	TimerSlot  *slot;
	bool		found;
	int32		l = len;

	slot = tset_insert(ti->held, slot_probe(ti, kind, when, tail, len), &found);
	if (found)
	{
		/* Held already: nothing to undo. */
		if (mark)
			mark->used = -1;
		return;
	}
	b = tbucket_insert(tk->buckets, when, &found);
	if (!found)
	{
		b->cap = 64;
		b->data = MemoryContextAlloc(ti->context, b->cap);
		b->used = 0;
		heap_push(ti, tk, when);
	}
	if (mark)
	{
		mark->kind = kind;
		mark->when = when;
		mark->used = b->used;
	}
	if (b->used + (int) sizeof(int32) + len > b->cap)
	{
		while (b->used + (int) sizeof(int32) + len > b->cap)
			b->cap *= 2;
		b->data = repalloc(b->data, b->cap);
	}
	memcpy(b->data + b->used, &l, sizeof(int32));
	memcpy(b->data + b->used + sizeof(int32), tail, len);
	slot->key.offset = b->used;
	b->used += sizeof(int32) + len;
	ti->count++;
}

bool
timer_index_holds(TimerIndex *ti, char kind, TimestampTz when, const char *tail, int len)
{
	return tset_lookup(ti->held, slot_probe(ti, kind, when, tail, len)) != NULL;
}

void
timer_index_truncate(TimerIndex *ti, const TimerMark *mark)
{
	TimerBucket *b;

	if (mark->used < 0)
		return;					/* it added none */
	b = tbucket_lookup(kind_of(ti, mark->kind)->buckets, mark->when);
	/* No timer is due inside a record: the bucket is still there. */
	Assert(b != NULL && b->used > mark->used);
	if (b == NULL)
		return;
	slot_forget(ti, mark->kind, b, mark->used);
	ti->count--;
	b->used = mark->used;
}

static int
due_cmp(const void *a, const void *b)
{
	const DueTimer *x = *(DueTimer *const *) a;
	const DueTimer *y = *(DueTimer *const *) b;

	return state_key_cmp(x->tail, x->len, y->tail, y->len);
}

List *
timer_index_due(TimerIndex *ti, char kind, TimestampTz watermark)
{
	TimerKind  *tk = kind_of(ti, kind);
	List	   *due = NIL;

	while (tk->nheap > 0 && tk->heap[0] <= watermark)
	{
		TimestampTz when = tk->heap[0];
		TimerBucket *b = tbucket_lookup(tk->buckets, when);
		DueTimer  **sorted;
		int			n = 0;
		int			pos = 0;
		char	   *copy;

		heap_pop(tk);
		Assert(b != NULL);
		copy = palloc(Max(b->used, 1));
		memcpy(copy, b->data, b->used);
		while (pos < b->used)
		{
			int32		l;

			memcpy(&l, copy + pos, sizeof(int32));
			pos += sizeof(int32) + l;
			n++;
		}
		sorted = palloc(sizeof(DueTimer *) * Max(n, 1));
		pos = 0;
		for (int i = 0; i < n; i++)
		{
			DueTimer   *t = palloc(sizeof(DueTimer));
			int32		l;

			memcpy(&l, copy + pos, sizeof(int32));
			t->when = when;
			t->tail = copy + pos + sizeof(int32);
			t->len = l;
			sorted[i] = t;
			slot_forget(ti, kind, b, pos);
			pos += sizeof(int32) + l;
		}
		ti->count -= n;
		pfree(b->data);
		tbucket_delete_item(tk->buckets, b);
		if (n > 1)
			qsort(sorted, n, sizeof(DueTimer *), due_cmp);
		for (int i = 0; i < n; i++)
			due = lappend(due, sorted[i]);
	}
	return due;
}

int64
timer_index_count(TimerIndex *ti)
{
	return ti->count;
}
