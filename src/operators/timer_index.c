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
 * Per kind, a hash from a granule of due time (TIMER_GRANULE_US) to a
 * bucket, and a min-heap of the granules that have one.  A bucket holds
 * its timers packed: the due time, an int32 length and the tail's bytes.
 * Windows of many keys share their due times, and a session's end is a
 * record's time plus the gap, so that with a bucket per due time each
 * session paid a bucket of its own: a hash insert, a heap push, an
 * allocation, and at its fire a heap pop and a lookup, each a cache miss
 * (BENCHMARKS.md, "Timers by granule, sessions fetched ahead").  A bucket
 * is only appended to; the undo of a record cuts it back to its length
 * before the record.  When the watermark reaches a granule its timers due
 * are taken out, sorted by time and then by their bytes, which gives the
 * order a range scan of the state keys gave; those not due yet stay, the
 * taken ones marked so, and the granule is looked at again at a step that
 * passes the earliest of them.
 *
 * A timer is held once, as a state key was: a window of panes is asked
 * for by each of its panes, a session by its merges.  A set of the timers
 * held (kind, time and the entry's offset in its bucket: 24 bytes a slot,
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

/*
 * The span of due times that share a bucket, a power of 2 in
 * microseconds: 65.5 ms.  A granule the watermark stops inside is looked
 * at again at each step that passes one of its timers, so the span is
 * small against the event time a batch's records cover in a busy stream
 * (about a second in the bench's).
 */
#define TIMER_GRANULE_US ((int64) 1 << 16)

/* The first time of when's granule (the mask rounds down, negative times too). */
static inline TimestampTz
granule_of(TimestampTz when)
{
	return when & ~(TIMER_GRANULE_US - 1);
}

/*
 * A timer in its bucket: the due time, the tail's length (-1 - length once
 * taken out as due: TAKEN) and the tail's bytes, unaligned.
 */
#define ENTRY_HEADER (sizeof(TimestampTz) + sizeof(int32))
#define TAKEN(len) (-1 - (len))

static inline void
entry_read(const char *entry, TimestampTz *when, int32 *len)
{
	memcpy(when, entry, sizeof(TimestampTz));
	memcpy(len, entry + sizeof(TimestampTz), sizeof(int32));
}

/* The entry's size in its bucket, taken out or not. */
static inline int
entry_size(int32 len)
{
	return ENTRY_HEADER + (len < 0 ? TAKEN(len) : len);
}

typedef struct TimerBucket
{
	TimestampTz granule;		/* granule_of its timers' due times */
	TimestampTz pending;		/* no timer not taken is due before this */
	int			live;			/* timers not taken */
	int			first;			/* none before this offset is live */
	char		status;
	char	   *data;
	int			used;
	int			cap;
} TimerBucket;

/* A bucket's bytes at most: its offsets are int32, its memory one chunk. */
#define BUCKET_MAX_BYTES MaxAllocSize

#define SH_PREFIX tbucket
#define SH_ELEMENT_TYPE TimerBucket
#define SH_KEY_TYPE TimestampTz
#define SH_KEY granule
#define SH_HASH_KEY(tb, key) time_hash(key)
#define SH_EQUAL(tb, a, b) ((a) == (b))
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

/* A timer held: its entry is at offset in the bucket of (kind, granule_of(when)). */
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
	TimestampTz *heap;			/* min-heap of the buckets' granules */
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

/* A held timer's tail: its entry's bytes in its bucket. */
static const char *
slot_tail(TimerIndex *ti, const TimerSlotKey *s, int32 *len)
{
	TimerBucket *b;

	if (s->offset < 0)
	{
		*len = ti->probe_len;
		return ti->probe;
	}
	b = tbucket_lookup(kind_of(ti, s->kind)->buckets, granule_of(s->when));
	Assert(b != NULL && s->offset < b->used);
	memcpy(len, b->data + s->offset + sizeof(TimestampTz), sizeof(int32));
	Assert(*len >= 0);
	return b->data + s->offset + ENTRY_HEADER;
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

/* Forget the timer whose entry is at offset in bucket b (still there). */
static void
slot_forget(TimerIndex *ti, char kind, TimerBucket *b, int offset)
{
	TimestampTz when;
	int32		l;
	TimerSlotKey p;
	bool		deleted PG_USED_FOR_ASSERTS_ONLY;

	entry_read(b->data + offset, &when, &l);
	Assert(l >= 0);
	p = slot_probe(ti, kind, when, b->data + offset + ENTRY_HEADER, l);
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

/* Room in the heap for one more granule. */
static void
heap_reserve(TimerKind *tk)
{
	if (tk->nheap == tk->heap_cap)
	{
		tk->heap = repalloc(tk->heap, sizeof(TimestampTz) * tk->heap_cap * 2);
		tk->heap_cap *= 2;
	}
}

static void
heap_push(TimerIndex *ti, TimerKind *tk, TimestampTz when)
{
	int			i;

	heap_reserve(tk);
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

/*
 * Room for size more bytes in b, or an ERROR that leaves b as it was past
 * BUCKET_MAX_BYTES (tens of millions of timers due within one granule).
 * Its class fails the batch, not the record (base/guard.c): the caller has
 * changed the window already, so the worker must start again from its
 * last checkpoint.
 */
static void
bucket_reserve(TimerBucket *b, int size)
{
	Size		cap = b->cap;

	if ((Size) b->used + size <= cap)
		return;
	if ((Size) b->used + size > BUCKET_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("more than %zu bytes of window timers are due within %.1f ms of event time",
						(Size) BUCKET_MAX_BYTES, TIMER_GRANULE_US / 1000.0),
				 errhint("Spread the keys over more subtasks (the job's \"parallelism\"), or over windows that end at other times.")));
	while ((Size) b->used + size > cap)
		cap = Min(cap * 2, BUCKET_MAX_BYTES);
	b->data = repalloc(b->data, cap);
	b->cap = (int) cap;
}

void
timer_index_add(TimerIndex *ti, char kind, TimestampTz when, const char *tail, int len,
				TimerMark *mark)
{
	TimerKind  *tk = kind_of(ti, kind);
	TimerSlotKey probe = slot_probe(ti, kind, when, tail, len);
	uint32		hash = slot_key_hash(ti, &probe);
	TimerBucket *b;
	TimerSlot  *slot;
	bool		found;
	int32		l = len;

	/* Nothing to undo, unless the timer is added. */
	if (mark)
		mark->used = -1;
	if (tset_lookup_hash(ti->held, probe, hash) != NULL)
		return;					/* held already */

	/*
	 * The memory first: an ERROR (out of memory, or past BUCKET_MAX_BYTES)
	 * leaves no slot in the set and no bucket out of the heap.  An empty
	 * new bucket is harmless: it goes when due.
	 */
	b = tbucket_lookup(tk->buckets, granule_of(when));
	if (b == NULL)
	{
		char	   *data = MemoryContextAlloc(ti->context, 64);

		heap_reserve(tk);
		b = tbucket_insert(tk->buckets, granule_of(when), &found);
		b->data = data;
		b->cap = 64;
		b->used = 0;
		b->live = 0;
		b->first = 0;
		b->pending = DT_NOEND;
		heap_push(ti, tk, b->granule);
	}
	bucket_reserve(b, ENTRY_HEADER + len);
	slot = tset_insert_hash(ti->held, probe, hash, &found);
	Assert(!found);
	if (mark)
	{
		mark->kind = kind;
		mark->when = when;
		mark->used = b->used;
	}
	memcpy(b->data + b->used, &when, sizeof(TimestampTz));
	memcpy(b->data + b->used + sizeof(TimestampTz), &l, sizeof(int32));
	memcpy(b->data + b->used + ENTRY_HEADER, tail, len);
	slot->key.offset = b->used;
	b->used += ENTRY_HEADER + len;
	b->pending = Min(b->pending, when);
	if (b->live++ == 0)
		b->first = slot->key.offset;
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
	b = tbucket_lookup(kind_of(ti, mark->kind)->buckets, granule_of(mark->when));
	/* No timer is due inside a record: the bucket is still there, its entries where they were. */
	Assert(b != NULL && b->used > mark->used);
	if (b == NULL)
		return;
	slot_forget(ti, mark->kind, b, mark->used);
	ti->count--;
	b->live--;
	b->used = mark->used;
}

static int
due_cmp(const void *a, const void *b)
{
	const DueTimer *x = *(DueTimer *const *) a;
	const DueTimer *y = *(DueTimer *const *) b;

	if (x->when != y->when)
		return x->when < y->when ? -1 : 1;
	return state_key_cmp(x->tail, x->len, y->tail, y->len);
}

/*
 * Take the timers due at watermark out of bucket b, as DueTimers (tails in
 * a copy, in the current memory context) sorted by time and then by tail,
 * appended to *due.  Returns whether timers not due remain; the ones taken
 * are marked so in the bucket, where the held timers' offsets still point,
 * and b->pending and b->first become the earliest time and offset of those
 * left.
 */
static bool
take_due(TimerIndex *ti, char kind, TimerBucket *b, TimestampTz watermark, List **due)
{
	DueTimer  **sorted = NULL;
	char	   *copy = NULL;
	int			copied = 0;
	int			n = 0;
	TimestampTz pending = DT_NOEND;
	int			first = b->used;

	for (int pos = b->first; pos < b->used;)
	{
		TimestampTz when;
		int32		l;

		entry_read(b->data + pos, &when, &l);
		if (l >= 0 && when <= watermark)
		{
			DueTimer   *t = palloc(sizeof(DueTimer));

			if (copy == NULL)
			{
				/* From the first timer due on: at most one per header's bytes. */
				copied = pos;
				copy = palloc(b->used - pos);
				memcpy(copy, b->data + pos, b->used - pos);
				sorted = palloc(sizeof(DueTimer *) * ((b->used - pos) / ENTRY_HEADER));
			}
			t->when = when;
			t->tail = copy + (pos - copied) + ENTRY_HEADER;
			t->len = l;
			sorted[n++] = t;
			slot_forget(ti, kind, b, pos);
			l = TAKEN(l);
			memcpy(b->data + pos + sizeof(TimestampTz), &l, sizeof(int32));
		}
		else if (l >= 0)
		{
			first = Min(first, pos);
			pending = Min(pending, when);
		}
		pos += entry_size(l);
	}
	ti->count -= n;
	b->live -= n;
	Assert((first < b->used) == (b->live > 0));
	b->pending = pending;
	b->first = first;
	if (n > 1)
		qsort(sorted, n, sizeof(DueTimer *), due_cmp);
	for (int i = 0; i < n; i++)
		*due = lappend(*due, sorted[i]);
	if (sorted)
		pfree(sorted);
	return b->live > 0;
}

/*
 * An ERROR in here leaves the index part taken: window_fire's caller lets
 * it end the worker, and the next start makes the timers again.
 */
List *
timer_index_due(TimerIndex *ti, char kind, TimestampTz watermark)
{
	TimerKind  *tk = kind_of(ti, kind);
	List	   *due = NIL;
	TimestampTz part_due = 0;
	bool		part = false;

	while (tk->nheap > 0 && tk->heap[0] <= watermark)
	{
		TimerBucket *b = tbucket_lookup(tk->buckets, tk->heap[0]);

		heap_pop(tk);
		Assert(b != NULL);

		/*
		 * A granule whose timers left are after the watermark is not looked
		 * at: a tumbling job's windows all end at once, and a watermark
		 * moving in small steps towards them would scan them all each step.
		 * Else the watermark is inside this granule, and so past every one
		 * popped before it: only the last one popped can be left part due.
		 * A bucket whose timers were all taken, or undone, goes.
		 */
		if (b->live > 0 && (b->pending > watermark || take_due(ti, kind, b, watermark, &due)))
		{
			Assert(!part);
			part = true;
			part_due = b->granule;
		}
		else
		{
			pfree(b->data);
			tbucket_delete_item(tk->buckets, b);
		}
	}
	if (part)
		heap_push(ti, tk, part_due);
	return due;
}

int64
timer_index_count(TimerIndex *ti)
{
	return ti->count;
}
