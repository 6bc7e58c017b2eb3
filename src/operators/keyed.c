/*
 * keyed.c
 *		The keyed stage (keyed.h): aggregates per key, and per window with
 *		window.c, kept in the job's state backend through the cache of
 *		keyed_cache.c.
 *
 * At a checkpoint the stage emits the rows due (changed keys, windows
 * fired or updated), hands them to the sink and writes every changed
 * entry to the backend.
 *
 * Design: docs/ARCHITECTURE.md, "The keyed stage".
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "operators/agg_general.h"
#include "operators/keyed.h"
#include "operators/keyed_cache.h"
#include "operators/window.h"
#include "state/serial.h"

static void encode_group(KeyedStage *stage, Record *rec, StringInfo buf);
static void running_total_key(KeyedStage *stage, const char *group, int group_len);

KeyedStage *
keyed_create(const KeyedStageArgs *args)
{
	MemoryContext context = AllocSetContextCreate(args->context, "mailer keyed stage",
												  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(context);
	KeyedStage *stage = palloc0(sizeof(KeyedStage));
	int			n;

	stage->job_name = args->job_name;
	stage->plan = args->plan;
	stage->state = args->state;
	stage->rt = args->rt;
	stage->out_rt = args->out_rt;
	stage->sink = args->sink;
	stage->dead_letters = args->dead_letters;
	stage->on_error = args->on_error;
	stage->failing = args->failing;
	stage->naggs = args->plan->naggs;
	stage->aggs = args->plan->aggs;
	stage->context = context;
	stage->work_context = AllocSetContextCreate(context, "mailer keyed work",
												ALLOCSET_DEFAULT_SIZES);
	stage->cache_context = AllocSetContextCreate(context, "mailer keyed cache",
												 ALLOCSET_DEFAULT_SIZES);
	stage->table_context = AllocSetContextCreate(context, "mailer keyed cache table",
												 ALLOCSET_DEFAULT_SIZES);
	stage->out_context = AllocSetContextCreate(context, "mailer keyed output",
											   ALLOCSET_DEFAULT_SIZES);
	stage->undo_context = AllocSetContextCreate(context, "mailer keyed undo",
												ALLOCSET_SMALL_SIZES);
	stage->codec.job_name = stage->job_name;
	stage->codec.naggs = stage->naggs;
	stage->codec.aggs = stage->aggs;
	stage->codec.ctx = stage->cache_context;
	keyed_cache_create(stage);
	initStringInfo(&stage->key);
	initStringInfo(&stage->value);
	n = Max(stage->naggs, 1);
	stage->args = palloc0(sizeof(Datum) * n);
	stage->argnulls = palloc0(sizeof(bool) * n);
	stage->empty = palloc0(sizeof(AggValue) * n);
	keyed_scratch(stage, 1);
	/* Restored from the checkpoint: late is judged against it from the first record. */
	stage->watermark = args->watermark;
	if (stage->plan->window)
		window_setup(stage);
	MemoryContextSwitchTo(old);
	return stage;
}

void
keyed_eval_args(KeyedStage *stage, Record *rec, Datum *args, bool *nulls)
{
	for (int a = 0; a < stage->naggs; a++)
	{
		args[a] = (Datum) 0;
		nulls[a] = true;
		if (stage->aggs[a]->arg)
			args[a] = expr_eval(stage->aggs[a]->arg, stage->rt, rec, &nulls[a]);
		else if (stage->aggs[a]->general)
			args[a] = agg_general_pack(stage->aggs[a], stage->rt, rec, &nulls[a]);
	}
}

void
keyed_group_key(KeyedStage *stage, Record *rec, StringInfo out)
{
	resetStringInfo(out);
	encode_group(stage, rec, out);
}

bool
keyed_add_group(KeyedStage *stage, const char *group, int group_len, TimestampTz event_time,
				const Datum *args, const bool *nulls)
{
	KeyedEntry *e;

	memcpy(stage->args, args, sizeof(Datum) * stage->naggs);
	memcpy(stage->argnulls, nulls, sizeof(bool) * stage->naggs);
	if (stage->plan->window)
		return window_add(stage, event_time, group, group_len);

	running_total_key(stage, group, group_len);
	e = keyed_lookup(stage, stage->key.data, stage->key.len, true);
	keyed_compute(stage, e->values, stage->next);
	keyed_store(stage, e->values, stage->next);
	e->unemitted = true;
	keyed_mark_dirty(stage, e);
	return true;
}

uint32
keyed_slot_hash(KeyedStage *stage, const char *group, int group_len, TimestampTz event_time)
{
	if (stage->plan->window)
		window_first_key(stage, event_time, group, group_len);
	else
		running_total_key(stage, group, group_len);
	return keyed_cache_hash(stage->key.data, stage->key.len);
}

/* The slot and the entry, and a session window's links after them. */
int
keyed_prefetch_links(KeyedStage *stage)
{
	StaticAssertStmt(KEYED_PREFETCH_LINKS == 2 + WINDOW_SESSION_LINKS, "the links keyed_prefetch fetches");
	if (stage->plan->window && stage->plan->window->type == WINDOW_SESSION)
		return KEYED_PREFETCH_LINKS;
	return 2;
}

void
keyed_prefetch(KeyedStage *stage, uint32 hash, int link)
{
	Assert(link < keyed_prefetch_links(stage));
	if (link == 0)
		keyed_cache_prefetch_slot(stage, hash);
	else if (link == 1)
		keyed_cache_prefetch_entry(stage, hash);
	else
		window_prefetch_sessions(stage, keyed_cache_peek(stage, hash), link - 2);
}

/* stage->key := the state key of a group's running totals (no window). */
static void
running_total_key(KeyedStage *stage, const char *group, int group_len)
{
	keyed_key_begin(stage, 'A');
	appendBinaryStringInfo(&stage->key, group, group_len);
}

/* The due timers are listed in work_context, which is the stage's to reset. */
void
keyed_advance_watermark(KeyedStage *stage, TimestampTz watermark)
{
	MemoryContext old;

	if (!stage->plan->window || watermark <= stage->watermark)
		return;
	stage->watermark = watermark;
	old = MemoryContextSwitchTo(stage->work_context);
	window_fire(stage, watermark);
	MemoryContextSwitchTo(old);
	MemoryContextReset(stage->work_context);
}

/*
 * Group keys: each key field's bytes, by-value types as a Datum, others as
 * their untoasted image with a length.  Equal values give equal bytes.
 */
static void
encode_group(KeyedStage *stage, Record *rec, StringInfo buf)
{
	RecordSchema *schema = stage->plan->schema;

	for (int i = 0; i < stage->plan->nkeys; i++)
	{
		int			slot = stage->plan->key_slots[i];
		RecordField *f = &schema->fields[slot];

		serial_put_datum(buf, rec->values[slot], f->typlen, f->typbyval);
	}
}

void
keyed_begin_record(KeyedStage *stage)
{
	MemoryContextReset(stage->undo_context);
	stage->undo_active = true;
	stage->undo_entries = NIL;
	stage->undo_timers = NIL;
	stage->undo_ndirty = stage->ndirty;
	stage->undo_nout = list_length(stage->out_rows);
	if (stage->plan->window)
		window_undo_mark(stage);
}

void
keyed_end_record(KeyedStage *stage)
{
	ListCell   *lc;

	foreach(lc, stage->undo_entries)
		((KeyedUndo *) lfirst(lc))->entry->undo_saved = false;
	stage->undo_active = false;
	stage->undo_entries = stage->undo_timers = NIL;
}

/*
 * Entries back as they were (from their serialized state: stores free the
 * datums they replace), timers put removed (a record deletes none),
 * rows emitted and entries marked dirty since the record began dropped.
 */
void
keyed_abort_record(KeyedStage *stage)
{
	ListCell   *lc;

	if (!stage->undo_active)
		return;
	foreach(lc, stage->undo_entries)
	{
		KeyedUndo  *u = lfirst(lc);
		KeyedEntry *e = u->entry;

		*e = u->saved;
		e->sessions = NIL;
		keyed_entry_deserialize(&stage->codec, e, u->data.data, u->data.len);
		stage->cache_dropped++; /* the values it had go with a rebuild */
	}
	for (int i = list_length(stage->undo_timers) - 1; i >= 0; i--)
		timer_index_truncate(stage->timers, list_nth(stage->undo_timers, i));
	if (stage->plan->window)
		window_undo(stage);
	stage->ndirty = stage->undo_ndirty;
	stage->out_rows = list_truncate(stage->out_rows, stage->undo_nout);
	stage->out_deletes = list_truncate(stage->out_deletes, stage->undo_nout);
	stage->undo_active = false;
	stage->undo_entries = stage->undo_timers = NIL;
}

int64
keyed_pending(KeyedStage *stage)
{
	return stage->ndirty + list_length(stage->out_rows);
}

void
keyed_prepare_checkpoint(KeyedStage *stage)
{
	for (int i = 0; i < stage->ndirty; i++)
	{
		KeyedEntry *e = stage->dirty[i];

		if (e->deleted)
			continue;
		if (e->key.data[0] == 'A')
		{
			if (e->unemitted)
				keyed_emit(stage, e->key.data + 1, e->key.len - 1, 0, 0, e->values, false);
			e->unemitted = false;
		}
		else
			window_emit_changed(stage, e);
		/* in order: the rows before (windows fired since the last checkpoint) go first */
		keyed_emit_slice(stage, false);
	}
	if (stage->plan->window)
	{
		MemoryContext old = MemoryContextSwitchTo(stage->work_context);

		window_emit_panes(stage);
		MemoryContextSwitchTo(old);
	}
	keyed_emit_slice(stage, true);

	keyed_write_dirty(stage);
}

int
keyed_naggs(KeyedStage *stage)
{
	return stage->naggs;
}

/* count(*) has no argument: carried as a NULL int8. */
void
keyed_arg_type(KeyedStage *stage, int a, int16 *typlen, bool *typbyval)
{
	AggregateDef *agg = stage->aggs[a];

	/* any aggregate's values travel packed in a bytea (agg_general.h) */
	*typlen = agg->arg ? agg->arg_typlen : agg->general ? -1 : sizeof(int64);
	*typbyval = agg->arg ? agg->arg_typbyval : agg->general == NULL;
}
