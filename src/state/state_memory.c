/*
 * state_memory.c
 *		The memory state backend: keyed state in an ordered in-memory map
 *		(a skip list, for the range scans windows need), with each
 *		checkpoint writing only the keys changed since the last one, in the
 *		checkpoint's own transaction: as redo, folded into one row per key
 *		every few checkpoints.
 *
 * A new key's node is found by a hash of the nodes and joins the skip list
 * only when a range scan needs the order: until then it waits, unlinked,
 * in an array.  A tumbling or session window's keys are put and deleted
 * again without any scan in between, so they never pay for the order;
 * a sliding window's fire scans, and links the waiting keys first, sorted,
 * in one pass from the smallest.
 *
 * A checkpoint writes the keys changed since the one before, with their
 * values now, to mailer.memory_redo, packed as the undo below is.  One in
 * mailer.memory_fold_checkpoints (and a worker's first and final ones)
 * folds instead: it writes the keys changed since the last fold into their
 * rows, with their undo, but carries a new key (one with no row) to its
 * redo instead, at up to two folds.  A key put and purged within about
 * three folds (a window's) never gets a row, and one changed at every
 * checkpoint (a running total's, a session's) is updated once a fold:
 * the row writes had been most of this backend's cost.  An open rewinds
 * the rows to the fold the checkpoint it opens names (its state_ref),
 * then replays the redo from it on.
 *
 * mailer.memory_state holds one row per key, the value as of the newest
 * committed fold, updated in place: the table's fillfactor leaves
 * room on each page, so an update is a HOT update and the table does not
 * grow with the checkpoints.  It has no index: each node keeps its row's
 * address, where the checkpoints write, and only an open reads the rows,
 * all of a subtask's at once (a primary key had cost an index entry per
 * new key and per update that left its page).
 * mailer.memory_undo holds, for each fold still retained, each key that
 * fold wrote with its row's value before (NULL: the key had no row),
 * packed into rows of about a page per key group (memory_undo.h).  Opening
 * at epoch E rewinds: a key written by a fold after E gets back the undo
 * value of the oldest fold after E that wrote it, and those undo rows go,
 * as does the redo after E.  Undo rows
 * only ever enter in the transaction that changes the keys, so whatever
 * committed can be rewound, whether the epoch counts (a parallel job's
 * share of an epoch whose decision failed, a restore_job) or not.  Undo and
 * redo no retained checkpoint needs are deleted after the commit, a slice
 * at a time.
 *
 * Each row carries its key's key group.  The subtasks of a parallel job
 * share the tables: each rewinds, loads, writes and cleans the rows of its
 * own key groups only, so their statements, run at the same time, never
 * touch the same rows, and a rescale needs nothing more.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "base/bytea.h"
#include "base/key_groups.h"
#include "base/mailer.h"
#include "base/test_point.h"
#include "base/work_xact.h"
#include "jobs/catalog.h"
#include "state/memory_rows.h"
#include "state/memory_undo.h"
#include "state/state.h"

#define SKIP_MAX_LEVEL	24
#define WAITING_KEPT	(64 * 1024)	/* waiting slots the array shrinks to at least */
#define WRITE_CHUNK		20000	/* keys per statement of a checkpoint */
#define WRITE_CHUNK_BYTES	(64 * 1024 * 1024)	/* and values per statement, at most about */
#define LOAD_CHUNK		10000	/* rows per fetch of an open */
#define CLEAN_SLICE		1000	/* undo rows (of up to a page each) per transaction of a cleanup */
#define CLEAN_SLICES	2		/* slices per call beyond what the checkpoint wrote */
#define REPLAY_CHUNK	100		/* redo rows (of up to a page each) per fetch of an open */
#define FOLD_HELD_MIN	(64 * 1024 * 1024)	/* changed keys' old values that always wait for the fold */
#define CARRY_FOLDS		2		/* folds that carry a key with no row as redo, at most */

typedef struct SkipNode
{
	char	   *key;
	int			klen;
	int			waiting;		/* its place in ms->waiting; -1: linked */
	char	   *val;
	int			vlen;
	int			level;
	ItemPointerData tid;		/* the key's row as of the last checkpoint; invalid: none */
	struct SkipNode *next[FLEXIBLE_ARRAY_MEMBER];
} SkipNode;

/* The map's nodes by key: a point lookup is one probe, not a skip list search. */
typedef struct NodeEntry
{
	StateKey	key;			/* the node's own key bytes */
	uint32		hash;
	char		status;
	SkipNode   *node;
} NodeEntry;

#define SH_PREFIX nodes
#define SH_ELEMENT_TYPE NodeEntry
#include "state/state_key_table.h"

/*
 * A key changed since the last fold, and what it was then (its row): its
 * undo.  old is the value the map held (moved here, not copied, at the
 * first change), NULL when the key was absent.
 */
typedef struct ChangedKey
{
	StateKey	key;
	uint32		hash;
	int			oldlen;
	char	   *old;
	SkipNode   *node;			/* the key's node now; NULL: absent */
	ItemPointerData tid;		/* the key's row, when it existed */
	char		status;
	bool		existed;
	bool		dirty;			/* changed since the last checkpoint: its redo is due */
	bool		logged;			/* a checkpoint's redo holds it (since it entered the set) */
	uint8		carried;		/* folds that wrote it to their redo, not to a row */
} ChangedKey;

/*
 * Both tables hash with state_key_hash (state_key_table.h): a put or
 * delete hashes its key once, for both (each hash had been about 1% of a
 * tumbling job's worker on this backend).
 */
#define SH_PREFIX changed
#define SH_ELEMENT_TYPE ChangedKey
#include "state/state_key_table.h"

/* A key whose redo is due, found again in the changed set by its key and hash. */
typedef struct DirtyKey
{
	StateKey	key;			/* the changed set's copy, which lives until the fold */
	uint32		hash;
} DirtyKey;

typedef struct MemoryState
{
	StateBackend base;
	MemoryContext ctx;			/* the map, and the undo values of changed keys */
	MemoryContext changed_ctx;	/* the changed keys; reset at each fold */
	SkipNode   *head;
	int			level;
	SkipNode  **waiting;		/* nodes not linked yet, in no order */
	int64		nwaiting;
	int64		maxwaiting;
	struct nodes_hash *nodes;
	RelFileNode node;			/* mailer.memory_state's storage the row addresses are in */
	FreedPages	freed;			/* its pages the last checkpoint left dead rows on */
	FreedPages	undo_freed;		/* mailer.memory_undo's pages the cleanups left dead rows on */
	int64		bytes;			/* keys and values, the map's and the held old ones */
	struct changed_hash *changed;
	Oid			ext_oid;		/* the installation the state was opened in */
	int64		cleaned_to;		/* undo at or before it is gone */
	int64		clean_epoch;	/* undo before it is gone: where a cleanup resumes */
	int64		undo_written;	/* undo rows the checkpoints wrote since a cleanup */
	int64		held;			/* bytes of the changed keys' old values */
	int64		carried_holds;	/* what the changed set held after the last fold (fold_due) */
	DirtyKey   *dirty;			/* the changed keys whose redo is due: a checkpoint */
	int64		ndirty;			/* writes these, not the whole changed set */
	int64		maxdirty;
	int			subtask;		/* of parallelism: where its folds fall (fold_due) */
	int			parallelism;
	bool		fold_next;		/* the next checkpoint folds: the first after the open */
	int64		last_fold;		/* the newest fold's epoch */
	int64	   *folds;			/* epochs this worker folded at, not yet past keep_from */
	int			nfolds;
	int			maxfolds;
	int64		redo_clean_to;	/* redo at or before it may go: before a fold at or before keep_from */
	int64		redo_cleaned_to;	/* redo at or before it is gone */
	int64		redo_clean_epoch;	/* redo before it is gone: where a cleanup resumes */
	int64		redo_written;	/* redo rows the checkpoints wrote since a cleanup */
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

static void mem_put(StateBackend *backend, const char *key, int klen, const char *val, int vlen);
static void mem_delete(StateBackend *backend, const char *key, int klen);

/* The node of the first key >= key; update[] gets its predecessors. */
static SkipNode *
seek(MemoryState *ms, const char *key, int klen, SkipNode **update)
{
	SkipNode   *x = ms->head;

	for (int i = ms->level - 1; i >= 0; i--)
	{
		while (x->next[i] && state_key_cmp(x->next[i]->key, x->next[i]->klen, key, klen) < 0)
			x = x->next[i];
		if (update)
			update[i] = x;
	}
	return x->next[0];
}

static Datum
int4_array(Datum *items, int n)
{
	return PointerGetDatum(construct_array(items, n, INT4OID, sizeof(int32), true, TYPALIGN_INT));
}

static int
random_level(void)
{
	int			level = 1;

	while (level < SKIP_MAX_LEVEL && (pg_prng_uint32(&pg_global_prng_state) & 3) == 0)
		level++;
	return level;
}

/*
 * A new node of the key (hash: its state_key_hash), in the nodes hash and
 * not linked; no value yet.
 */
static SkipNode *
new_node(MemoryState *ms, const char *key, int klen, uint32 hash)
{
	int			level = random_level();
	SkipNode   *x;
	StateKey	k;
	bool		found;

	x = MemoryContextAlloc(ms->ctx, offsetof(SkipNode, next) + sizeof(SkipNode *) * level);
	x->level = level;
	x->key = MemoryContextAlloc(ms->ctx, Max(klen, 1));
	memcpy(x->key, key, klen);
	x->klen = klen;
	x->waiting = -1;
	x->val = NULL;
	x->vlen = 0;
	ItemPointerSetInvalid(&x->tid);
	ms->bytes += klen;
	k.data = x->key;
	k.len = klen;
	nodes_insert_hash(ms->nodes, k, hash, &found)->node = x;
	Assert(!found);
	return x;
}

/*
 * Link x after update[0 .. x->level - 1], its predecessors, and make it
 * theirs: update[] is then right for a next key just after x.
 */
static void
link_after(MemoryState *ms, SkipNode **update, SkipNode *x)
{
	if (x->level > ms->level)
	{
		for (int i = ms->level; i < x->level; i++)
			update[i] = ms->head;
		ms->level = x->level;
	}
	for (int i = 0; i < x->level; i++)
	{
		x->next[i] = update[i]->next[i];
		update[i]->next[i] = x;
		update[i] = x;
	}
}

/* Room for one more waiting node: made before the node, which then cannot be left homeless. */
static void
reserve_waiting(MemoryState *ms)
{
	if (ms->nwaiting < ms->maxwaiting)
		return;
	/* a node's place is an int: the node keeps it in what was padding */
	if (ms->nwaiting >= INT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the memory state of job " INT64_FORMAT " has more than %d new keys since its last range scan",
						ms->base.job_id, INT_MAX),
				 errhint("Use the RocksDB state backend for state this large.")));
	ms->maxwaiting = Min(Max(ms->maxwaiting * 2, 1024), (int64) INT_MAX);
	ms->waiting = ms->waiting
		? repalloc_huge(ms->waiting, sizeof(SkipNode *) * ms->maxwaiting)
		: MemoryContextAllocHuge(ms->ctx, sizeof(SkipNode *) * ms->maxwaiting);
}

static void
add_waiting(MemoryState *ms, SkipNode *x)
{
	Assert(ms->nwaiting < ms->maxwaiting);
	x->waiting = (int) ms->nwaiting;
	ms->waiting[ms->nwaiting++] = x;
}

/*
 * Halve the array while a quarter of it or less is in use, down to
 * WAITING_KEPT slots: the windows of a backlog's burst fire and go, and
 * their slots with them.
 */
static void
shrink_waiting(MemoryState *ms)
{
	int64		size = ms->maxwaiting;

	while (size > WAITING_KEPT && ms->nwaiting <= size / 4)
		size /= 2;
	if (size < ms->maxwaiting)
	{
		ms->maxwaiting = size;
		ms->waiting = repalloc_huge(ms->waiting, sizeof(SkipNode *) * size);
	}
}

/* x leaves the waiting nodes: the last takes its place. */
static void
remove_waiting(MemoryState *ms, SkipNode *x)
{
	SkipNode   *last = ms->waiting[--ms->nwaiting];

	Assert(ms->waiting[x->waiting] == x);
	ms->waiting[x->waiting] = last;
	last->waiting = x->waiting;
	x->waiting = -1;
	if (ms->nwaiting <= ms->maxwaiting / 4)
		shrink_waiting(ms);
}

static inline int
node_cmp(const SkipNode *a, const SkipNode *b)
{
	return state_key_cmp(a->key, a->klen, b->key, b->klen);
}

/* the sort template's element type must be one word */
typedef SkipNode *SkipNodePtr;

#define ST_SORT sort_nodes
#define ST_ELEMENT_TYPE SkipNodePtr
#define ST_COMPARE(a, b) node_cmp(*(a), *(b))
#define ST_SCOPE static
#define ST_DECLARE
#define ST_DEFINE
#include "lib/sort_template.h"

/*
 * Link the waiting nodes, sorted, each from where the one before went:
 * update[i] is the last node of level i at or before the key before.  At
 * the levels whose next node is past the new key (the levels from the
 * lowest such one up), update[i] is its predecessor already; below, the
 * search goes on from update[i], or from where the level above got to
 * once that went past the key before.
 * A batch as dense as the list is a merge; a sparse one costs about the
 * log of the gap between its keys, not of the list.
 */
static void
link_waiting(MemoryState *ms)
{
	SkipNode   *update[SKIP_MAX_LEVEL];

	if (ms->nwaiting == 0)
		return;
	sort_nodes(ms->waiting, ms->nwaiting);
	for (int i = 0; i < SKIP_MAX_LEVEL; i++)
		update[i] = ms->head;
	for (int64 n = 0; n < ms->nwaiting; n++)
	{
		SkipNode   *c = ms->waiting[n];
		SkipNode   *x = NULL;
		bool		past = false;	/* x is past the key before */
		int			h = 0;

		while (h < ms->level && update[h]->next[h] && node_cmp(update[h]->next[h], c) < 0)
			h++;
		for (int i = h - 1; i >= 0; i--)
		{
			/* update[i] is at or behind x once x is past the key before */
			if (!past)
				x = update[i];
			while (x->next[i] && node_cmp(x->next[i], c) < 0)
			{
				x = x->next[i];
				past = true;
			}
			update[i] = x;
		}
		c->waiting = -1;
		link_after(ms, update, c);
	}
	ms->nwaiting = 0;
	shrink_waiting(ms);
}

static SkipNode *
find_node(MemoryState *ms, const char *key, int klen)
{
	StateKey	k = {key, klen};
	NodeEntry  *e = nodes_lookup(ms->nodes, k);

	return e ? e->node : NULL;
}

static void
set_value(MemoryState *ms, SkipNode *x, const char *val, int vlen)
{
	x->val = MemoryContextAlloc(ms->ctx, Max(vlen, 1));
	memcpy(x->val, val, vlen);
	x->vlen = vlen;
	ms->bytes += vlen;
}

/*
 * Insert or replace; x is the key's node, NULL when absent (hash: the
 * key's).  The old value goes to *old (the caller then owns it) when old
 * is not NULL, else is freed.  Returns the key's node.
 */
static SkipNode *
map_put(MemoryState *ms, SkipNode *x, const char *key, int klen, uint32 hash,
		const char *val, int vlen, char **old, int *oldlen)
{
	if (x)
	{
		if (old)
		{
			/* held as undo until the checkpoint: still counted */
			*old = x->val;
			*oldlen = x->vlen;
		}
		else
		{
			ms->bytes -= x->vlen;
			pfree(x->val);
		}
	}
	else
	{
		reserve_waiting(ms);
		x = new_node(ms, key, klen, hash);
		add_waiting(ms, x);
	}
	set_value(ms, x, val, vlen);
	return x;
}

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

/*
 * Delete the job's rows of a set of keys (a DELETE ... USING the keys).
 * memory_state has no index, so the one sane plan is a hash join of the
 * keys: a nested loop reads the table once per key, or the keys once per
 * row.  The planner takes one when the table's statistics say it is all
 * but empty, as a vacuum leaves them after the rows went (a restore_job,
 * a rewind) and before new ones came: a rewind of 300k keys over 5k rows
 * then ran for minutes, where the hash join takes a second.  So nested
 * loops are off for the statement (the keys' own unnest of the undo
 * arrays, a lateral one, stays one: it has no other plan).  A disabled
 * plan's cost would pass every JIT threshold: JIT is off too.
 */
static void
delete_keys(const char *sql, int nargs, Oid *types, Datum *values)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("enable_nestloop", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	catalog_exec(sql, nargs, types, values, NULL, false);
	AtEOXact_GUC(true, level);
}

/*
 * Rewind this subtask's rows to the epoch: each key a fold after it wrote
 * gets the undo value of the oldest such fold (its row's value after the
 * folds up to the epoch, where replay_redo starts), and those undo rows
 * go, as does the redo after the epoch.  Each such key's row
 * goes first, in a statement of its own (a unique index a DBA added on the
 * key would refuse an insert beside the row the same statement deletes),
 * then a row is inserted for each key that had a value.  The keys are
 * joined (the table has no index: by a hash join), not gathered into one
 * array: a rewind over many epochs of a windowed job has millions, past an
 * array's 1 GB.  Epoch 0 (no checkpoint counts) is empty state: the
 * subtask's rows go.
 */
static void
rewind_rows(MemoryState *ms, int64 epoch)
{
	Oid			types[4] = {INT8OID, INT8OID, INT4OID, INT4OID};
	Datum		values[4];

	values[0] = Int64GetDatum(ms->base.job_id);
	values[1] = Int64GetDatum(epoch);
	values[2] = Int32GetDatum(ms->kg_lo);
	values[3] = Int32GetDatum(ms->kg_hi);
	if (epoch == 0)
	{
		catalog_exec("DELETE FROM mailer.memory_state WHERE job_id OPERATOR(pg_catalog.=) $1 "
					 "AND key_group OPERATOR(pg_catalog.>=) $3 AND key_group OPERATOR(pg_catalog.<) $4",
					 4, types, values, NULL, false);
		catalog_exec("DELETE FROM mailer.memory_undo WHERE job_id OPERATOR(pg_catalog.=) $1 "
					 "AND key_group OPERATOR(pg_catalog.>=) $3 AND key_group OPERATOR(pg_catalog.<) $4",
					 4, types, values, NULL, false);
		catalog_exec("DELETE FROM mailer.memory_redo WHERE job_id OPERATOR(pg_catalog.=) $1 "
					 "AND key_group OPERATOR(pg_catalog.>=) $3 AND key_group OPERATOR(pg_catalog.<) $4",
					 4, types, values, NULL, false);
		return;
	}
	/* The epochs after this one are undone: their redo goes, as their undo does below. */
	catalog_exec("DELETE FROM mailer.memory_redo WHERE job_id OPERATOR(pg_catalog.=) $1 "
				 "AND epoch OPERATOR(pg_catalog.>) $2 "
				 "AND key_group OPERATOR(pg_catalog.>=) $3 AND key_group OPERATOR(pg_catalog.<) $4",
				 4, types, values, NULL, false);
	delete_keys("DELETE FROM mailer.memory_state m USING (SELECT DISTINCT e.key "
				"  FROM mailer.memory_undo c, LATERAL pg_catalog.unnest(c.keys) AS e(key) "
				"  WHERE c.job_id OPERATOR(pg_catalog.=) $1 AND c.epoch OPERATOR(pg_catalog.>) $2 "
				"  AND c.key_group OPERATOR(pg_catalog.>=) $3 AND c.key_group OPERATOR(pg_catalog.<) $4) u "
				"WHERE m.job_id OPERATOR(pg_catalog.=) $1 "
				"AND m.key_group OPERATOR(pg_catalog.>=) $3 AND m.key_group OPERATOR(pg_catalog.<) $4 "
				"AND m.key OPERATOR(pg_catalog.=) u.key",
				4, types, values);
	catalog_exec("WITH u AS (SELECT DISTINCT ON (e.key) e.key, c.key_group, e.value "
				 "  FROM mailer.memory_undo c, "
				 "  LATERAL ROWS FROM (pg_catalog.unnest(c.keys), pg_catalog.unnest(c.old_values)) AS e(key, value) "
				 "  WHERE c.job_id OPERATOR(pg_catalog.=) $1 AND c.epoch OPERATOR(pg_catalog.>) $2 "
				 "  AND c.key_group OPERATOR(pg_catalog.>=) $3 AND c.key_group OPERATOR(pg_catalog.<) $4 "
				 "  ORDER BY e.key, c.epoch), "
				 "i AS (INSERT INTO mailer.memory_state (job_id, key, key_group, value) "
				 "  SELECT $1, key, key_group, value FROM u WHERE value IS NOT NULL) "
				 "DELETE FROM mailer.memory_undo WHERE job_id OPERATOR(pg_catalog.=) $1 "
				 "AND epoch OPERATOR(pg_catalog.>) $2 "
				 "AND key_group OPERATOR(pg_catalog.>=) $3 AND key_group OPERATOR(pg_catalog.<) $4",
				 4, types, values, NULL, false);
	/* a stop here rolls the rewind back: the next open does it again */
	TEST_POINT("memory_state_rewound");
}

/*
 * The key group of a key read back from the tables (a row, a redo entry):
 * the key_group column routed it to this subtask, and the key must agree.
 */
static int
stored_key_group(MemoryState *ms, const char *key, int klen)
{
	int			g = key_group(ms, key, klen);

	if (g < ms->kg_lo || g >= ms->kg_hi)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the memory state of job " INT64_FORMAT " holds a key of key group %d in the rows of key groups %d to %d",
						ms->base.job_id, g, ms->kg_lo, ms->kg_hi - 1),
				 errhint("Restore the job to an epoch before the damage, or drop it.")));
	return g;
}

/* The columns of load_rows' statement. */
#define Anum_load_key		1
#define Anum_load_value		2
#define Anum_load_ctid		3

/*
 * Read the subtask's rows into the map.  They come in no order (the table
 * has no index): each node waits, unlinked, as a new key's does, and then
 * all are linked, sorted, in one pass.  Not left waiting for a range scan:
 * a job that never scans (running totals) would keep them in the array.
 */
static void
load_rows(MemoryState *ms)
{
	Oid			types[3] = {INT8OID, INT4OID, INT4OID};
	Datum		values[3];
	CatalogAccess access;
	Portal		portal;
	MemoryContext fetch_ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer memory state load",
													 ALLOCSET_DEFAULT_SIZES);
	MemoryContext old_ctx;

	values[0] = Int64GetDatum(ms->base.job_id);
	values[1] = Int32GetDatum(ms->kg_lo);
	values[2] = Int32GetDatum(ms->kg_hi);
	catalog_enter(&access);

	/*
	 * Not read-only: a read-only cursor would read with the snapshot taken
	 * before the rewind, which then looks undone.
	 */
	portal = SPI_cursor_open_with_args(NULL,
									   "SELECT key, value, ctid FROM mailer.memory_state "
									   "WHERE job_id OPERATOR(pg_catalog.=) $1 "
									   "AND key_group OPERATOR(pg_catalog.>=) $2 AND key_group OPERATOR(pg_catalog.<) $3",
									   3, types, values, NULL, false, 0);
	for (;;)
	{
		SPI_cursor_fetch(portal, true, LOAD_CHUNK);
		if (SPI_processed == 0)
			break;
		/* a detoasted key or value lives until the next fetch */
		old_ctx = MemoryContextSwitchTo(fetch_ctx);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bytea	   *k = DatumGetByteaPP(catalog_value(r, Anum_load_key, NULL));
			bytea	   *v = DatumGetByteaPP(catalog_value(r, Anum_load_value, NULL));
			const char *key = VARDATA_ANY(k);
			int			klen = VARSIZE_ANY_EXHDR(k);
			StateKey	probe = {key, klen};
			uint32		hash = state_key_hash(probe);
			NodeEntry  *e;
			SkipNode   *x;

			(void) stored_key_group(ms, key, klen);
			/* no index keeps a key to one row: the checkpoints do, and this checks them */
			if ((e = nodes_lookup_hash(ms->nodes, probe, hash)) != NULL)
			{
				ItemPointer tid = (ItemPointer) DatumGetPointer(catalog_value(r, Anum_load_ctid, NULL));

				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("the memory state of job " INT64_FORMAT " holds two rows of one key",
								ms->base.job_id),
						 errdetail("The rows at ctid (%u,%u) and (%u,%u) of mailer.memory_state both hold key %s.",
								   ItemPointerGetBlockNumber(&e->node->tid), ItemPointerGetOffsetNumber(&e->node->tid),
								   ItemPointerGetBlockNumber(tid), ItemPointerGetOffsetNumber(tid),
								   DatumGetCString(DirectFunctionCall1(byteaout, PointerGetDatum(k)))),
						 errhint("Delete one of the two rows (one inserted by hand, or the one whose value is wrong) and start the job again, or drop the job.")));
			}
			reserve_waiting(ms);
			x = new_node(ms, key, klen, hash);
			add_waiting(ms, x);
			set_value(ms, x, VARDATA_ANY(v), VARSIZE_ANY_EXHDR(v));
			x->tid = *(ItemPointer) DatumGetPointer(catalog_value(r, Anum_load_ctid, NULL));
		}
		SPI_freetuptable(SPI_tuptable);
		MemoryContextSwitchTo(old_ctx);
		MemoryContextReset(fetch_ctx);
	}
	SPI_cursor_close(portal);
	link_waiting(ms);
	/* the addresses are in this storage, which the cursor's lock keeps */
	ms->node = memory_rows_node(ms->ext_oid);
	catalog_leave(&access);
	MemoryContextDelete(fetch_ctx);
}

/*
 * The checkpoint's reference: the epoch of the fold its rows are at, which
 * an open at the checkpoint replays the redo from (replay_redo).  Every
 * worker folds at its first checkpoint, so it is always known.  "carried":
 * the fold's own redo holds keys (carries), which a build from before
 * them would not replay, nor keep from its cleanup: it refuses this
 * reference instead of losing them.
 */
static char *
state_ref(MemoryState *ms)
{
	Assert(ms->last_fold > 0);
	return psprintf("memory_state carried fold " INT64_FORMAT, ms->last_fold);
}

/*
 * The fold epoch a checkpoint's reference names; the epoch itself for
 * "memory_state", which every release before the redo wrote (every epoch
 * was a fold).  A "memory_state fold" of a build from before the carried
 * keys reads the same: its folds wrote no redo at their own epochs.
 */
static int64
ref_fold(const char *ref, int64 epoch)
{
	static const char *const prefixes[] = {"memory_state carried fold ", "memory_state fold "};
	int64		fold = -1;
	char	   *end = NULL;

	if (ref != NULL && strcmp(ref, "memory_state") == 0)
		return epoch;
	for (int i = 0; ref != NULL && fold < 0 && i < lengthof(prefixes); i++)
	{
		size_t		len = strlen(prefixes[i]);

		if (strncmp(ref, prefixes[i], len) != 0 || !isdigit((unsigned char) ref[len]))
			continue;
		errno = 0;
		fold = strtoi64(ref + len, &end, 10);
		if (errno != 0 || *end != '\0')
			fold = -1;
	}
	if (fold < 0 || fold > epoch)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the checkpoint at epoch " INT64_FORMAT " has memory state reference \"%s\"", epoch,
						ref ? ref : "(null)"),
				 errhint("A memory-backend checkpoint's state_ref is \"memory_state carried fold\" and an epoch not after its own; restore the job to another checkpoint, or drop it.")));
	return fold;
}

/*
 * Each of the subtask's key groups' rows are at the fold the checkpoint at
 * epoch of the key group's owner then names (ref_fold): the epoch from
 * which its redo is replayed, per key group from kg_lo on.  It must be that
 * fold exactly: its own redo holds only the keys it carried (which have no
 * row), so replaying from an earlier one would set a key the fold wrote
 * to an older value, and from a later one would lose the carried keys.
 */
static Datum
replay_from(MemoryState *ms, const StateOpenArgs *args)
{
	int			n = ms->kg_hi - ms->kg_lo;
	Datum	   *from = palloc0(sizeof(Datum) * Max(n, 1));
	bool	   *covered = palloc0(sizeof(bool) * Max(n, 1));

	if (args->old_refs == NULL)
		elog(ERROR, "mailer memory state of job " INT64_FORMAT " opened at epoch " INT64_FORMAT " without its checkpoint's references",
			 ms->base.job_id, args->epoch);
	for (int j = 0; j < args->old_parallelism; j++)
	{
		int			lo;
		int			hi;
		int64		fold = ref_fold(args->old_refs[j], args->epoch);

		key_group_range(j, args->old_parallelism, ms->key_groups, &lo, &hi);
		for (int g = Max(lo, ms->kg_lo); g < Min(hi, ms->kg_hi); g++)
		{
			from[g - ms->kg_lo] = Int64GetDatum(fold);
			covered[g - ms->kg_lo] = true;
		}
	}
	for (int i = 0; i < n; i++)
		if (!covered[i])
			elog(ERROR, "mailer memory state of job " INT64_FORMAT ": no subtask of epoch " INT64_FORMAT " owned key group %d",
				 ms->base.job_id, args->epoch, ms->kg_lo + i);
	return PointerGetDatum(construct_array(from, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * Bring the map from the rows, each key group's state as of its fold
 * (replay_from), to the state at epoch: the redo from that fold (the keys
 * it carried) up to epoch, in epoch order, put or deleted as a record's change would be, so
 * that the keys enter the changed set with their rows' values as undo and
 * the next fold writes them (docs/ARCHITECTURE.md, "The memory backend's
 * tables").  Their redo is written already: the keys are not dirty, and
 * logged (a delete of one must reach the redo).
 */
static void
replay_redo(MemoryState *ms, const StateOpenArgs *args)
{
	Oid			types[5] = {INT8OID, INT8OID, INT4OID, INT4OID, INT8ARRAYOID};
	Datum		values[5];
	CatalogAccess access;
	Portal		portal;
	MemoryContext fetch_ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer memory redo replay",
													 ALLOCSET_DEFAULT_SIZES);

	values[0] = Int64GetDatum(ms->base.job_id);
	values[1] = Int64GetDatum(args->epoch);
	values[2] = Int32GetDatum(ms->kg_lo);
	values[3] = Int32GetDatum(ms->kg_hi);
	values[4] = replay_from(ms, args);
	catalog_enter(&access);
	portal = SPI_cursor_open_with_args(NULL,
									   "SELECT keys, new_values FROM mailer.memory_redo "
									   "WHERE job_id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.<=) $2 "
									   "AND key_group OPERATOR(pg_catalog.>=) $3 AND key_group OPERATOR(pg_catalog.<) $4 "
									   "AND epoch OPERATOR(pg_catalog.>=) $5[key_group OPERATOR(pg_catalog.-) $3 OPERATOR(pg_catalog.+) 1] "
									   "ORDER BY epoch",
									   5, types, values, NULL, false, 0);
	for (;;)
	{
		MemoryContext old_ctx;

		/* rows of up to a page each */
		SPI_cursor_fetch(portal, true, REPLAY_CHUNK);
		if (SPI_processed == 0)
			break;
		old_ctx = MemoryContextSwitchTo(fetch_ctx);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			Datum	   *keys;
			Datum	   *vals;
			bool	   *knulls;
			bool	   *absent;
			int			nk;
			int			nv;

			deconstruct_array(DatumGetArrayTypeP(catalog_value(r, 1, NULL)), BYTEAOID, -1, false,
							  TYPALIGN_INT, &keys, &knulls, &nk);
			deconstruct_array(DatumGetArrayTypeP(catalog_value(r, 2, NULL)), BYTEAOID, -1, false,
							  TYPALIGN_INT, &vals, &absent, &nv);
			if (nk != nv)
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("a redo row of job " INT64_FORMAT " has %d keys and %d values",
								ms->base.job_id, nk, nv),
						 errhint("Restore the job to an epoch before the damage, or drop it.")));
			for (int i = 0; i < nk; i++)
			{
				bytea	   *k;

				if (knulls[i])
					ereport(ERROR,
							(errcode(ERRCODE_DATA_CORRUPTED),
							 errmsg("a redo row of job " INT64_FORMAT " has a NULL key", ms->base.job_id),
							 errhint("Restore the job to an epoch before the damage, or drop it.")));
				k = DatumGetByteaPP(keys[i]);
				(void) stored_key_group(ms, VARDATA_ANY(k), VARSIZE_ANY_EXHDR(k));
				if (absent[i])
					mem_delete(&ms->base, VARDATA_ANY(k), VARSIZE_ANY_EXHDR(k));
				else
				{
					bytea	   *v = DatumGetByteaPP(vals[i]);

					mem_put(&ms->base, VARDATA_ANY(k), VARSIZE_ANY_EXHDR(k), VARDATA_ANY(v),
							VARSIZE_ANY_EXHDR(v));
				}
			}
			CHECK_FOR_INTERRUPTS();
		}
		SPI_freetuptable(SPI_tuptable);
		MemoryContextSwitchTo(old_ctx);
		MemoryContextReset(fetch_ctx);
	}
	SPI_cursor_close(portal);
	catalog_leave(&access);
	MemoryContextDelete(fetch_ctx);
	for (int64 i = 0; i < ms->ndirty; i++)
	{
		ChangedKey *ck = changed_lookup_hash(ms->changed, ms->dirty[i].key, ms->dirty[i].hash);

		ck->dirty = false;
		ck->logged = true;
	}
	ms->ndirty = 0;
}

/*
 * The subtask's key groups are all it rewinds and loads, whatever the
 * parallelism the epoch was taken at: the tables hold every subtask's
 * rows, so a rescale needs nothing more.
 */
StateBackend *
state_memory_open(const StateOpenArgs *args)
{
	MemoryState *ms = palloc0(sizeof(MemoryState));

	Assert(args->kg_lo >= 0 && args->kg_lo <= args->kg_hi && args->kg_hi <= args->key_groups);
	Assert(args->key_group_of != NULL);
	ms->base.ops = &memory_ops;
	ms->base.job_id = args->job_id;
	ms->key_groups = args->key_groups;
	ms->kg_lo = args->kg_lo;
	ms->kg_hi = args->kg_hi;
	ms->subtask = args->subtask;
	ms->parallelism = Max(args->parallelism, 1);
	ms->key_group_of = args->key_group_of;
	ms->ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer memory state", ALLOCSET_DEFAULT_SIZES);
	ms->changed_ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer changed keys", ALLOCSET_DEFAULT_SIZES);
	ms->changed = changed_create(CurrentMemoryContext, 1024, NULL);
	ms->nodes = nodes_create(CurrentMemoryContext, 1024, NULL);
	ms->head = MemoryContextAllocZero(ms->ctx, offsetof(SkipNode, next) + sizeof(SkipNode *) * SKIP_MAX_LEVEL);
	ms->head->level = SKIP_MAX_LEVEL;
	ms->level = 1;
	freed_pages_init(&ms->freed);
	freed_pages_init(&ms->undo_freed);

	/* The caller is in a transaction */
	ms->ext_oid = get_extension_oid(MAILER_EXTENSION, false);
	SPI_connect();
	rewind_rows(ms, args->epoch);
	load_rows(ms);
	if (args->epoch > 0)
		replay_redo(ms, args);
	/* so that every checkpoint's reference names a fold of this worker's (state_ref) */
	ms->fold_next = true;
	SPI_finish();
	return &ms->base;
}

static bool
mem_get(StateBackend *backend, const char *key, int klen, StringInfo val)
{
	MemoryState *ms = (MemoryState *) backend;
	SkipNode   *x = find_node(ms, key, klen);

	if (x == NULL)
		return false;
	resetStringInfo(val);
	appendBinaryStringInfo(val, x->val, x->vlen);
	return true;
}

/*
 * A key's new entry in the changed set: its own copy of the key, in
 * changed_ctx; no row, no undo, no redo yet.
 */
static ChangedKey *
new_changed_key(MemoryState *ms, StateKey k, uint32 hash, bool *found)
{
	ChangedKey *ck = changed_insert_hash(ms->changed, k, hash, found);
	char	   *copy;

	if (*found)
		return ck;
	copy = MemoryContextAlloc(ms->changed_ctx, Max(k.len, 1));
	memcpy(copy, k.data, k.len);
	ck->key.data = copy;
	ck->existed = false;
	ck->old = NULL;
	ck->oldlen = 0;
	ck->dirty = false;
	ck->logged = false;
	ck->carried = 0;
	ItemPointerSetInvalid(&ck->tid);
	return ck;
}

/*
 * The key's entry in the changed set, and whether it was new there: the
 * caller then fills in what the key was at the last checkpoint, and
 * keeps node right (x, the key's node before the change).
 */
static ChangedKey *
note_changed(MemoryState *ms, StateKey k, uint32 hash, SkipNode *x, bool *first)
{
	bool		found;
	ChangedKey *ck = new_changed_key(ms, k, hash, &found);

	ck->node = x;
	if (!found || !ck->dirty)
	{
		if (ms->ndirty == ms->maxdirty)
		{
			ms->maxdirty = Max(1024, ms->maxdirty * 2);
			ms->dirty = ms->dirty ? repalloc_huge(ms->dirty, sizeof(DirtyKey) * ms->maxdirty)
				: MemoryContextAllocHuge(ms->ctx, sizeof(DirtyKey) * ms->maxdirty);
		}
		ms->dirty[ms->ndirty].key = ck->key;
		ms->dirty[ms->ndirty].hash = hash;
		ms->ndirty++;
	}
	ck->dirty = true;
	*first = !found;
	return ck;
}

static void
mem_put(StateBackend *backend, const char *key, int klen, const char *val, int vlen)
{
	MemoryState *ms = (MemoryState *) backend;
	StateKey	k = {key, klen};
	uint32		hash = state_key_hash(k);
	NodeEntry  *e = nodes_lookup_hash(ms->nodes, k, hash);
	SkipNode   *x = e ? e->node : NULL;
	bool		first;
	ChangedKey *ck = note_changed(ms, k, hash, x, &first);

	if (first)
	{
		ck->existed = x != NULL;
		if (x)
			ck->tid = x->tid;
		ck->node = map_put(ms, x, key, klen, hash, val, vlen, &ck->old, &ck->oldlen);
		if (ck->old)
			ms->held += ck->oldlen;
	}
	else
		ck->node = map_put(ms, x, key, klen, hash, val, vlen, NULL, NULL);
}

static void
mem_delete(StateBackend *backend, const char *key, int klen)
{
	MemoryState *ms = (MemoryState *) backend;
	SkipNode   *update[SKIP_MAX_LEVEL];
	StateKey	k = {key, klen};
	uint32		hash = state_key_hash(k);
	NodeEntry  *e = nodes_lookup_hash(ms->nodes, k, hash);
	SkipNode   *x;
	ChangedKey *ck;
	bool		first;

	if (e == NULL)
		return;
	x = e->node;
	nodes_delete_item(ms->nodes, e);
	if (x->waiting >= 0)
		remove_waiting(ms, x);
	else
	{
		(void) seek(ms, key, klen, update);
		for (int i = 0; i < x->level; i++)
			if (update[i]->next[i] == x)
				update[i]->next[i] = x->next[i];
	}
	ms->bytes -= x->klen;
	ck = note_changed(ms, k, hash, NULL, &first);
	if (first)
	{
		/* held as undo until the checkpoint: still counted */
		ck->existed = true;
		ck->old = x->val;
		ck->oldlen = x->vlen;
		ck->tid = x->tid;
		ms->held += x->vlen;
	}
	else
	{
		ms->bytes -= x->vlen;
		pfree(x->val);
	}
	pfree(x->key);
	pfree(x);
}

static StateIterator *
mem_iterate(StateBackend *backend, const char *from, int flen, const char *to, int tlen)
{
	MemoryState *ms = (MemoryState *) backend;
	MemoryIterator *mi = palloc0(sizeof(MemoryIterator));

	link_waiting(ms);
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

	if (x == NULL || (mi->to && state_key_cmp(x->key, x->klen, mi->to, mi->tlen) >= 0))
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

/* One checkpoint's rows to write, a chunk at a time. */
typedef struct WriteChunk
{
	MemoryContext ctx;			/* the byteas and arrays; reset after each flush */
	Size		bytes;			/* of the keys and values in it */
	int			nput;
	Datum		put_keys[WRITE_CHUNK];
	Datum		put_groups[WRITE_CHUNK];
	Datum		put_vals[WRITE_CHUNK];
	int			ndel;
	Datum		del_keys[WRITE_CHUNK];
} WriteChunk;

/*
 * Two statements, each of a whole chunk: the rows of all its keys go, then
 * the keys that are there now get a new one.  The SQL writes what the
 * heap-level writes could not (memory_rows.h), or all of it when the
 * tables are not plain heap tables; the insert gives back the rows'
 * addresses for the next checkpoint's updates.  With no index on the
 * table, the delete reads all of it (joined with the chunk's keys):
 * writing by SQL is for tables someone changed (docs/ARCHITECTURE.md).
 */
static void
flush_chunk(MemoryState *ms, WriteChunk *w)
{
	Datum		values[4];
	MemoryContext old_ctx;

	/*
	 * The arrays are copies of the chunk's byteas: built in its context,
	 * they go with them, not at the end of the whole checkpoint.
	 */
	old_ctx = MemoryContextSwitchTo(w->ctx);

	values[0] = Int64GetDatum(ms->base.job_id);
	if (w->nput + w->ndel > 0)
	{
		Oid			types[2] = {INT8OID, BYTEAARRAYOID};
		Datum	   *keys = palloc(sizeof(Datum) * (w->nput + w->ndel));

		memcpy(keys, w->put_keys, sizeof(Datum) * w->nput);
		memcpy(keys + w->nput, w->del_keys, sizeof(Datum) * w->ndel);
		values[1] = mailer_bytea_array(keys, NULL, w->nput + w->ndel);
		delete_keys("DELETE FROM mailer.memory_state m USING pg_catalog.unnest($2) AS u(k) "
					"WHERE m.job_id OPERATOR(pg_catalog.=) $1 AND m.key OPERATOR(pg_catalog.=) u.k",
					2, types, values);
	}
	if (w->nput > 0)
	{
		Oid			types[4] = {INT8OID, BYTEAARRAYOID, INT4ARRAYOID, BYTEAARRAYOID};

		values[1] = mailer_bytea_array(w->put_keys, NULL, w->nput);
		values[2] = int4_array(w->put_groups, w->nput);
		values[3] = mailer_bytea_array(w->put_vals, NULL, w->nput);
		catalog_exec("INSERT INTO mailer.memory_state AS m (job_id, key, key_group, value) "
					 "SELECT $1, k, g, v FROM unnest($2, $3, $4) AS u(k, g, v) "
					 "RETURNING m.key, m.ctid",
					 4, types, values, NULL, false);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bytea	   *k = DatumGetByteaPP(catalog_value(r, 1, NULL));
			SkipNode   *x = find_node(ms, VARDATA_ANY(k), VARSIZE_ANY_EXHDR(k));

			if (x)
				x->tid = *(ItemPointer) DatumGetPointer(catalog_value(r, 2, NULL));
		}
		SPI_freetuptable(SPI_tuptable);
	}
	MemoryContextSwitchTo(old_ctx);
	w->nput = w->ndel = 0;
	w->bytes = 0;
	MemoryContextReset(w->ctx);
}

/* A changed key's row now into the chunk (x, the key's node; NULL: deleted). */
static void
chunk_add(MemoryState *ms, WriteChunk *w, ChangedKey *ck, SkipNode *x, int group)
{
	/*
	 * Cut by bytes too: 20000 large values (session windows, numeric
	 * extremes) would make an array past the 1 GB a datum may have.
	 */
	Size		add = (Size) ck->key.len + (x ? x->vlen : 0);
	MemoryContext old_ctx;
	Datum		key;

	if (w->nput + w->ndel > 0 && w->bytes + add > WRITE_CHUNK_BYTES)
		flush_chunk(ms, w);
	old_ctx = MemoryContextSwitchTo(w->ctx);
	key = PointerGetDatum(mailer_bytea(ck->key.data, ck->key.len));
	if (x)
	{
		w->put_keys[w->nput] = key;
		w->put_groups[w->nput] = Int32GetDatum(group);
		w->put_vals[w->nput] = PointerGetDatum(mailer_bytea(x->val, x->vlen));
		w->nput++;
	}
	else
		w->del_keys[w->ndel++] = key;
	MemoryContextSwitchTo(old_ctx);
	w->bytes += add;
	if (w->nput == WRITE_CHUNK || w->ndel == WRITE_CHUNK)
		flush_chunk(ms, w);
}

/* Where a checkpoint's undo or redo rows go: memory_rows, or SQL when it is NULL. */
typedef struct PackedTarget
{
	MemoryState *ms;
	MemoryRows *mr;
	int64		epoch;
	bool		redo;
} PackedTarget;

static void
write_packed_row(void *arg, int group, Datum keys, Datum vals)
{
	PackedTarget *t = arg;
	Oid			types[5] = {INT8OID, INT8OID, INT4OID, BYTEAARRAYOID, BYTEAARRAYOID};
	Datum		values[5];

	if (t->mr)
	{
		memory_rows_packed(t->mr, t->redo, t->epoch, group, keys, vals);
		return;
	}
	values[0] = Int64GetDatum(t->ms->base.job_id);
	values[1] = Int64GetDatum(t->epoch);
	values[2] = Int32GetDatum(group);
	values[3] = keys;
	values[4] = vals;
	catalog_exec(t->redo
				 ? "INSERT INTO mailer.memory_redo (job_id, epoch, key_group, keys, new_values) "
				 "VALUES ($1, $2, $3, $4, $5)"
				 : "INSERT INTO mailer.memory_undo (job_id, epoch, key_group, keys, old_values) "
				 "VALUES ($1, $2, $3, $4, $5)",
				 5, types, values, NULL, false);
}

/*
 * The state table was rewritten (VACUUM FULL, CLUSTER, TRUNCATE) since the
 * addresses were taken: take them again, a chunk of rows at a time.  A key
 * with no row now gets none, and its next write is SQL's.
 */
static void
find_rows(MemoryState *ms)
{
	Oid			types[3] = {INT8OID, INT4OID, INT4OID};
	Datum		values[3];
	changed_iterator iter;
	ChangedKey *ck;
	CatalogAccess access;
	Portal		portal;

	for (SkipNode *x = ms->head->next[0]; x; x = x->next[0])
		ItemPointerSetInvalid(&x->tid);
	for (int64 i = 0; i < ms->nwaiting; i++)
		ItemPointerSetInvalid(&ms->waiting[i]->tid);
	changed_start_iterate(ms->changed, &iter);
	while ((ck = changed_iterate(ms->changed, &iter)) != NULL)
		ItemPointerSetInvalid(&ck->tid);
	values[0] = Int64GetDatum(ms->base.job_id);
	values[1] = Int32GetDatum(ms->kg_lo);
	values[2] = Int32GetDatum(ms->kg_hi);
	catalog_enter(&access);
	portal = SPI_cursor_open_with_args(NULL,
									   "SELECT key, ctid FROM mailer.memory_state "
									   "WHERE job_id OPERATOR(pg_catalog.=) $1 "
									   "AND key_group OPERATOR(pg_catalog.>=) $2 AND key_group OPERATOR(pg_catalog.<) $3",
									   3, types, values, NULL, false, 0);
	for (;;)
	{
		SPI_cursor_fetch(portal, true, LOAD_CHUNK);
		if (SPI_processed == 0)
			break;
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bytea	   *k = DatumGetByteaPP(catalog_value(r, 1, NULL));
			ItemPointer tid = (ItemPointer) DatumGetPointer(catalog_value(r, 2, NULL));
			StateKey	probe = {VARDATA_ANY(k), VARSIZE_ANY_EXHDR(k)};
			SkipNode   *x;

			/* a key changed since the last checkpoint has its row's address in the changed set */
			if ((ck = changed_lookup(ms->changed, probe)) != NULL)
				ck->tid = *tid;
			else if ((x = find_node(ms, probe.data, probe.len)) != NULL)
				x->tid = *tid;
		}
		SPI_freetuptable(SPI_tuptable);
	}
	SPI_cursor_close(portal);
	catalog_leave(&access);
}

/* A changed key the checkpoint writes. */
typedef struct RowWrite
{
	ChangedKey *ck;				/* ck->tid: the row's address, when it existed */
	SkipNode   *x;				/* the key's node; NULL: delete the row */
	uint64		order;			/* row_order's: the row's address, or NEW_ROW */
	int			group;
	bool		carry;			/* a fold writes it to its redo, not to a row (carries) */
} RowWrite;

/* A new key's row_order: after every address, even an invalid one's */
#define NEW_ROW		PG_UINT64_MAX

/* A row's address as one number, in ItemPointerCompare's order. */
static inline uint64
address_order(ItemPointer tid)
{
	return ((uint64) ItemPointerGetBlockNumberNoCheck(tid) << 16) |
		ItemPointerGetOffsetNumberNoCheck(tid);
}

/*
 * The undo in key group order: it is packed a key group at a time
 * (memory_undo.h), and with the epoch before it, each row's index entry is
 * then past the one before, on the same leaf page.
 */
static inline int
undo_cmp(const RowWrite *a, const RowWrite *b)
{
	return (a->group > b->group) - (a->group < b->group);
}

/*
 * The rows that existed in address order, so that each page is read and
 * pruned once; then the new ones, in no order (the table has no index).
 */
static inline int
row_cmp(const RowWrite *a, const RowWrite *b)
{
	return (a->order > b->order) - (a->order < b->order);
}

/*
 * Both sorts inlined: through qsort's comparator calls (and ItemPointer
 * Compare's) they were 4.4% of a tumbling job's worker on this backend.
 */
#define ST_SORT sort_undo_order
#define ST_ELEMENT_TYPE RowWrite
#define ST_COMPARE(a, b) undo_cmp(a, b)
#define ST_SCOPE static
#define ST_DECLARE
#define ST_DEFINE
#include "lib/sort_template.h"

#define ST_SORT sort_row_order
#define ST_ELEMENT_TYPE RowWrite
#define ST_COMPARE(a, b) row_cmp(a, b)
#define ST_SCOPE static
#define ST_DECLARE
#define ST_DEFINE
#include "lib/sort_template.h"

static void
free_old(MemoryState *ms, ChangedKey *ck)
{
	if (ck->old)
	{
		ms->bytes -= ck->oldlen;
		ms->held -= ck->oldlen;
		pfree(ck->old);
		ck->old = NULL;
	}
}

/* The key's key group, which must be one of this subtask's. */
static int
owned_key_group(MemoryState *ms, ChangedKey *ck)
{
	int			group = key_group(ms, ck->key.data, ck->key.len);

	/* a row of another subtask's key group would be lost at its open */
	if (group < ms->kg_lo || group >= ms->kg_hi)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("a key of key group %d was changed in the memory state of key groups %d to %d of job " INT64_FORMAT,
						group, ms->kg_lo, ms->kg_hi - 1, ms->base.job_id)));
	return group;
}

/* What the changed set holds: the keys' old values, its entries and their key copies. */
static int64
changed_holds(MemoryState *ms)
{
	return ms->held + (int64) MemoryContextMemAllocated(ms->changed_ctx, true) +
		(int64) ms->changed->members * (int64) sizeof(ChangedKey);
}

/*
 * Whether the checkpoint at epoch folds: the first after the open, and one
 * in mailer.memory_fold_checkpoints, the subtasks of a parallel job each
 * at another epoch of the N (so that their folds' longer checkpoints do
 * not fall together); or sooner, when what the changed set gained since
 * the last fold (the keys' old values, and its entries: a key put and
 * deleted again between folds keeps one) passes half the state's size and
 * FOLD_HELD_MIN.  Gained: the keys the last fold carried stay in the set,
 * and a fold would not free them.
 */
static bool
fold_due(MemoryState *ms, int64 epoch)
{
	int			n = mailer_memory_fold_checkpoints;

	return ms->fold_next || (epoch + (int64) ms->subtask * n / ms->parallelism) % n == 0 ||
		changed_holds(ms) - ms->carried_holds > Max((int64) FOLD_HELD_MIN, (ms->bytes - ms->held) / 2);
}

/* Remember a fold of this worker's, for the redo's cleanup (mem_committed). */
static void
note_fold(MemoryState *ms, int64 epoch)
{
	if (ms->nfolds == ms->maxfolds)
	{
		ms->maxfolds = Max(16, ms->maxfolds * 2);
		ms->folds = ms->folds ? repalloc(ms->folds, sizeof(int64) * ms->maxfolds)
			: MemoryContextAlloc(ms->ctx, sizeof(int64) * ms->maxfolds);
	}
	ms->folds[ms->nfolds++] = epoch;
	ms->last_fold = epoch;
	ms->fold_next = false;
}

/*
 * The redo of epoch: each key changed since the last checkpoint with its
 * value now (absent: deleted), packed into rows of a key group each as
 * the undo is.  Returns the rows written.
 */
static int64
write_redo(MemoryState *ms, MemoryRows *mr, int64 epoch)
{
	RowWrite   *dirty;
	int64		n = ms->ndirty;
	int64		ndrop;
	PackedTarget target = {ms, mr, epoch, true};
	UndoPacker *packer;
	int64		rows;

	dirty = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(RowWrite) * Max(n, 1));
	for (int64 i = 0; i < n; i++)
	{
		ChangedKey *ck = changed_lookup_hash(ms->changed, ms->dirty[i].key, ms->dirty[i].hash);

		Assert(ck != NULL && ck->dirty);
		dirty[i].ck = ck;
		dirty[i].x = ck->node;
		dirty[i].group = owned_key_group(ms, ck);
		dirty[i].carry = false;
	}
	sort_undo_order(dirty, n);
	packer = undo_packer_create(write_packed_row, &target);
	for (int64 i = 0; i < n; i++)
	{
		SkipNode   *x = dirty[i].x;

		dirty[i].ck->dirty = false;
		/* put and deleted again since this checkpoint's last: nothing to replay */
		if (x == NULL && !dirty[i].ck->existed && !dirty[i].ck->logged)
			continue;
		undo_packer_add(packer, dirty[i].group, dirty[i].ck->key.data, dirty[i].ck->key.len,
						x ? x->val : NULL, x ? x->vlen : 0);
		dirty[i].ck->logged = true;
	}
	rows = undo_packer_finish(packer);

	/*
	 * A key that had no row and is gone again (a window put and purged since
	 * the last fold) is nothing to the fold: with its delete in the redo, it
	 * leaves the changed set, which then holds about the live keys, not
	 * every key of the folds' interval.  Last: a delete moves the set's
	 * entries.
	 */
	ndrop = 0;
	for (int64 i = 0; i < n; i++)
		if (dirty[i].x == NULL && !dirty[i].ck->existed)
			ms->dirty[ndrop++].key = dirty[i].ck->key;	/* its copy stays until the fold */
	for (int64 i = 0; i < ndrop; i++)
		changed_delete(ms->changed, ms->dirty[i].key);
	ms->ndirty = 0;
	pfree(dirty);
	return rows;
}

/*
 * Whether a fold writes the changed key to its redo instead of to a row:
 * a live key that has no row yet, at the first CARRY_FOLDS folds since it
 * entered the set, but never at the final fold (a stopped job's rows are
 * its state), nor at the first after an open (the replay put the carried
 * keys back with no count: this gives them their rows, so that no key is
 * carried on by restarts), nor when every checkpoint folds (the design
 * before the redo, which mailer.memory_fold_checkpoints = 1 keeps
 * exactly).  A
 * window's key lives for a few checkpoints: carried, it goes between
 * folds, as one put and purged between two folds does, with no row, no
 * undo and no delete of the row; a key that lives on gets its row at the
 * fold after.
 */
static inline bool
carries(MemoryState *ms, ChangedKey *ck, SkipNode *x, bool final)
{
	return !final && !ms->fold_next && mailer_memory_fold_checkpoints > 1 &&
		x != NULL && !ck->existed && ck->carried < CARRY_FOLDS;
}

/* A carried key, kept from one fold's changed set to the next. */
typedef struct CarriedKey
{
	StateKey	key;
	uint32		hash;
	uint8		carried;
	SkipNode   *node;
} CarriedKey;

/*
 * The end of a fold at epoch: the changed set keeps only the keys it
 * carried, which have no row and whose redo the fold wrote (logged).
 * Their key copies move to a new context, so that the old one goes whole.
 */
static void
end_fold(MemoryState *ms, int64 epoch, CarriedKey *carried, int64 n)
{
	MemoryContext old_keys = ms->changed_ctx;

	ms->changed_ctx = AllocSetContextCreate(MemoryContextGetParent(old_keys),
											"mailer changed keys", ALLOCSET_DEFAULT_SIZES);
	changed_reset(ms->changed);
	for (int64 i = 0; i < n; i++)
	{
		bool		found;
		ChangedKey *ck = new_changed_key(ms, carried[i].key, carried[i].hash, &found);

		Assert(!found);
		ck->node = carried[i].node;
		ck->carried = carried[i].carried;
		ck->logged = true;
	}
	MemoryContextDelete(old_keys);
	ms->carried_holds = changed_holds(ms);
	ms->ndirty = 0;
	note_fold(ms, epoch);
}

/*
 * Fold: write the keys changed since the last fold and their undo as
 * epoch's (inside its transaction), or, for the keys it carries (carries),
 * their values as epoch's redo.  A key put back to the value it had,
 * or added and deleted again, changed nothing and is not written.  The
 * undo values are freed as they are written: an error here ends the
 * worker, which reopens the state of the last committed epoch, so no
 * checkpoint is retried with this changed-key set.
 *
 * The undo and the redo go first, packed into rows of a key group each
 * (memory_undo.h).  A key that existed has its row updated (or deleted) at
 * its address, a new key's row is inserted, both at the heap level
 * (memory_rows.h), SQL writing what that could not.
 */
static void
fold(MemoryState *ms, MemoryRows *mr, int64 epoch, bool final, MemoryRowsCounts *counts)
{
	changed_iterator iter;
	ChangedKey *ck;
	WriteChunk *w = palloc(sizeof(WriteChunk));
	RowWrite   *writes;
	CarriedKey *carried;
	int64		nwrites = 0;
	int64		ncarried = 0;
	int64		by_sql = 0;
	PackedTarget undo = {ms, mr, epoch, false};
	PackedTarget redo = {ms, mr, epoch, true};
	UndoPacker *undo_packer;
	UndoPacker *redo_packer;

	w->ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer memory checkpoint", ALLOCSET_DEFAULT_SIZES);
	w->nput = w->ndel = 0;
	w->bytes = 0;
	/* 32 bytes a key: past 1 GB at about 33 million changed keys */
	writes = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(RowWrite) * Max(ms->changed->members, 1));
	changed_start_iterate(ms->changed, &iter);
	while ((ck = changed_iterate(ms->changed, &iter)) != NULL)
	{
		SkipNode   *x = ck->node;

		if (x ? (ck->existed && ck->oldlen == x->vlen && memcmp(ck->old, x->val, x->vlen) == 0)
			: !ck->existed)
		{
			/* the row is as it was; a key deleted and put back has a new node */
			if (x)
				x->tid = ck->tid;
			free_old(ms, ck);
			continue;
		}
		writes[nwrites].ck = ck;
		writes[nwrites].x = x;
		writes[nwrites].order = ck->existed ? address_order(&ck->tid) : NEW_ROW;
		writes[nwrites].group = owned_key_group(ms, ck);
		writes[nwrites].carry = carries(ms, ck, x, final);
		ncarried += writes[nwrites].carry;
		nwrites++;
	}
	sort_undo_order(writes, nwrites);
	carried = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(CarriedKey) * Max(ncarried, 1));
	ncarried = 0;
	undo_packer = undo_packer_create(write_packed_row, &undo);
	redo_packer = undo_packer_create(write_packed_row, &redo);
	for (int64 i = 0; i < nwrites; i++)
	{
		ChangedKey *c = writes[i].ck;

		if (writes[i].carry)
		{
			undo_packer_add(redo_packer, writes[i].group, c->key.data, c->key.len,
							writes[i].x->val, writes[i].x->vlen);
			carried[ncarried].key = c->key;
			carried[ncarried].hash = c->hash;
			carried[ncarried].carried = c->carried + 1;
			carried[ncarried].node = writes[i].x;
			ncarried++;
			continue;
		}
		undo_packer_add(undo_packer, writes[i].group, c->key.data, c->key.len,
						c->existed ? c->old : NULL, c->oldlen);
		free_old(ms, c);
	}
	ms->undo_written += undo_packer_finish(undo_packer);
	ms->redo_written += undo_packer_finish(redo_packer);
	if (mr)
		sort_row_order(writes, nwrites);
	for (int64 i = 0; i < nwrites; i++)
	{
		ChangedKey *c = writes[i].ck;
		SkipNode   *x = writes[i].x;

		if (writes[i].carry)
			continue;
		if (mr == NULL)
		{
			chunk_add(ms, w, c, x, writes[i].group);
			by_sql++;
		}
		else if (!c->existed)
			memory_rows_insert(mr, c->key.data, c->key.len, writes[i].group, x->val, x->vlen, &x->tid);
		else if (x ? memory_rows_update(mr, &c->tid, c->key.data, c->key.len, writes[i].group,
										x->val, x->vlen)
				 : memory_rows_delete(mr, &c->tid, c->key.data, c->key.len))
		{
			if (x)
				x->tid = c->tid;
		}
		else
		{
			chunk_add(ms, w, c, x, writes[i].group);
			by_sql++;
		}
	}
	if (mr)
		memory_rows_end(mr, counts);
	flush_chunk(ms, w);
	pfree(writes);
	/* what went which way: tests read it (159, 160) */
	elog(DEBUG1, "mailer memory checkpoint of job " INT64_FORMAT " epoch " INT64_FORMAT ": "
		 INT64_FORMAT " rows updated at their address (" INT64_FORMAT " HOT), " INT64_FORMAT
		 " deleted at their address, " INT64_FORMAT " inserted, " INT64_FORMAT " written by SQL, "
		 INT64_FORMAT " keys carried as redo",
		 ms->base.job_id, epoch, counts->updated, counts->hot, counts->deleted, counts->inserted, by_sql,
		 ncarried);
	MemoryContextDelete(w->ctx);
	pfree(w);
	end_fold(ms, epoch, carried, ncarried);
	pfree(carried);
}

/*
 * A checkpoint writes the redo of the keys changed since the last one, or
 * folds (docs/ARCHITECTURE.md, "The memory backend's tables"): in the
 * checkpoint's transaction.
 */
static char *
mem_checkpoint(StateBackend *backend, int64 epoch, bool final)
{
	MemoryState *ms = (MemoryState *) backend;
	MemoryRows *mr;
	MemoryRowsCounts counts = {0};
	RelFileNode node;
	bool		folds = final || fold_due(ms, epoch);

	SPI_connect();
	if (folds ? ms->changed->members == 0 : ms->ndirty == 0)
	{
		/* nothing to write: not even the tables to open (a fold of no change leaves the rows as they are) */
		if (folds)
			end_fold(ms, epoch, NULL, 0);
		TEST_POINT(folds ? "memory_fold_written" : "memory_redo_written");
		TEST_POINT("memory_checkpoint_written");
		SPI_finish();
		return state_ref(ms);
	}
	mr = memory_rows_begin(ms->ext_oid, ms->base.job_id, &node);
	if (!RelFileNodeEquals(node, ms->node))
	{
		find_rows(ms);
		ms->node = node;
		ms->freed.n = 0;
		ms->undo_freed.n = 0;
	}
	if (mr)
		memory_rows_reuse(mr, &ms->freed, &ms->undo_freed);
	else
		ms->freed.n = ms->undo_freed.n = 0;
	/*
	 * A fold's epoch needs no redo but that of the keys it carries: an open
	 * at or after it starts from its rows and that redo, one before it
	 * rewinds them and deletes the redo.
	 */
	if (folds)
		fold(ms, mr, epoch, final, &counts);
	else
	{
		ms->redo_written += write_redo(ms, mr, epoch);
		if (mr)
			memory_rows_end(mr, &counts);
	}
	TEST_POINT(folds ? "memory_fold_written" : "memory_redo_written");
	TEST_POINT("memory_checkpoint_written");
	SPI_finish();
	return state_ref(ms);
}

/* The pages a cleanup slice deleted undo rows on (an int8[]), for the next checkpoint to reuse. */
static void
note_undo_pages(MemoryState *ms, Datum pages, bool isnull)
{
	Datum	   *blocks;
	int			n;

	if (isnull)
		return;
	deconstruct_array(DatumGetArrayTypeP(pages), INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &blocks, NULL, &n);
	for (int i = 0; i < n; i++)
		freed_pages_add(&ms->undo_freed, (BlockNumber) DatumGetInt64(blocks[i]));
	pfree(blocks);
}

/*
 * Delete a packed table's rows (memory_undo, or memory_redo) of epochs up
 * to upto, from *resume on, a slice of rows per transaction, so that the
 * rows of a large first checkpoint are no one huge statement; a stop in
 * between leaves rows that the next call deletes.  *budget is what this
 * call may still delete.  Each slice starts at the epoch the one before
 * ended in, not at the start of the index, where the entries of the rows
 * deleted may not be dead yet to an old snapshot.  true: all are gone.
 */
static bool
clean_packed(MemoryState *ms, bool undo, int64 upto, int64 *resume, int64 *budget)
{
	Oid			types[6] = {INT8OID, INT8OID, INT4OID, INT4OID, INT4OID, INT8OID};
	Datum		values[6];
	const char *table = undo ? "memory_undo" : "memory_redo";
	char	   *sql = psprintf("WITH d AS (DELETE FROM mailer.%s WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
							   "  SELECT ctid FROM mailer.%s WHERE job_id OPERATOR(pg_catalog.=) $1 "
							   "  AND epoch OPERATOR(pg_catalog.>=) $6 AND epoch OPERATOR(pg_catalog.<=) $2 "
							   "  AND key_group OPERATOR(pg_catalog.>=) $3 AND key_group OPERATOR(pg_catalog.<) $4 "
							   "  ORDER BY epoch LIMIT $5)) "
							   "  RETURNING epoch, ((ctid::pg_catalog.text)::pg_catalog.point)[0]::pg_catalog.int8 AS page) "
							   "SELECT pg_catalog.count(*), pg_catalog.max(epoch), "
							   "  pg_catalog.array_agg(DISTINCT page ORDER BY page) FROM d",
							   table, table);

	values[0] = Int64GetDatum(ms->base.job_id);
	values[1] = Int64GetDatum(upto);
	values[2] = Int32GetDatum(ms->kg_lo);
	values[3] = Int32GetDatum(ms->kg_hi);
	values[4] = Int32GetDatum(CLEAN_SLICE);
	for (;;)
	{
		uint64		deleted;
		bool		isnull;
		bool		pages_null;
		Datum		last;
		Datum		pages;

		work_xact_begin();

		/*
		 * Each slice is its own transaction: as checkpoint_begin, keep a
		 * DROP EXTENSION waiting, or see it done, so that a worker of a
		 * dropped installation never deletes the rows of a new one's job
		 * of the same id.  The checkpoint after stops the worker.
		 */
		if (!catalog_lock_extension(ms->ext_oid))
		{
			work_xact_end();
			pfree(sql);
			return false;
		}
		values[5] = Int64GetDatum(*resume);
		SPI_connect();
		catalog_exec(sql, 6, types, values, NULL, false);
		deleted = (uint64) DatumGetInt64(catalog_value(0, 1, NULL));
		last = catalog_value(0, 2, &isnull);
		pages = catalog_value(0, 3, &pages_null);
		/* the undo's pages are reused by the next checkpoint; the redo's, by vacuum */
		if (undo)
			note_undo_pages(ms, pages, pages_null);
		/* a stop here loses the slice, never a needed row */
		TEST_POINT(undo ? "memory_undo_cleanup" : "memory_redo_cleanup");
		SPI_finish();
		work_xact_end();
		if (deleted < CLEAN_SLICE)
			break;
		/* the slice's last epoch may have rows left: start there */
		*resume = DatumGetInt64(last);
		*budget -= deleted;
		if (*budget <= 0)
		{
			pfree(sql);
			return false;		/* carry on at the next checkpoint */
		}
	}
	pfree(sql);
	return true;
}

/*
 * Delete the undo and redo no retained epoch needs.  A rewind to keep_from
 * or later reads only the undo of epochs after keep_from, and replays the
 * redo from the newest fold at or before it on: the redo before this
 * worker's newest fold at or before keep_from goes (an open's replay
 * reads from the fold it rewound to on, that fold's carried keys
 * included, and before this worker's first fold it cannot know that
 * fold).
 *
 * This runs in the batch loop, so a call deletes about what the checkpoints
 * wrote since the last one and a few slices more: a backlog (the undo of a
 * checkpoint that rewrote every key) goes over the next checkpoints
 * instead of stopping the input meanwhile.
 */
static void
mem_committed(StateBackend *backend, int64 epoch, int64 keep_from, const int64 *keep, int nkeep)
{
	MemoryState *ms = (MemoryState *) backend;
	int			past = 0;

	/* A rewind to the oldest retained cut reads the undo of every epoch after it. */
	if (nkeep > 0 && keep[0] < keep_from)
		keep_from = keep[0];
	while (past < ms->nfolds && ms->folds[past] <= keep_from)
		ms->redo_clean_to = ms->folds[past++] - 1;	/* the fold's own redo (its carried keys) stays */
	if (past > 0)
	{
		memmove(ms->folds, ms->folds + past, sizeof(int64) * (ms->nfolds - past));
		ms->nfolds -= past;
	}
	if (keep_from > ms->cleaned_to)
	{
		int64		budget = ms->undo_written + (int64) CLEAN_SLICES * CLEAN_SLICE;

		if (!clean_packed(ms, true, keep_from, &ms->clean_epoch, &budget))
			return;
		ms->cleaned_to = keep_from;
		ms->clean_epoch = keep_from + 1;
		ms->undo_written = 0;
	}
	if (ms->redo_clean_to > ms->redo_cleaned_to)
	{
		int64		budget = ms->redo_written + (int64) CLEAN_SLICES * CLEAN_SLICE;

		if (!clean_packed(ms, false, ms->redo_clean_to, &ms->redo_clean_epoch, &budget))
			return;
		ms->redo_cleaned_to = ms->redo_clean_to;
		ms->redo_clean_epoch = ms->redo_clean_to + 1;
		ms->redo_written = 0;
	}
}

/*
 * The keys and values, the key->node hash's array and the waiting nodes'
 * (docs/ARCHITECTURE.md).
 */
static int64
mem_size(StateBackend *backend)
{
	MemoryState *ms = (MemoryState *) backend;

	return ms->bytes + (int64) (ms->nodes->size * sizeof(NodeEntry)) +
		ms->maxwaiting * (int64) sizeof(SkipNode *);
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
