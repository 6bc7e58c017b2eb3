/*
 * state_memory.c
 *		The memory state backend: keyed state in an ordered in-memory map
 *		(a skip list, for the range scans windows need), with each
 *		checkpoint writing only the keys changed since the last one into
 *		mailer.memory_state, in the checkpoint's own transaction.
 *
 * mailer.memory_state keeps (key, epoch, value) versions, a NULL value
 * for a deleted key, so any retained epoch can be restored: the state at
 * epoch E is the newest version of each key at or before E.  Versions no
 * retained epoch needs are compacted away every few checkpoints, looking
 * only at the keys written since the last compaction: its cost follows
 * the writes, not the size of the state.
 *
 * Each version carries its key's key group (NULL in rows of release
 * 0.1.0, whose keys are read to find it).  The subtasks of a parallel job
 * share the table: each loads, deletes and compacts the versions of its
 * own key groups only, so their statements, run at the same time, never
 * touch the same rows.  Compaction goes key by key, and a subtask's keys
 * are all of its key groups.  No index serves key_group: a subtask's open
 * reads the job's rows through the primary key, as the one process of a
 * job always did, and an index would cost every checkpoint's writes.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "base/bytea.h"
#include "base/mailer.h"
#include "base/work_xact.h"
#include "jobs/catalog.h"
#include "state/state.h"

#define SKIP_MAX_LEVEL	24
#define WRITE_CHUNK		10000
#define COMPACT_EVERY	10		/* checkpoints between compactions */

typedef struct SkipNode
{
	char	   *key;
	int			klen;
	char	   *val;
	int			vlen;
	int			level;
	struct SkipNode *next[FLEXIBLE_ARRAY_MEMBER];
} SkipNode;

/*
 * A key changed since the last checkpoint; or, in the unsettled set, a key
 * written since the last compaction and the newest epoch that wrote it.
 */
typedef struct ChangedKey
{
	StateKey	key;
	uint32		hash;
	char		status;
	int64		epoch;
} ChangedKey;

#define SH_PREFIX changed
#define SH_ELEMENT_TYPE ChangedKey
#include "state/state_key_table.h"

typedef struct MemoryState
{
	StateBackend base;
	MemoryContext ctx;			/* the map */
	MemoryContext changed_ctx;	/* the changed keys; reset at each checkpoint */
	SkipNode   *head;
	int			level;
	int64		bytes;
	struct changed_hash *changed;
	MemoryContext unsettled_ctx;	/* the unsettled set, keys and table */
	struct changed_hash *unsettled;
	SPIPlanPtr	compact_plan;	/* made at the first compaction */
	int			key_groups;
	int			kg_lo;			/* the key groups this subtask owns: [kg_lo, kg_hi) */
	int			kg_hi;
	int			(*key_group_of) (const char *key, int len, int key_groups);
} MemoryState;

typedef struct MemoryIterator
{
	SkipNode   *node;
	char	   *to;
	int			tlen;
	bool		started;
} MemoryIterator;

static const StateBackendOps memory_ops;

static int
compare_keys(const char *a, int alen, const char *b, int blen)
{
	int			c = memcmp(a, b, Min(alen, blen));

	return c != 0 ? c : alen - blen;
}

/* The node of the first key >= key; update[] gets its predecessors. */
static SkipNode *
seek(MemoryState *ms, const char *key, int klen, SkipNode **update)
{
	SkipNode   *x = ms->head;

	for (int i = ms->level - 1; i >= 0; i--)
	{
		while (x->next[i] && compare_keys(x->next[i]->key, x->next[i]->klen, key, klen) < 0)
			x = x->next[i];
		if (update)
			update[i] = x;
	}
	return x->next[0];
}

/* The set's entry for the key, added with a copy of the key in ctx if new. */
static ChangedKey *
key_set_add(struct changed_hash *set, MemoryContext ctx, StateKey key)
{
	bool		found;
	ChangedKey *entry = changed_insert(set, key, &found);

	if (!found)
	{
		char	   *copy = MemoryContextAlloc(ctx, key.len);

		memcpy(copy, key.data, key.len);
		entry->key.data = copy;
	}
	return entry;
}

static void
note_changed(MemoryState *ms, const char *key, int klen)
{
	StateKey	probe = {key, klen};

	key_set_add(ms->changed, ms->changed_ctx, probe);
}

static void
new_unsettled_set(MemoryState *ms)
{
	ms->unsettled_ctx = AllocSetContextCreate(ms->ctx, "mailer unsettled keys", ALLOCSET_DEFAULT_SIZES);
	ms->unsettled = changed_create(ms->unsettled_ctx, 1024, NULL);
}

/* A bytea[] of n values; nulls may be NULL when none is. */
static Datum
bytea_array(Datum *items, bool *nulls, int n)
{
	int			dims[1] = {n};
	int			lbs[1] = {1};

	return PointerGetDatum(construct_md_array(items, nulls, 1, dims, lbs, BYTEAOID, -1, false, TYPALIGN_INT));
}

static SkipNode *
new_node(MemoryState *ms, int level)
{
	return MemoryContextAllocZero(ms->ctx, offsetof(SkipNode, next) + sizeof(SkipNode *) * level);
}

/* Insert or replace without marking the key changed (restore uses this). */
static void
map_put(MemoryState *ms, const char *key, int klen, const char *val, int vlen)
{
	SkipNode   *update[SKIP_MAX_LEVEL];
	SkipNode   *x = seek(ms, key, klen, update);

	if (x && compare_keys(x->key, x->klen, key, klen) == 0)
	{
		ms->bytes -= x->vlen;
		pfree(x->val);
	}
	else
	{
		int			level = 1;

		while (level < SKIP_MAX_LEVEL && (pg_prng_uint32(&pg_global_prng_state) & 3) == 0)
			level++;
		if (level > ms->level)
		{
			for (int i = ms->level; i < level; i++)
				update[i] = ms->head;
			ms->level = level;
		}
		x = new_node(ms, level);
		x->level = level;
		x->key = MemoryContextAlloc(ms->ctx, klen);
		memcpy(x->key, key, klen);
		x->klen = klen;
		for (int i = 0; i < level; i++)
		{
			x->next[i] = update[i]->next[i];
			update[i]->next[i] = x;
		}
		ms->bytes += klen;
	}
	x->val = MemoryContextAlloc(ms->ctx, Max(vlen, 1));
	memcpy(x->val, val, vlen);
	x->vlen = vlen;
	ms->bytes += vlen;
}

/* The columns of state_memory_open's statement: each key's newest version. */
#define Anum_restore_key		1
#define Anum_restore_value		2	/* NULL: the key was deleted */
#define Anum_restore_epoch		3
#define Anum_restore_versions	4	/* how many versions the key has */
#define Anum_restore_key_group	5	/* NULL: written by 0.1.0 */

/* A state key's key group, which a keyed-state key always has. */
static int
key_group(MemoryState *ms, const char *key, int klen)
{
	int			g = ms->key_group_of(key, klen, ms->key_groups);

	if (g < 0 || g >= ms->key_groups)
		elog(ERROR, "mailer memory state key of %d bytes, first byte %d, has no key group",
			 klen, klen > 0 ? (int) (unsigned char) key[0] : -1);
	return g;
}

static bool
owned(MemoryState *ms, const char *key, int klen)
{
	int			g = key_group(ms, key, klen);

	return g >= ms->kg_lo && g < ms->kg_hi;
}

/*
 * Versions newer than the epoch never committed: delete this subtask's.
 * Rows of release 0.1.0 have no key group: their keys are read to find
 * the owner's, and deleted one by one (such rows only exist past the epoch
 * after a restore_job to an older epoch).  Every subtask deletes only rows
 * of its own keys, so subtasks opening at once never wait on each other.
 */
static void
delete_uncommitted(MemoryState *ms, int64 epoch)
{
	Oid			types[4] = {INT8OID, INT8OID, INT4OID, INT4OID};
	Datum		values[4];
	Datum	   *keys;
	Datum	   *epochs;
	int			n = 0;

	values[0] = Int64GetDatum(ms->base.job_id);
	values[1] = Int64GetDatum(epoch);
	values[2] = Int32GetDatum(ms->kg_lo);
	values[3] = Int32GetDatum(ms->kg_hi);
	catalog_exec("DELETE FROM mailer.memory_state WHERE job_id OPERATOR(pg_catalog.=) $1 "
				 "AND key_group OPERATOR(pg_catalog.>=) $3 AND key_group OPERATOR(pg_catalog.<) $4 "
				 "AND epoch OPERATOR(pg_catalog.>) $2", 4, types, values, NULL, false);
	catalog_exec("SELECT key, epoch FROM mailer.memory_state WHERE job_id OPERATOR(pg_catalog.=) $1 "
				 "AND key_group IS NULL AND epoch OPERATOR(pg_catalog.>) $2", 2, types, values, NULL, true);
	keys = palloc(sizeof(Datum) * Max(SPI_processed, 1));
	epochs = palloc(sizeof(Datum) * Max(SPI_processed, 1));
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bytea	   *k = DatumGetByteaPP(catalog_value(r, 1, NULL));

		if (owned(ms, VARDATA_ANY(k), VARSIZE_ANY_EXHDR(k)))
		{
			keys[n] = PointerGetDatum(k);
			epochs[n] = catalog_value(r, 2, NULL);
			n++;
		}
	}
	if (n > 0)
	{
		Oid			dtypes[3] = {INT8OID, BYTEAARRAYOID, INT8ARRAYOID};
		Datum		dvalues[3];

		dvalues[0] = Int64GetDatum(ms->base.job_id);
		dvalues[1] = bytea_array(keys, NULL, n);
		dvalues[2] = PointerGetDatum(construct_array(epochs, n, INT8OID, sizeof(int64),
													 FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		catalog_exec("DELETE FROM mailer.memory_state m USING unnest($2, $3) AS u(k, e) "
					 "WHERE m.job_id OPERATOR(pg_catalog.=) $1 AND m.key OPERATOR(pg_catalog.=) u.k "
					 "AND m.epoch OPERATOR(pg_catalog.=) u.e AND m.key_group IS NULL",
					 3, dtypes, dvalues, NULL, false);
	}
}

/*
 * The subtask's key groups are all it loads, whatever the parallelism the
 * epoch was taken at: one table holds every subtask's versions, so a
 * rescale needs nothing more.
 */
StateBackend *
state_memory_open(const StateOpenArgs *args)
{
	MemoryState *ms = palloc0(sizeof(MemoryState));
	Oid			types[4] = {INT8OID, INT8OID, INT4OID, INT4OID};
	Datum		values[4];

	Assert(args->kg_lo >= 0 && args->kg_lo <= args->kg_hi && args->kg_hi <= args->key_groups);
	Assert(args->key_group_of != NULL);
	ms->base.ops = &memory_ops;
	ms->base.job_id = args->job_id;
	ms->key_groups = args->key_groups;
	ms->kg_lo = args->kg_lo;
	ms->kg_hi = args->kg_hi;
	ms->key_group_of = args->key_group_of;
	ms->ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer memory state", ALLOCSET_DEFAULT_SIZES);
	ms->changed_ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer changed keys", ALLOCSET_DEFAULT_SIZES);
	ms->changed = changed_create(CurrentMemoryContext, 1024, NULL);
	ms->head = new_node(ms, SKIP_MAX_LEVEL);
	ms->head->level = SKIP_MAX_LEVEL;
	ms->level = 1;
	new_unsettled_set(ms);

	/*
	 * The newest version of each key at or before the epoch (caller is in a
	 * transaction).  A key with older versions, or deleted, is unsettled
	 * from the start: compaction has something to drop.  Rows of 0.1.0
	 * have no key group: they are read by every subtask, which keeps its
	 * own keys.
	 */
	values[0] = Int64GetDatum(args->job_id);
	values[1] = Int64GetDatum(args->epoch);
	values[2] = Int32GetDatum(args->kg_lo);
	values[3] = Int32GetDatum(args->kg_hi);
	SPI_connect();
	delete_uncommitted(ms, args->epoch);
	catalog_exec("SELECT DISTINCT ON (key) key, value, epoch, count(*) OVER (PARTITION BY key), key_group "
				 "FROM mailer.memory_state WHERE job_id OPERATOR(pg_catalog.=) $1 "
				 "AND (key_group OPERATOR(pg_catalog.>=) $3 AND key_group OPERATOR(pg_catalog.<) $4 "
				 "OR key_group IS NULL) ORDER BY key, epoch DESC",
				 4, types, values, NULL, true);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		deleted;
		bool		no_group;
		bytea	   *k = DatumGetByteaPP(catalog_value(r, Anum_restore_key, NULL));
		Datum		v = catalog_value(r, Anum_restore_value, &deleted);
		StateKey	key = {VARDATA_ANY(k), VARSIZE_ANY_EXHDR(k)};

		(void) catalog_value(r, Anum_restore_key_group, &no_group);
		if (no_group && !owned(ms, key.data, key.len))
			continue;
		if (!deleted)
		{
			bytea	   *value = DatumGetByteaPP(v);

			map_put(ms, key.data, key.len, VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
		}
		if (deleted || DatumGetInt64(catalog_value(r, Anum_restore_versions, NULL)) > 1)
			key_set_add(ms->unsettled, ms->unsettled_ctx, key)->epoch =
				DatumGetInt64(catalog_value(r, Anum_restore_epoch, NULL));
	}
	SPI_finish();
	return &ms->base;
}

static bool
mem_get(StateBackend *backend, const char *key, int klen, StringInfo val)
{
	MemoryState *ms = (MemoryState *) backend;
	SkipNode   *x = seek(ms, key, klen, NULL);

	if (x == NULL || compare_keys(x->key, x->klen, key, klen) != 0)
		return false;
	resetStringInfo(val);
	appendBinaryStringInfo(val, x->val, x->vlen);
	return true;
}

static void
mem_put(StateBackend *backend, const char *key, int klen, const char *val, int vlen)
{
	MemoryState *ms = (MemoryState *) backend;

	map_put(ms, key, klen, val, vlen);
	note_changed(ms, key, klen);
}

static void
mem_delete(StateBackend *backend, const char *key, int klen)
{
	MemoryState *ms = (MemoryState *) backend;
	SkipNode   *update[SKIP_MAX_LEVEL];
	SkipNode   *x = seek(ms, key, klen, update);

	if (x == NULL || compare_keys(x->key, x->klen, key, klen) != 0)
		return;
	for (int i = 0; i < x->level; i++)
		if (update[i]->next[i] == x)
			update[i]->next[i] = x->next[i];
	ms->bytes -= x->klen + x->vlen;
	note_changed(ms, key, klen);
	pfree(x->key);
	pfree(x->val);
	pfree(x);
}

static StateIterator *
mem_iterate(StateBackend *backend, const char *from, int flen, const char *to, int tlen)
{
	MemoryState *ms = (MemoryState *) backend;
	MemoryIterator *mi = palloc0(sizeof(MemoryIterator));

	mi->node = seek(ms, from, flen, NULL);
	if (to)
	{
		mi->to = palloc(tlen);
		memcpy(mi->to, to, tlen);
		mi->tlen = tlen;
	}
	return (StateIterator *) mi;
}

/*
 * The node after the one returned last.  A caller may delete the key it was
 * just given (windows do, as they fire): the successor is taken first.
 */
static bool
mem_next(StateIterator *it, const char **key, int *klen, const char **val, int *vlen)
{
	MemoryIterator *mi = (MemoryIterator *) it;
	SkipNode   *x = mi->node;

	if (x == NULL || (mi->to && compare_keys(x->key, x->klen, mi->to, mi->tlen) >= 0))
		return false;
	*key = x->key;
	*klen = x->klen;
	*val = x->val;
	*vlen = x->vlen;
	mi->node = x->next[0];
	return true;
}

static void
mem_iterate_end(StateIterator *it)
{
	MemoryIterator *mi = (MemoryIterator *) it;

	if (mi->to)
		pfree(mi->to);
	pfree(mi);
}

/* Write the changed keys as versions of this epoch (inside its transaction). */
static char *
mem_checkpoint(StateBackend *backend, int64 epoch)
{
	MemoryState *ms = (MemoryState *) backend;
	changed_iterator iter;
	ChangedKey *ck;
	int			n = 0;
	int			cap = Min(Max(ms->changed->members, 1), WRITE_CHUNK);
	Datum	   *keys = palloc(sizeof(Datum) * cap);
	Datum	   *vals = palloc(sizeof(Datum) * cap);
	bool	   *nulls = palloc(sizeof(bool) * cap);
	Datum	   *groups = palloc(sizeof(Datum) * cap);
	Oid			types[5] = {INT8OID, INT8OID, BYTEAARRAYOID, BYTEAARRAYOID, INT4ARRAYOID};

	SPI_connect();
	changed_start_iterate(ms->changed, &iter);
	for (;;)
	{
		SkipNode   *x;

		ck = changed_iterate(ms->changed, &iter);
		if (ck)
		{
			key_set_add(ms->unsettled, ms->unsettled_ctx, ck->key)->epoch = epoch;
			x = seek(ms, ck->key.data, ck->key.len, NULL);
			keys[n] = PointerGetDatum(mailer_bytea(ck->key.data, ck->key.len));
			groups[n] = Int32GetDatum(key_group(ms, ck->key.data, ck->key.len));
			Assert(DatumGetInt32(groups[n]) >= ms->kg_lo && DatumGetInt32(groups[n]) < ms->kg_hi);
			if (x && compare_keys(x->key, x->klen, ck->key.data, ck->key.len) == 0)
			{
				vals[n] = PointerGetDatum(mailer_bytea(x->val, x->vlen));
				nulls[n] = false;
			}
			else
				nulls[n] = true;
			n++;
		}
		if (n > 0 && (ck == NULL || n == cap))
		{
			Datum		values[5];

			values[0] = Int64GetDatum(ms->base.job_id);
			values[1] = Int64GetDatum(epoch);
			values[2] = bytea_array(keys, NULL, n);
			values[3] = bytea_array(vals, nulls, n);
			values[4] = PointerGetDatum(construct_array(groups, n, INT4OID, sizeof(int32), true, TYPALIGN_INT));
			catalog_exec("INSERT INTO mailer.memory_state (job_id, epoch, key, value, key_group) "
						 "SELECT $1, $2, k, v, g FROM unnest($3, $4, $5) AS u(k, v, g)",
						 5, types, values, NULL, false);
			n = 0;
		}
		if (ck == NULL)
			break;
	}
	SPI_finish();
	changed_reset(ms->changed);
	MemoryContextReset(ms->changed_ctx);
	return pstrdup("memory_state");
}

/*
 * Deletes the versions of one key that no epoch from keep_from ($3) on
 * needs: those older than its newest version at or before keep_from, and
 * that one too when it is a deletion (nothing older is left for it to
 * hide).  One key at a time, through one generic plan: equality on the
 * primary key's first two columns, whatever the table's statistics say.
 * They are often stale (a new job's versions are in none), and a plan for
 * many keys at once made from them can scan all of a job's versions.
 */
static const char compact_sql[] =
"DELETE FROM mailer.memory_state m WHERE m.job_id OPERATOR(pg_catalog.=) $1 "
"AND m.key OPERATOR(pg_catalog.=) $2 AND m.epoch OPERATOR(pg_catalog.<=) $3 "
"AND (m.value IS NULL OR m.epoch OPERATOR(pg_catalog.<) "
"(SELECT pg_catalog.max(n.epoch) FROM mailer.memory_state n WHERE n.job_id OPERATOR(pg_catalog.=) $1 "
"AND n.key OPERATOR(pg_catalog.=) $2 AND n.epoch OPERATOR(pg_catalog.<=) $3))";

/*
 * Every few checkpoints, compact the keys whose newest write is at or
 * before keep_from.  A key written since waits for a later compaction:
 * its versions up to keep_from are only dropped late, never wrongly.
 */
static void
mem_committed(StateBackend *backend, int64 epoch, int64 keep_from)
{
	MemoryState *ms = (MemoryState *) backend;
	MemoryContext old_ctx = ms->unsettled_ctx;
	struct changed_hash *old = ms->unsettled;
	changed_iterator iter;
	ChangedKey *ck;
	CatalogAccess access;
	Datum		values[3];

	if (epoch % COMPACT_EVERY != 0 || keep_from <= 1)
		return;
	work_xact_begin();
	SPI_connect();
	catalog_enter(&access);
	/* Were the plan made anew (the table changed), no sequential scan for it */
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (ms->compact_plan == NULL)
	{
		Oid			types[3] = {INT8OID, BYTEAOID, INT8OID};

		ms->compact_plan = SPI_prepare_cursor(compact_sql, 3, types, CURSOR_OPT_GENERIC_PLAN);
		if (ms->compact_plan == NULL || SPI_keepplan(ms->compact_plan) != 0)
			elog(ERROR, "mailer could not prepare the memory state compaction: %s",
				 SPI_result_code_string(SPI_result));
	}
	values[0] = Int64GetDatum(ms->base.job_id);
	values[2] = Int64GetDatum(keep_from);
	new_unsettled_set(ms);
	changed_start_iterate(old, &iter);
	while ((ck = changed_iterate(old, &iter)) != NULL)
	{
		int			rc;

		if (ck->epoch > keep_from)
		{
			key_set_add(ms->unsettled, ms->unsettled_ctx, ck->key)->epoch = ck->epoch;
			continue;
		}
		values[1] = PointerGetDatum(mailer_bytea(ck->key.data, ck->key.len));
		rc = SPI_execute_plan(ms->compact_plan, values, NULL, false, 0);
		if (rc != SPI_OK_DELETE)
			elog(ERROR, "mailer memory state compaction failed: %s", SPI_result_code_string(rc));
		pfree(DatumGetPointer(values[1]));
	}
	catalog_leave(&access);
	SPI_finish();
	work_xact_end();
	MemoryContextDelete(old_ctx);
}

static int64
mem_size(StateBackend *backend)
{
	return ((MemoryState *) backend)->bytes;
}

static const StateBackendOps memory_ops = {
	.get = mem_get,
	.put = mem_put,
	.delete = mem_delete,
	.iterate = mem_iterate,
	.next = mem_next,
	.iterate_end = mem_iterate_end,
	.checkpoint = mem_checkpoint,
	.committed = mem_committed,
	.size = mem_size,
};
