/*
 * keyed.c
 *		The keyed stage: aggregates per key (and per window, with window.c),
 *		kept in the job's state backend.
 *
 * Entries touched since the last checkpoint live in a cache, decoded; the
 * backend holds them serialized.  At a checkpoint the stage emits the rows
 * due (changed keys, windows fired or updated), writes every changed entry
 * to the backend and, when the cache has grown past
 * mailer.state_cache_entries, lets it go: memory stays bounded by what
 * changes between checkpoints, not by the number of keys.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/datum.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "base/mailer.h"
#include "base/guard.h"
#include "operators/keyed_internal.h"
#include "state/serial.h"
#include "operators/watermark.h"

typedef struct CacheSlot
{
	StateKey	key;
	uint32		hash;
	char		status;
	KeyedEntry *entry;
} CacheSlot;

#define SH_PREFIX kcache
#define SH_ELEMENT_TYPE CacheSlot
#define SH_KEY_TYPE StateKey
#define SH_KEY key
#define SH_HASH_KEY(tb, k) state_key_hash(k)
#define SH_EQUAL(tb, a, b) state_key_equal(a, b)
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) a->hash
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

static void encode_group(KeyedStage *ks, Record *rec, StringInfo buf);
static void decode_group(KeyedStage *ks, const char *data, int len, Record *out);
static void drop_cache(KeyedStage *ks);
static void write_entry(KeyedStage *ks, KeyedEntry *e);
static void undo_save(KeyedStage *ks, KeyedEntry *e);

/* An entry as it was before the current record, or a timer it put or deleted. */
typedef struct KeyedUndo
{
	KeyedEntry *entry;
	KeyedEntry	saved;
	StringInfoData data;		/* the entry's serialized state, or the timer's key */
	bool		put;			/* a timer: put (else deleted) */
} KeyedUndo;

KeyedStage *
keyed_create(Job *job)
{
	KeyedStage *ks = palloc0(sizeof(KeyedStage));

	ks->job = job;
	ks->plan = job->plan;
	ks->state = job->state;
	ks->naggs = job->plan->naggs;
	ks->aggs = job->plan->aggs;
	ks->cache_context = AllocSetContextCreate(job->job_context, "mailer keyed cache",
											  ALLOCSET_DEFAULT_SIZES);
	ks->out_context = AllocSetContextCreate(job->job_context, "mailer keyed output",
											ALLOCSET_DEFAULT_SIZES);
	ks->undo_context = AllocSetContextCreate(job->job_context, "mailer keyed undo",
											 ALLOCSET_SMALL_SIZES);
	ks->cache = kcache_create(ks->cache_context, 1024, NULL);
	initStringInfo(&ks->group);
	initStringInfo(&ks->key);
	initStringInfo(&ks->value);
	ks->args = palloc0(sizeof(Datum) * Max(ks->naggs, 1));
	ks->argnulls = palloc0(sizeof(bool) * Max(ks->naggs, 1));
	ks->empty = palloc0(sizeof(AggValue) * Max(ks->naggs, 1));
	keyed_scratch(ks, 1);
	/* Restored from the checkpoint: late is judged against it from the first record. */
	ks->watermark = watermark_current(job->watermarks);
	return ks;
}

void
keyed_eval_args(KeyedStage *ks, Record *rec, Datum *args, bool *nulls)
{
	for (int a = 0; a < ks->naggs; a++)
	{
		args[a] = (Datum) 0;
		nulls[a] = true;
		if (ks->aggs[a]->arg)
			args[a] = expr_eval(ks->aggs[a]->arg, ks->job->rt, rec, &nulls[a]);
	}
}

bool
keyed_add(KeyedStage *ks, Record *rec, const Datum *args, const bool *nulls)
{
	KeyedEntry *e;

	memcpy(ks->args, args, sizeof(Datum) * ks->naggs);
	memcpy(ks->argnulls, nulls, sizeof(bool) * ks->naggs);
	resetStringInfo(&ks->group);
	encode_group(ks, rec, &ks->group);
	if (ks->plan->window)
		return window_add(ks, rec, ks->group.data, ks->group.len);

	keyed_key_begin(ks, 'A');
	appendBinaryStringInfo(&ks->key, ks->group.data, ks->group.len);
	e = keyed_lookup(ks, ks->key.data, ks->key.len, true);
	keyed_compute(ks, e->values, ks->next);
	keyed_store(ks, e->values, ks->next);
	e->unemitted = true;
	keyed_mark_dirty(ks, e);
	return true;
}

void
keyed_advance_watermark(KeyedStage *ks, TimestampTz watermark)
{
	TimestampTz previous = ks->watermark;

	if (!ks->plan->window || watermark <= previous)
		return;
	ks->watermark = watermark;
	window_fire(ks, previous, watermark);
}

/*
 * Group keys: each key field's bytes, by-value types as a Datum, others as
 * their untoasted image with a length.  Equal values give equal bytes.
 */
static void
encode_group(KeyedStage *ks, Record *rec, StringInfo buf)
{
	RecordSchema *schema = ks->plan->schema;

	for (int i = 0; i < ks->plan->nkeys; i++)
	{
		int			slot = ks->plan->key_slots[i];
		RecordField *f = &schema->fields[slot];

		serial_put_datum(buf, rec->values[slot], f->typlen, f->typbyval);
	}
}

/* Key fields back from their bytes, into the first slots of an output record. */
static void
decode_group(KeyedStage *ks, const char *data, int len, Record *out)
{
	RecordSchema *schema = ks->plan->schema;
	int			pos = 0;

	for (int i = 0; i < ks->plan->nkeys; i++)
	{
		RecordField *f = &schema->fields[ks->plan->key_slots[i]];

		out->values[i] = serial_get_datum(data, len, &pos, f->typlen, f->typbyval, CurrentMemoryContext);
		out->isnull[i] = false;
	}
	serial_check_end(len, pos);
}

void
keyed_key_begin(KeyedStage *ks, char kind)
{
	resetStringInfo(&ks->key);
	appendStringInfoChar(&ks->key, kind);
}

void
keyed_key_append_time(StringInfo buf, TimestampTz t)
{
	uint64		u = ((uint64) t) ^ (UINT64CONST(1) << 63);
	char		b[8];

	for (int i = 7; i >= 0; i--)
	{
		b[i] = (char) (u & 0xFF);
		u >>= 8;
	}
	appendBinaryStringInfo(buf, b, 8);
}

TimestampTz
keyed_key_read_time(const char *p)
{
	uint64		u = 0;

	for (int i = 0; i < 8; i++)
		u = (u << 8) | (unsigned char) p[i];
	return (TimestampTz) (u ^ (UINT64CONST(1) << 63));
}

AggValue *
keyed_new_values(KeyedStage *ks)
{
	AggValue   *values = MemoryContextAlloc(ks->cache_context, sizeof(AggValue) * Max(ks->naggs, 1));

	for (int a = 0; a < ks->naggs; a++)
		aggregate_init(ks->aggs[a], &values[a]);
	return values;
}

/*
 * The cached entry of a state key, read from the backend on a miss; NULL
 * when it exists nowhere and create is false.
 */
KeyedEntry *
keyed_lookup(KeyedStage *ks, const char *key, int klen, bool create)
{
	StateKey	probe = {key, klen};
	CacheSlot  *slot = kcache_lookup(ks->cache, probe);
	KeyedEntry *e;
	bool		stored;
	bool		found;
	char	   *chunk;
	char	   *copy;
	Size		vsize;
	char		kind = key[0];

	if (slot)
	{
		if (ks->undo_active && !slot->entry->undo_saved)
			undo_save(ks, slot->entry);
		return slot->entry;
	}
	stored = ks->state->ops->get(ks->state, key, klen, &ks->value);
	if (!stored && !create)
		return NULL;

	/* One chunk for the entry, its aggregates and its key: keeps many entries small. */
	vsize = (kind == 'A' || kind == 'W') ? MAXALIGN(sizeof(AggValue) * ks->naggs) : 0;
	chunk = MemoryContextAllocZero(ks->cache_context, MAXALIGN(sizeof(KeyedEntry)) + vsize + klen);
	e = (KeyedEntry *) chunk;
	if (vsize > 0)
		e->values = (AggValue *) (chunk + MAXALIGN(sizeof(KeyedEntry)));
	copy = chunk + MAXALIGN(sizeof(KeyedEntry)) + vsize;
	memcpy(copy, key, klen);
	e->key.data = copy;
	e->key.len = klen;
	e->stored = stored;
	e->group_offset = 1;
	e->group_len = klen - 1 - (kind == 'W' ? 8 : 0);
	if (kind == 'A')
	{
		if (stored)
		{
			int			pos = 0;

			for (int a = 0; a < ks->naggs; a++)
				aggregate_deserialize(ks->aggs[a], &e->values[a], ks->value.data, ks->value.len,
									  &pos, ks->cache_context);
		}
	}
	else if (stored)
		window_deserialize(ks, e, ks->value.data, ks->value.len);
	else if (kind == 'W')
		e->start = e->end = DT_NOBEGIN;

	slot = kcache_insert(ks->cache, e->key, &found);
	slot->entry = e;
	if (ks->undo_active)
		undo_save(ks, e);
	return e;
}

void
keyed_begin_record(KeyedStage *ks)
{
	MemoryContextReset(ks->undo_context);
	ks->undo_active = true;
	ks->undo_entries = NIL;
	ks->undo_timers = NIL;
	ks->undo_ndirty = ks->ndirty;
	ks->undo_nout = list_length(ks->out_rows);
}

void
keyed_end_record(KeyedStage *ks)
{
	ListCell   *lc;

	foreach(lc, ks->undo_entries)
		((KeyedUndo *) lfirst(lc))->entry->undo_saved = false;
	ks->undo_active = false;
	ks->undo_entries = ks->undo_timers = NIL;
}

/*
 * Entries back as they were (from their serialized state: stores free the
 * datums they replace), timers put removed and timers deleted put back,
 * rows emitted and entries marked dirty since the record began dropped.
 */
void
keyed_abort_record(KeyedStage *ks)
{
	ListCell   *lc;

	if (!ks->undo_active)
		return;
	foreach(lc, ks->undo_entries)
	{
		KeyedUndo  *u = lfirst(lc);
		KeyedEntry *e = u->entry;

		*e = u->saved;
		if (e->key.data[0] == 'A')
		{
			int			pos = 0;

			for (int a = 0; a < ks->naggs; a++)
				aggregate_deserialize(ks->aggs[a], &e->values[a], u->data.data, u->data.len,
									  &pos, ks->cache_context);
		}
		else
		{
			e->sessions = NIL;
			window_deserialize(ks, e, u->data.data, u->data.len);
		}
	}
	for (int i = list_length(ks->undo_timers) - 1; i >= 0; i--)
	{
		KeyedUndo  *u = list_nth(ks->undo_timers, i);

		if (u->put)
			ks->state->ops->delete(ks->state, u->data.data, u->data.len);
		else
			ks->state->ops->put(ks->state, u->data.data, u->data.len, "", 0);
	}
	ks->ndirty = ks->undo_ndirty;
	ks->out_rows = list_truncate(ks->out_rows, ks->undo_nout);
	ks->out_deletes = list_truncate(ks->out_deletes, ks->undo_nout);
	ks->undo_active = false;
	ks->undo_entries = ks->undo_timers = NIL;
}

static void
undo_save(KeyedStage *ks, KeyedEntry *e)
{
	MemoryContext old = MemoryContextSwitchTo(ks->undo_context);
	KeyedUndo  *u = palloc0(sizeof(KeyedUndo));

	u->entry = e;
	u->saved = *e;
	initStringInfo(&u->data);
	if (e->key.data[0] == 'A')
		for (int a = 0; a < ks->naggs; a++)
			aggregate_serialize(ks->aggs[a], &e->values[a], &u->data);
	else
		window_serialize(ks, e, &u->data);
	ks->undo_entries = lappend(ks->undo_entries, u);
	e->undo_saved = true;
	MemoryContextSwitchTo(old);
}

/* A timer is about to be put or deleted: remember it if that changes the backend. */
void
keyed_undo_timer(KeyedStage *ks, const char *key, int klen, bool put)
{
	MemoryContext old;
	KeyedUndo  *u;

	if (!ks->undo_active || ks->state->ops->get(ks->state, key, klen, &ks->value) == put)
		return;
	old = MemoryContextSwitchTo(ks->undo_context);
	u = palloc0(sizeof(KeyedUndo));
	initStringInfo(&u->data);
	appendBinaryStringInfo(&u->data, key, klen);
	u->put = put;
	ks->undo_timers = lappend(ks->undo_timers, u);
	MemoryContextSwitchTo(old);
}

void
keyed_mark_dirty(KeyedStage *ks, KeyedEntry *e)
{
	if (e->dirty)
		return;
	if (ks->ndirty == ks->dirty_capacity)
	{
		int			cap = Max(1024, ks->dirty_capacity * 2);

		ks->dirty = ks->dirty ? repalloc(ks->dirty, sizeof(KeyedEntry *) * cap) :
			MemoryContextAlloc(ks->cache_context, sizeof(KeyedEntry *) * cap);
		ks->dirty_capacity = cap;
	}
	ks->dirty[ks->ndirty++] = e;
	e->dirty = true;
}

/* Scratch arrays for a record that goes into nwindows windows. */
void
keyed_scratch(KeyedStage *ks, int nwindows)
{
	if (nwindows <= ks->scratch_windows)
		return;
	if (ks->next)
	{
		pfree(ks->next);
		pfree(ks->windows);
	}
	ks->next = MemoryContextAlloc(ks->job->job_context,
								  sizeof(AggValue) * Max(ks->naggs, 1) * nwindows);
	ks->windows = MemoryContextAlloc(ks->job->job_context, sizeof(KeyedEntry *) * nwindows);
	ks->scratch_windows = nwindows;
}

/*
 * The values that folding the current record's arguments into values give,
 * into next, values left as they are: an ERROR here (an overflow) leaves
 * the state as it was.
 */
void
keyed_compute(KeyedStage *ks, const AggValue *values, AggValue *next)
{
	for (int a = 0; a < ks->naggs; a++)
		aggregate_next(ks->aggs[a], &values[a], &next[a], ks->args[a], ks->argnulls[a]);
}

/* Make values the next that keyed_compute (or merges) gave. */
void
keyed_store(KeyedStage *ks, AggValue *values, const AggValue *next)
{
	for (int a = 0; a < ks->naggs; a++)
		aggregate_store(ks->aggs[a], &values[a], &next[a], ks->cache_context);
}

/* An output row (or, with delete, a row to delete) for the next checkpoint. */
void
keyed_emit(KeyedStage *ks, const char *group, int group_len, TimestampTz start,
		   TimestampTz end, AggValue *values, bool delete)
{
	JobPlan    *plan = ks->plan;
	MemoryContext old = MemoryContextSwitchTo(ks->out_context);
	Record	   *out = record_alloc(plan->out_schema);
	int			n = plan->nkeys;

	decode_group(ks, group, group_len, out);
	if (plan->window)
	{
		out->values[n] = TimestampTzGetDatum(start);
		out->isnull[n++] = false;
		out->values[n] = TimestampTzGetDatum(end);
		out->isnull[n++] = false;
	}
	for (int a = 0; a < ks->naggs && !delete; a++, n++)
		out->values[n] = aggregate_result(ks->aggs[a], &values[a], &out->isnull[n]);
	/* One list, so that the sink sees rows and deletes of a key in their order. */
	ks->out_rows = lappend(ks->out_rows, out);
	ks->out_deletes = lappend_int(ks->out_deletes, delete ? 1 : 0);
	MemoryContextSwitchTo(old);
}

int64
keyed_pending(KeyedStage *ks)
{
	return ks->ndirty + list_length(ks->out_rows);
}

/* Output rows into the sink: a row whose cast fails becomes a dead letter. */
typedef struct ProjectRun
{
	KeyedStage *ks;
	List	   *rows;
	List	   *deletes;
} ProjectRun;

static void
project_row(void *arg, int i)
{
	ProjectRun *run = (ProjectRun *) arg;
	Job		   *job = run->ks->job;
	int			ncols = job->plan->sink->ncolumns;
	Datum	   *values = palloc(sizeof(Datum) * ncols);
	bool	   *nulls = palloc(sizeof(bool) * ncols);

	sink_project(job->sink, job->out_rt, list_nth(run->rows, i), values, nulls);
	if (list_nth_int(run->deletes, i))
		sink_buffer_delete(job->sink, values, nulls);
	else
		sink_buffer_add(job->sink, values, nulls, NULL, -1, -1);
}

static void
project_failed(void *arg, int i, ErrorData *edata)
{
	ProjectRun *run = (ProjectRun *) arg;
	Job		   *job = run->ks->job;
	char	   *row = record_to_json(job->plan->out_schema, list_nth(run->rows, i));

	if (job->spec->on_error == ON_ERROR_FAIL)
	{
		job->failing = true;
		ereport(ERROR,
				(errcode(edata->sqlerrcode),
				 errmsg("an output row could not be written: %s", edata->message),
				 errdetail("The row: %s", row)));
	}
	if (job->spec->on_error == ON_ERROR_DEAD_LETTER)
		dead_letter_add(job->dead_letters, NULL, -1, -1, NULL, -1, row, strlen(row), "sink",
						guard_error_text(edata));
}

void
keyed_prepare_checkpoint(KeyedStage *ks)
{
	ProjectRun	run;

	for (int i = 0; i < ks->ndirty; i++)
	{
		KeyedEntry *e = ks->dirty[i];

		if (e->deleted)
			continue;
		if (e->key.data[0] == 'A')
		{
			if (e->unemitted)
				keyed_emit(ks, e->key.data + 1, e->key.len - 1, 0, 0, e->values, false);
			e->unemitted = false;
		}
		else
			window_emit_changed(ks, e);
	}

	run.ks = ks;
	run.rows = ks->out_rows;
	run.deletes = ks->out_deletes;
	guard_each(list_length(run.rows), project_row, project_failed, &run, ks->job->batch_context);
	MemoryContextReset(ks->job->batch_context);
	ks->out_rows = ks->out_deletes = NIL;
	MemoryContextReset(ks->out_context);

	for (int i = 0; i < ks->ndirty; i++)
		write_entry(ks, ks->dirty[i]);
	ks->ndirty = 0;
	if (ks->cache->members > mailer_state_cache_entries)
		drop_cache(ks);
}

static void
write_entry(KeyedStage *ks, KeyedEntry *e)
{
	e->dirty = false;
	if (e->deleted)
	{
		/* A window that came and went between two checkpoints never reaches the backend. */
		if (e->stored)
			ks->state->ops->delete(ks->state, e->key.data, e->key.len);
		kcache_delete(ks->cache, e->key);
		return;
	}
	e->stored = true;
	resetStringInfo(&ks->value);
	if (e->key.data[0] == 'A')
		for (int a = 0; a < ks->naggs; a++)
			aggregate_serialize(ks->aggs[a], &e->values[a], &ks->value);
	else
		window_serialize(ks, e, &ks->value);
	ks->state->ops->put(ks->state, e->key.data, e->key.len, ks->value.data, ks->value.len);
}

/*
 * The cache has grown past mailer.state_cache_entries, and every entry is
 * in the backend now: start afresh.  Resetting the context gives all its
 * memory back at once, where freeing entries one by one would leave it
 * fragmented.
 */
static void
drop_cache(KeyedStage *ks)
{
	MemoryContextReset(ks->cache_context);
	ks->cache = kcache_create(ks->cache_context, 1024, NULL);
	ks->dirty = NULL;
	ks->dirty_capacity = 0;
}

