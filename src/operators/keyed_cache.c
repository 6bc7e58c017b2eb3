/*
 * keyed_cache.c
 *		The keyed stage's cache of decoded entries, its undo and its
 *		output rows (keyed_cache.h).
 *
 * Entries touched since the last checkpoint live in a cache, decoded; the
 * backend holds them serialized.  At a checkpoint every changed entry is
 * written to the backend and, when the cache has grown by more than
 * mailer.state_cache_entries since it was last rebuilt (or that many
 * entries holding memory out of line were dropped since, or it passed a
 * memory limit), it is rebuilt with at most that many of the entries the
 * next records are likely to touch, and a hash table that a burst of keys
 * left sparse is made smaller: memory stays bounded by the setting and
 * what changes between checkpoints, not by the number of keys.
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "base/cpu_prefetch.h"
#include "base/guard.h"
#include "base/local_hash.h"
#include "base/mailer.h"
#include "base/test_point.h"
#include "operators/keyed_cache.h"
#include "state/serial.h"

/*
 * A slot holds the key's first CACHE_PREFIX bytes (zero padded) besides its
 * hash: a probe compares them in the slot, and the entry's copy of the key
 * (in another cache line, often missing from the CPU's caches) is read
 * only for the bytes past them.  A tumbling window's key ('W', a short
 * group key, the window's start) fits whole.  The hash and compare of the
 * keyed lookup were about a fifth of a keyed tumbling job.
 */
#define CACHE_PREFIX 24

typedef struct CacheKey
{
	uint64		prefix[CACHE_PREFIX / sizeof(uint64)];
	const char *data;			/* the whole key (the entry's copy, in a slot) */
	int			len;
} CacheKey;

typedef struct CacheSlot
{
	CacheKey	key;
	uint32		hash;
	char		status;
	KeyedEntry *entry;
} CacheSlot;

static inline CacheKey
cache_key(const char *data, int len)
{
	CacheKey	k = {{0}, data, len};

	memcpy(k.prefix, data, Min(len, CACHE_PREFIX));
	return k;
}

static inline bool
cache_key_equal(const CacheKey *a, const CacheKey *b)
{
	return a->len == b->len && a->prefix[0] == b->prefix[0] && a->prefix[1] == b->prefix[1] &&
		a->prefix[2] == b->prefix[2] &&
		(a->len <= CACHE_PREFIX ||
		 memcmp(a->data + CACHE_PREFIX, b->data + CACHE_PREFIX, a->len - CACHE_PREFIX) == 0);
}

StaticAssertDecl(CACHE_PREFIX == 3 * sizeof(uint64), "cache_key_equal compares three words");

/*
 * Between two rebuilds the cache holds up to mailer.state_cache_entries
 * clean entries, twice that for a job whose last rebuild kept entries
 * (windows, panes, sessions), and the interval's new ones (about
 * mailer.max_buffered_rows of them, more with absent panes and a batch's
 * overshoot): about 200k in 262,144 slots at the defaults, or 300k in
 * 524,288 for a windowed job past the setting.  simplehash also grows
 * when an insert would move more than SH_GROW_MAX_MOVE entries (150 by
 * default) or land more than SH_GROW_MAX_DIB slots (25) from its key's
 * home; the move limit doubled the table at about 0.78 full, to
 * 524,288 slots of 56 bytes: 28 MiB allocated anew, beside the old table,
 * several times a minute at 5M keys.  With these limits the fill factor
 * (0.9) decides, to within about 1%; a miss then walks more slots on
 * average (about 7 rather than 4 near that load), which the bench did not
 * show in CPU (BENCHMARKS.md, "The worker's memory at 5M keys").
 */
#define SH_GROW_MAX_DIB 64
#define SH_GROW_MAX_MOVE 1024
#define SH_PREFIX kcache
#define SH_ELEMENT_TYPE CacheSlot
#define SH_KEY_TYPE CacheKey
#define SH_KEY key
#define SH_HASH_KEY(tb, k) keyed_cache_hash((k).data, (k).len)
#define SH_EQUAL(tb, a, b) cache_key_equal(&(a), &(b))
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) a->hash
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

/* The chunk of an entry of kind with a key of klen bytes: entry, values, key. */
static inline Size
entry_size(KeyedStage *stage, char kind, int klen)
{
	Size		vsize = (kind == 'A' || kind == 'W' || kind == 'L') ?
		MAXALIGN(sizeof(AggValue) * stage->naggs) : 0;

	return MAXALIGN(sizeof(KeyedEntry)) + vsize + klen;
}

static void undo_save(KeyedStage *stage, KeyedEntry *e);
static KeyedEntry *lookup(KeyedStage *stage, const char *key, int klen, bool create, bool read,
						  const char *val, int vlen);

/* Entries a new cache's table is made for (simplehash gives it 2048 slots). */
#define CACHE_FIRST_ENTRIES 1024

void
keyed_cache_create(KeyedStage *stage)
{
	stage->cache = kcache_create(stage->table_context, CACHE_FIRST_ENTRIES, NULL);
	stage->dirty = NULL;
	stage->dirty_capacity = 0;
}

/* The cache's memory: its entries and its table. */
static Size
cache_bytes(KeyedStage *stage)
{
	return MemoryContextMemAllocated(stage->cache_context, true) +
		MemoryContextMemAllocated(stage->table_context, true);
}

void
keyed_key_begin(KeyedStage *stage, char kind)
{
	resetStringInfo(&stage->key);
	appendStringInfoChar(&stage->key, kind);
}

KeyedEntry *
keyed_lookup(KeyedStage *stage, const char *key, int klen, bool create)
{
	return lookup(stage, key, klen, create, true, NULL, 0);
}

KeyedEntry *
keyed_lookup_known(KeyedStage *stage, const char *key, int klen, bool create, const char *val,
				   int vlen)
{
	return lookup(stage, key, klen, create, false, val, vlen);
}

KeyedEntry *
keyed_cache_find(KeyedStage *stage, const char *key, int klen)
{
	CacheSlot  *slot = kcache_lookup(stage->cache, cache_key(key, klen));

	return slot ? slot->entry : NULL;
}

/*
 * A new cache entry for key, from its serialized value (val NULL: a new
 * one, with no values yet), in one chunk: entry, values, key.  Keeps many
 * entries small.
 */
static KeyedEntry *
entry_new(KeyedStage *stage, const char *key, int klen, bool stored, const char *val, int vlen)
{
	char		kind = key[0];
	Size		vsize = entry_size(stage, kind, 0) - MAXALIGN(sizeof(KeyedEntry));
	char	   *chunk = MemoryContextAllocZero(stage->cache_context, entry_size(stage, kind, klen));
	KeyedEntry *e = (KeyedEntry *) chunk;
	char	   *copy = chunk + MAXALIGN(sizeof(KeyedEntry)) + vsize;
	CacheSlot  *slot;
	bool		found;

	if (vsize > 0)
		e->values = (AggValue *) (chunk + MAXALIGN(sizeof(KeyedEntry)));
	memcpy(copy, key, klen);
	e->key.data = copy;
	e->key.len = klen;
	e->stored = stored;
	e->group_offset = 1;
	e->group_len = klen - 1 - (kind == 'W' || kind == 'L' ? 8 : 0);
	if (val != NULL)
		keyed_entry_deserialize(&stage->codec, e, val, vlen);
	else if (kind == 'W' || kind == 'L')
		e->start = e->end = DT_NOBEGIN;

	slot = kcache_insert(stage->cache, cache_key(e->key.data, e->key.len), &found);
	slot->entry = e;
	return e;
}

static KeyedEntry *
lookup(KeyedStage *stage, const char *key, int klen, bool create, bool read, const char *val,
	   int vlen)
{
	CacheSlot  *slot = kcache_lookup(stage->cache, cache_key(key, klen));
	KeyedEntry *e;
	bool		stored;

	if (slot)
	{
		if (stage->undo_active && !slot->entry->undo_saved)
			undo_save(stage, slot->entry);
		return slot->entry;
	}
	if (read)
	{
		stored = stage->state->ops->get(stage->state, key, klen, &stage->value);
		val = stage->value.data;
		vlen = stage->value.len;
	}
	else
		stored = val != NULL;
	if (!stored && !create)
		return NULL;

	e = entry_new(stage, key, klen, stored, stored ? val : NULL, vlen);
	if (stage->undo_active)
		undo_save(stage, e);
	return e;
}

/*
 * As SH_HASH_KEY: the hash simplehash keeps in the key's slot.  Seeded per
 * process (base/local_hash.h): the keys are the producers' to choose.
 */
uint32
keyed_cache_hash(const char *key, int klen)
{
	return local_hash_bytes(key, klen);
}

/*
 * With 100k keys' windows the table is megabytes: the probe's first load of
 * the slot missed the CPU's caches for almost every record, and the load
 * of the entry it points to again.  The caller asks for both ahead of use:
 * every cache line of the slot (56 bytes: one or two lines), then every
 * line of the entry's chunk, with its values (lookup).
 */
void
keyed_cache_prefetch_slot(KeyedStage *stage, uint32 hash)
{
	cpu_prefetch_lines(&stage->cache->data[hash & stage->cache->sizemask],
					   sizeof(CacheSlot));
}

/*
 * The first slot of that hash in the probe's order: another key of the same
 * hash only makes the hint useless.  The table may have grown or changed
 * since the hash was taken; the hash still finds where the key is now.
 */
#define PREFETCH_PROBES 8

KeyedEntry *
keyed_cache_peek(KeyedStage *stage, uint32 hash)
{
	struct kcache_hash *tb = stage->cache;
	uint32		i = hash & tb->sizemask;

	for (int n = 0; n < PREFETCH_PROBES; n++, i = (i + 1) & tb->sizemask)
	{
		CacheSlot  *slot = &tb->data[i];

		if (slot->status == kcache_SH_EMPTY)
			return NULL;
		if (slot->status == kcache_SH_IN_USE && slot->hash == hash)
			return slot->entry;
	}
	return NULL;
}

void
keyed_cache_prefetch_entry(KeyedStage *stage, uint32 hash)
{
	KeyedEntry *e = keyed_cache_peek(stage, hash);

	/* A session's entry ('S') is smaller: a line too many does no harm. */
	if (e)
		cpu_prefetch_lines(e, entry_size(stage, 'W', 0));
}

static void
undo_save(KeyedStage *stage, KeyedEntry *e)
{
	MemoryContext old = MemoryContextSwitchTo(stage->undo_context);
	KeyedUndo  *u = palloc0(sizeof(KeyedUndo));

	u->entry = e;
	u->saved = *e;
	initStringInfo(&u->data);
	keyed_entry_serialize(&stage->codec, e, &u->data);
	stage->undo_entries = lappend(stage->undo_entries, u);
	e->undo_saved = true;
	MemoryContextSwitchTo(old);
}

void
keyed_mark_dirty(KeyedStage *stage, KeyedEntry *e)
{
	if (e->dirty)
		return;
	if (stage->ndirty == stage->dirty_capacity)
	{
		int			cap = Max(1024, stage->dirty_capacity * 2);

		stage->dirty = stage->dirty ? repalloc(stage->dirty, sizeof(KeyedEntry *) * cap) :
			MemoryContextAlloc(stage->cache_context, sizeof(KeyedEntry *) * cap);
		stage->dirty_capacity = cap;
	}
	stage->dirty[stage->ndirty++] = e;
	e->dirty = true;
}

void
keyed_scratch(KeyedStage *stage, int nwindows)
{
	if (nwindows <= stage->scratch_windows)
		return;
	if (stage->next)
	{
		pfree(stage->next);
		pfree(stage->windows);
	}
	stage->next = MemoryContextAlloc(stage->context,
									 sizeof(AggValue) * Max(stage->naggs, 1) * nwindows);
	stage->windows = MemoryContextAlloc(stage->context, sizeof(KeyedEntry *) * nwindows);
	stage->scratch_windows = nwindows;
}

void
keyed_compute(KeyedStage *stage, const AggValue *values, AggValue *next)
{
	for (int a = 0; a < stage->naggs; a++)
		aggregate_next(stage->aggs[a], &values[a], &next[a], stage->args[a], stage->argnulls[a]);
}

void
keyed_store(KeyedStage *stage, AggValue *values, const AggValue *next)
{
	for (int a = 0; a < stage->naggs; a++)
		aggregate_store(stage->aggs[a], &values[a], &next[a], stage->cache_context);
}

/* Key fields back from their bytes, into the first slots of an output record. */
static void
decode_group(KeyedStage *stage, const char *data, int len, Record *out)
{
	RecordSchema *schema = stage->plan->schema;
	int			pos = 0;

	for (int i = 0; i < stage->plan->nkeys; i++)
	{
		RecordField *f = &schema->fields[stage->plan->key_slots[i]];

		out->values[i] = serial_get_datum(data, len, &pos, f->typlen, f->typbyval, CurrentMemoryContext);
		out->isnull[i] = false;
	}
	serial_check_end(len, pos);
}

void
keyed_emit(KeyedStage *stage, const char *group, int group_len, TimestampTz start,
		   TimestampTz end, AggValue *values, bool delete)
{
	JobPlan    *plan = stage->plan;
	MemoryContext old = MemoryContextSwitchTo(stage->out_context);
	Record	   *out = record_alloc(plan->out_schema);
	int			n = plan->nkeys;

	decode_group(stage, group, group_len, out);
	if (plan->window)
	{
		out->values[n] = TimestampTzGetDatum(start);
		out->isnull[n++] = false;
		out->values[n] = TimestampTzGetDatum(end);
		out->isnull[n++] = false;
	}
	for (int a = 0; a < stage->naggs && !delete; a++, n++)
		out->values[n] = aggregate_result(stage->aggs[a], &values[a], &out->isnull[n]);
	/* One list, so that the sink sees rows and deletes of a key in their order. */
	stage->out_rows = lappend(stage->out_rows, out);
	stage->out_deletes = lappend_int(stage->out_deletes, delete ? 1 : 0);
	MemoryContextSwitchTo(old);
}

/* Output rows into the sink: a row whose cast fails becomes a dead letter. */
typedef struct ProjectRun
{
	KeyedStage *stage;
	List	   *rows;
	List	   *deletes;
} ProjectRun;

static void
project_row(void *arg, int i)
{
	ProjectRun *run = (ProjectRun *) arg;
	KeyedStage *stage = run->stage;
	int			ncols = stage->plan->sink_width;
	Datum	   *values = palloc(sizeof(Datum) * ncols);
	bool	   *nulls = palloc(sizeof(bool) * ncols);

	sink_project(stage->sink, stage->out_rt, list_nth(run->rows, i), values, nulls);
	if (list_nth_int(run->deletes, i))
		sink_buffer_delete(stage->sink, values, nulls);
	else
		sink_buffer_add(stage->sink, values, nulls, NULL, -1, -1);
}

static void
project_failed(void *arg, int i, ErrorData *edata)
{
	ProjectRun *run = (ProjectRun *) arg;
	KeyedStage *stage = run->stage;
	char	   *row = record_to_json(stage->plan->out_schema, list_nth(run->rows, i));

	if (stage->on_error == ON_ERROR_FAIL)
	{
		*stage->failing = true;
		ereport(ERROR,
				(errcode(edata->sqlerrcode),
				 errmsg("an output row could not be written: %s", edata->message),
				 errdetail("The row: %s", row)));
	}
	if (stage->on_error == ON_ERROR_DEAD_LETTER)
		dead_letter_add(stage->dead_letters, NULL, -1, -1, NULL, -1, row, strlen(row), "sink",
						guard_error_text(edata));
}

/* Rows emitted at a checkpoint between two slices: about 1 MB. */
#define OUT_ROWS_SLICE 4096

/*
 * A checkpoint emits a row for every changed key and changed window: held
 * all at once with their projections they were about 30 MB of a worker at
 * 5M keys (BENCHMARKS.md, "The checkpoint's rows in slices").
 */
void
keyed_emit_slice(KeyedStage *stage, bool all)
{
	ProjectRun	run;

	/* Between records only: an aborted record truncates out_rows to its start. */
	Assert(!stage->undo_active);
	if (!all && list_length(stage->out_rows) < OUT_ROWS_SLICE)
		return;
	run.stage = stage;
	run.rows = stage->out_rows;
	run.deletes = stage->out_deletes;
	guard_each(list_length(run.rows), project_row, project_failed, &run, stage->work_context);
	MemoryContextReset(stage->work_context);
	stage->out_rows = stage->out_deletes = NIL;
	MemoryContextReset(stage->out_context);
	/* A slice in the sink buffer, more to emit: a crash here must lose and double nothing. */
	if (!all)
		TEST_POINT("keyed_slice_flushed");
}

/*
 * Whether values own memory out of line, which freeing them alone would
 * leak: such memory goes only with a rebuild, which cache_dropped brings on.
 * Counts, and sums, averages and extremes held in place (integers, floats,
 * a numeric sum while it fits its scaled form) own none, so a job of them
 * drops its purged windows and sessions without rebuilding the cache for
 * them (a rebuild lets go the live entries its interval did not change,
 * which the backend is then asked for again).
 */
static bool
values_own_memory(KeyedStage *stage, const AggValue *values)
{
	for (int a = 0; a < stage->naggs; a++)
	{
		if (aggregate_owns_memory(stage->aggs[a], &values[a]))
			return true;
	}
	return false;
}

/* A deleted entry: its chunk is freed whole, sessions it holds are not. */
static bool
entry_owns_memory(KeyedStage *stage, KeyedEntry *e)
{
	if (e->key.data[0] == 'S')
		return e->sessions != NIL;
	return values_own_memory(stage, e->values);
}

/*
 * A session taken from its entry's list (purged, or merged into another):
 * freed now when its values own nothing out of line, else left to a
 * rebuild.  Nothing else points to it: a record's undo restores the entry's
 * sessions from their serialized form (keyed_abort_record).
 */
void
keyed_drop_session(KeyedStage *stage, Session *s)
{
	if (values_own_memory(stage, s->values))
	{
		stage->cache_dropped++;
		return;
	}
	pfree(s->values);
	pfree(s);
}

static void
write_entry(KeyedStage *stage, KeyedEntry *e)
{
	e->dirty = false;
	if (e->deleted)
	{
		/* A window that came and went between two checkpoints never reaches the backend. */
		if (e->stored)
			stage->state->ops->delete(stage->state, e->key.data, e->key.len);
		kcache_delete(stage->cache, cache_key(e->key.data, e->key.len));
		if (entry_owns_memory(stage, e))
			stage->cache_dropped++;
		return;					/* freed by keyed_write_dirty, which still reads it */
	}
	e->stored = true;
	resetStringInfo(&stage->value);
	keyed_entry_serialize(&stage->codec, e, &stage->value);
	stage->state->ops->put(stage->state, e->key.data, e->key.len, stage->value.data,
						   stage->value.len);
}

/*
 * Whether a cache rebuilt at a checkpoint keeps e, which the interval
 * changed.  A window or pane that has not ended takes the key's next
 * records, and a key's sessions stay open while the key is active: letting
 * them go made the tumbling job read every live window back from RocksDB
 * after each checkpoint at 5M orders (BENCHMARKS.md, "Per-record speed
 * (issue 16)").  A window that has ended takes only late records.  A
 * running aggregate ('A') has no end to tell: with keys spread over
 * millions, keeping the changed ones would copy the whole bound at every
 * checkpoint for a few hits, so they go, as before.
 */
static bool
worth_keeping(KeyedStage *stage, KeyedEntry *e)
{
	switch (e->key.data[0])
	{
		case 'W':
		case 'L':
			return !e->deleted && e->end > stage->watermark;
		case 'S':
			return !e->deleted;
		default:
			return false;
	}
}

/*
 * The cache is rebuilt once every entry is in the backend: when it holds
 * mailer.state_cache_entries more than the last rebuild kept; when more
 * than that many entries or sessions that held memory out of line (a
 * general aggregate's state, a numeric or text datum: values_own_memory),
 * or entries a failed record undid, went since (only a rebuild frees what
 * they held); or past
 * CACHE_MEMORY_LIMIT of memory (and CACHE_MEMORY_PER_ENTRY per entry, so
 * that large live entries do not force a rebuild at every checkpoint).
 * Counting from what the last rebuild kept lets a tumbling job whose live
 * windows outnumber the setting (two per key at a window's end) keep them
 * all, where a rebuild at every checkpoint let go the windows its interval
 * had not touched, to be read back from the backend, and copied the rest
 * (BENCHMARKS.md, "The keyed cache counts from what it kept").  A running
 * aggregate keeps nothing, so its cache is let go at the setting.  What a
 * rebuild keeps is held to half the memory limit: a rebuild the memory
 * forced would otherwise keep it all, copy it at every checkpoint, and
 * hold it twice while it does.
 */
#define CACHE_MEMORY_LIMIT ((Size) 256 * 1024 * 1024)
#define CACHE_SPARSE 8			/* slots an entry past which the table is made smaller */
#define CACHE_MEMORY_PER_ENTRY ((Size) 16 * 1024)	/* past this a member on average, it is garbage */

/*
 * Whether the table is less than an eighth full for as many entries: a
 * burst of keys grew it and went.  Both ways of making it smaller, at a
 * rebuild and without one, ask this.
 */
static inline bool
table_sparse(KeyedStage *stage, uint64 entries)
{
	return stage->cache->size > CACHE_SPARSE * Max(entries, CACHE_FIRST_ENTRIES);
}

/*
 * The table emptied for a rebuild, its slots kept: the interval after it
 * takes about as many entries as the one before (the rebuild's trigger
 * counts from what it keeps).  Made anew, it doubled eight times from 2048
 * slots back to 524,288 (28 MiB, mapped and faulted in afresh) in every
 * interval of a sliding job at 100k keys, which rebuilt about every three
 * seconds (BENCHMARKS.md, "The keyed cache's table kept across
 * rebuilds").  A table the interval left less than an eighth full (a
 * burst of keys went) is made anew for as many entries as the interval
 * held.  The next checkpoint's check for a sparse table counts those too
 * (table_entries): a rebuild that kept few entries leaves the table
 * nearly empty for an interval that will fill it again.  The dirty array
 * is the old context's, and goes with it.
 */
static void
empty_table(KeyedStage *stage)
{
	uint64		had = stage->cache->members;

	stage->table_entries = had;
	if (table_sparse(stage, had))
	{
		kcache_destroy(stage->cache);
		stage->cache = kcache_create(stage->table_context, Max(had, CACHE_FIRST_ENTRIES), NULL);
	}
	else
		kcache_reset(stage->cache);
	stage->dirty = NULL;
	stage->dirty_capacity = 0;
}

/*
 * The cache anew, with its entries in a new context: the changed entries worth
 * keeping, at most mailer.state_cache_entries of them, copied through
 * their serialized form (what the backend holds).  The old context goes
 * whole: freeing entries one by one would leave it fragmented, and what
 * the entries deleted since the last rebuild held out of line is still
 * there.  The new cache is consistent after each copy; an ERROR in one
 * ends the worker, which resumes from its last checkpoint.
 */
static void
rebuild_cache(KeyedStage *stage, KeyedEntry **changed, int nchanged)
{
	MemoryContext old_context = stage->cache_context;
	int			kept = 0;

	stage->cache_context = AllocSetContextCreate(stage->context, "mailer keyed cache",
												 ALLOCSET_DEFAULT_SIZES);
	stage->codec.ctx = stage->cache_context;
	empty_table(stage);
	/*
	 * The entries kept, not the table kept with its slots: one made for 2M
	 * entries (mailer.state_cache_entries at a million) is 235 MB, and
	 * would leave room for none.
	 */
	for (int i = 0; i < nchanged && kept < mailer_state_cache_entries &&
		 MemoryContextMemAllocated(stage->cache_context, true) < CACHE_MEMORY_LIMIT / 2; i++)
	{
		KeyedEntry *e = changed[i];

		if (!worth_keeping(stage, e))
			continue;
		resetStringInfo(&stage->value);
		keyed_entry_serialize(&stage->codec, e, &stage->value);
		entry_new(stage, e->key.data, e->key.len, e->stored, stage->value.data, stage->value.len);
		kept++;
	}
	stage->cache_kept = kept;
	stage->cache_dropped = 0;
	MemoryContextDelete(old_context);
}

/*
 * A table that a burst of keys grew, less than an eighth full once they
 * went: its entries, as they are, into a table made for twice as many (or
 * a new cache's size), so that the next few inserts do not grow it again
 * at once, as session_keys_trim does for its counts.  simplehash never
 * shrinks, and a rebuild would let go the live entries the interval did
 * not change.
 */
static void
shrink_table(KeyedStage *stage)
{
	struct kcache_hash *old = stage->cache;
	kcache_iterator it;
	CacheSlot  *slot;

	stage->cache = kcache_create(stage->table_context,
								 Max(CACHE_FIRST_ENTRIES, old->members * 2), NULL);
	kcache_start_iterate(old, &it);
	while ((slot = kcache_iterate(old, &it)) != NULL)
	{
		bool		found;

		kcache_insert(stage->cache, slot->key, &found)->entry = slot->entry;
		Assert(!found);
	}
	kcache_destroy(old);
}

void
keyed_write_dirty(KeyedStage *stage)
{
	int			nchanged = stage->ndirty;
	int64		limit = mailer_state_cache_entries;

	for (int i = 0; i < nchanged; i++)
		write_entry(stage, stage->dirty[i]);
	stage->ndirty = 0;
	stage->panes_changed_from = DT_NOEND;	/* every pane a record changed is written */
	if (stage->cache->members > Min(stage->cache_kept, limit) + limit ||
		stage->cache_dropped > limit ||
		cache_bytes(stage) > Max(CACHE_MEMORY_LIMIT, stage->cache->members * CACHE_MEMORY_PER_ENTRY))
	{
		rebuild_cache(stage, stage->dirty, nchanged);
		return;
	}
	if (table_sparse(stage, Max(stage->cache->members, stage->table_entries)))
		shrink_table(stage);
	stage->table_entries = stage->cache->members;
	/*
	 * No rebuild: a deleted entry's chunk (entry, values, key) goes back to
	 * the context for the next entry of its size, a tumbling key's next
	 * window.  What its values held out of line waits for the next rebuild,
	 * which cache_dropped brings on.
	 */
	for (int i = 0; i < nchanged; i++)
	{
		if (stage->dirty[i]->deleted)
			pfree(stage->dirty[i]);
	}
}
