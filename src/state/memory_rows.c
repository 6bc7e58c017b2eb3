/*
 * memory_rows.c
 *		The memory backend's checkpoint writes at the heap level
 *		(memory_rows.h).
 *
 * The SQL the checkpoint ran before (an INSERT ... ON CONFLICT DO UPDATE of
 * unnest()ed arrays, and an INSERT of the undo) found each key's row
 * through the primary key and built and took apart the arrays: that was
 * most of the memory backend's checkpoint.  Here a changed key's row is
 * updated at the address the backend kept (heap_update: a HOT update as
 * long as the page has room, which pruning the page first gives it), new
 * rows and undo rows go in as COPY FROM puts them (table_multi_insert, then
 * the index entries), and the WAL is what those write.
 *
 * These are the extension's own tables, written as the SQL wrote them
 * (catalog_exec runs it as the bootstrap superuser): no privilege of the
 * job's owner applies, and no name the job gives is involved.  The tables
 * are found by their fixed names in the extension's schema and must belong
 * to the extension the checkpoint holds a lock on; they are locked (ROW
 * EXCLUSIVE, as the SQL did) until the transaction ends, so no rewrite
 * (VACUUM FULL, CLUSTER, TRUNCATE: ACCESS EXCLUSIVE) runs meanwhile, and
 * VACUUM (SHARE UPDATE EXCLUSIVE) may: it never moves a row a snapshot
 * sees, and each address is checked before it is used.  A trigger or rule
 * someone added to them would not run here: then the SQL does the writes.
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/freespace.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "base/bulk_slot.h"
#include "base/bytea.h"
#include "base/mailer.h"
#include "jobs/catalog.h"
#include "state/memory_rows.h"

/*
 * Pages of a table a checkpoint prunes for reuse, at most (32 MB of them):
 * a backlog, the pages a long snapshot held back, goes over several.
 */
#define REUSE_MAX_PAGES	4096

/* Rows per table_multi_insert() (as COPY FROM buffers). */
#define ROWS_BATCH		1000

/*
 * And bytes of keys and values: 1000 values of a megabyte (session
 * windows, numeric extremes) would otherwise be held at once, per table.
 */
#define ROWS_BATCH_BYTES	(8 * 1024 * 1024)

/* A column the writes fill; any other live column sends them to SQL. */
typedef struct ExpectedColumn
{
	const char *name;
	Oid			type;
} ExpectedColumn;

/* None is ever written NULL: a NOT NULL constraint needs no check. */
static const ExpectedColumn state_columns[] = {
	{"job_id", INT8OID}, {"key", BYTEAOID}, {"key_group", INT4OID}, {"value", BYTEAOID},
};
static const ExpectedColumn undo_columns[] = {
	{"job_id", INT8OID}, {"epoch", INT8OID}, {"key_group", INT4OID},
	{"keys", BYTEAARRAYOID}, {"old_values", BYTEAARRAYOID},
};
static const ExpectedColumn redo_columns[] = {
	{"job_id", INT8OID}, {"epoch", INT8OID}, {"key_group", INT4OID},
	{"keys", BYTEAARRAYOID}, {"new_values", BYTEAARRAYOID},
};

/*
 * The three tables, in the order memory_rows_begin opens them (their range
 * table indexes, from 1), with the columns the writes fill.
 */
typedef struct RowsTableDef
{
	const char *name;
	const ExpectedColumn *columns;
	int			ncolumns;
	const char *key;			/* the key's column (undo, redo: the keys') */
	const char *value;			/* the value's (undo: the old values'; redo: the new ones') */
	bool		epoch;			/* an epoch column: undo and redo */
} RowsTableDef;

static const RowsTableDef table_defs[] = {
	{"memory_state", state_columns, lengthof(state_columns), "key", "value", false},
	{"memory_undo", undo_columns, lengthof(undo_columns), "keys", "old_values", true},
	{"memory_redo", redo_columns, lengthof(redo_columns), "keys", "new_values", true},
};

#define ROWS_TABLES		lengthof(table_defs)

/* One of the tables, and its inserts not yet written. */
typedef struct RowsTable
{
	ResultRelInfo *rri;
	Relation	rel;
	MemoryContext ctx;			/* the buffered rows' values; reset after each write */
	int			n;
	Size		bytes;			/* of the buffered keys and values */
	TupleTableSlot *slots[ROWS_BATCH];
	TupleDesc	slot_desc;		/* the slots' copy of the table's (bulk_slot.h) */
	ItemPointer dest[ROWS_BATCH];	/* where a row's address goes; NULL: nowhere */
	BulkInsertState bistate;
	AttrNumber	att_job;
	AttrNumber	att_group;
	AttrNumber	att_key;		/* undo, redo: keys */
	AttrNumber	att_value;		/* undo: old_values; redo: new_values */
	AttrNumber	att_epoch;		/* undo and redo only */
} RowsTable;

struct MemoryRows
{
	EState	   *estate;
	Snapshot	snapshot;
	CommandId	cid;
	int64		job_id;
	BlockNumber nblocks;		/* of the state table: an address past it is stale */
	MemoryContext row_ctx;		/* one update's tuple; reset after it */
	TupleTableSlot *update_slot;	/* a non-HOT update's new row, for its index entries */
	RowsTable	state;
	RowsTable	undo;
	RowsTable	redo;
	CatalogAccess access;		/* as the SQL ran: the catalog's writer, pg_catalog first */
	MemoryRowsCounts counts;
	FreedPages *freed;			/* where the pages this checkpoint frees go; NULL: nowhere */
};

/*
 * The extension's table of that name, locked.  The name is fixed: no
 * role but the one that may change the extension can put another table
 * there, and one that is not the extension's is refused.
 */
static Oid
memory_table(Oid ext_oid, const char *name, LOCKMODE lockmode)
{
	Oid			relid = RangeVarGetRelid(makeRangeVar(MAILER_SCHEMA, (char *) name, -1), lockmode, false);

	if (getExtensionOfObject(RelationRelationId, relid) != ext_oid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table %s.%s is not the mailer extension's", MAILER_SCHEMA, name),
				 errhint("Drop the table and ALTER EXTENSION mailer UPDATE, or reinstall the extension.")));
	return relid;
}

RelFileNode
memory_rows_node(Oid ext_oid)
{
	Relation	rel = table_open(memory_table(ext_oid, "memory_state", AccessShareLock), NoLock);
	RelFileNode node = rel->rd_node;

	table_close(rel, NoLock);
	return node;
}

/*
 * Whether writing the table at the heap level does what the SQL would: a
 * plain heap table of exactly the columns the writes fill, nothing the
 * executor would add or check on top (a default or generated column, a
 * CHECK constraint, valid or not, row security, a trigger, a rule, a child
 * table).  The relcache has all of
 * it: cheap enough for each checkpoint.
 */
static bool
plain_heap(Relation rel, const ExpectedColumn *cols, int ncols)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			live = 0;

	if (rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_rel->relam != HEAP_TABLE_AM_OID ||
		rel->trigdesc != NULL || rel->rd_rel->relhasrules || rel->rd_rel->relrowsecurity ||
		rel->rd_rel->relhassubclass)
		return false;
	if (desc->constr &&
		(desc->constr->num_check > 0 || desc->constr->num_defval > 0 || desc->constr->has_generated_stored))
		return false;
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		int			c;

		if (att->attisdropped)
			continue;			/* written NULL, as the executor does */
		for (c = 0; c < ncols; c++)
			if (strcmp(NameStr(att->attname), cols[c].name) == 0)
				break;
		if (c == ncols || att->atttypid != cols[c].type || att->attgenerated || att->attidentity)
			return false;
		live++;
	}
	return live == ncols;
}

static AttrNumber
column(Relation rel, const char *name)
{
	AttrNumber	a = get_attnum(RelationGetRelid(rel), name);

	if (a == InvalidAttrNumber)
		elog(ERROR, "mailer table \"%s\" has no column \"%s\"", RelationGetRelationName(rel), name);
	return a;
}

static void
table_init(MemoryRows *mr, RowsTable *t, Index rti)
{
	const RowsTableDef *def = &table_defs[rti - 1];

	t->rri = makeNode(ResultRelInfo);
	ExecInitResultRelation(mr->estate, t->rri, rti);
	t->rel = t->rri->ri_RelationDesc;
	ExecOpenIndices(t->rri, false);
	t->ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer memory rows", ALLOCSET_DEFAULT_SIZES);
	t->n = 0;
	t->bytes = 0;
	t->bistate = NULL;
	t->slot_desc = NULL;
	t->att_job = column(t->rel, "job_id");
	t->att_group = column(t->rel, "key_group");
	t->att_key = column(t->rel, def->key);
	t->att_value = column(t->rel, def->value);
	t->att_epoch = def->epoch ? column(t->rel, "epoch") : InvalidAttrNumber;
}

MemoryRows *
memory_rows_begin(Oid ext_oid, int64 job_id, RelFileNode *node)
{
	Oid			relids[ROWS_TABLES];
	List	   *rtable = NIL;
	Relation	rels[ROWS_TABLES];
	bool		plain = true;
	MemoryRows *mr = palloc0(sizeof(MemoryRows));

	/*
	 * The SQL ran as the catalog's writer with pg_catalog first: index
	 * expressions and predicates are evaluated as they were, not as the
	 * job's owner with the job's search_path.
	 */
	catalog_enter(&mr->access);
	for (int i = 0; i < ROWS_TABLES; i++)
	{
		relids[i] = memory_table(ext_oid, table_defs[i].name, RowExclusiveLock);
		rels[i] = table_open(relids[i], NoLock);
		plain = plain && plain_heap(rels[i], table_defs[i].columns, table_defs[i].ncolumns);
	}
	*node = rels[0]->rd_node;
	if (plain)
	{
		/* The INSERT refuses to write in a read-only transaction: so does this. */
		if (XactReadOnly)
			PreventCommandIfReadOnly("INSERT");

		/*
		 * heap_update and heap_delete log the old row the replica identity
		 * asks for, but check nothing: the executor's check refuses them,
		 * as it refuses SQL's, while a publication publishes the table's
		 * updates or deletes and its identity cannot identify a row
		 * (NOTHING, DEFAULT without a primary key) or the publication has a
		 * column list (PostgreSQL 15 allows none with FULL, the identity
		 * the extension gives the table).
		 */
		CheckCmdReplicaIdentity(rels[0], CMD_UPDATE);
		CheckCmdReplicaIdentity(rels[0], CMD_DELETE);
	}
	for (int i = 0; i < ROWS_TABLES; i++)
		table_close(rels[i], NoLock);
	if (!plain)
	{
		catalog_leave(&mr->access);
		pfree(mr);
		return NULL;
	}

	mr->job_id = job_id;
	for (int i = 0; i < ROWS_TABLES; i++)
	{
		RangeTblEntry *rte = makeNode(RangeTblEntry);

		rte->rtekind = RTE_RELATION;
		rte->relid = relids[i];
		rte->relkind = RELKIND_RELATION;
		rte->rellockmode = RowExclusiveLock;
		rtable = lappend(rtable, rte);
	}
	mr->estate = CreateExecutorState();
	ExecInitRangeTable(mr->estate, rtable);
	mr->snapshot = GetActiveSnapshot();
	mr->estate->es_snapshot = mr->snapshot;
	mr->cid = GetCurrentCommandId(true);
	mr->estate->es_output_cid = mr->cid;
	table_init(mr, &mr->state, 1);
	table_init(mr, &mr->undo, 2);
	table_init(mr, &mr->redo, 3);
	mr->nblocks = RelationGetNumberOfBlocks(mr->state.rel);
	mr->row_ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer memory row", ALLOCSET_SMALL_SIZES);
	mr->update_slot = ExecAllocTableSlot(&mr->estate->es_tupleTable, RelationGetDescr(mr->state.rel),
										 &TTSOpsHeapTuple);
	return mr;
}

#if PG_VERSION_NUM >= 160000
#error "heap_page_prune changed in PostgreSQL 16: prune_page needs its new call"
#endif

/*
 * PostgreSQL 15.8 added heap_page_prune's oldest_xmin (which a vacuum
 * passes; without one the visibility test decides, as on access).  A
 * library built on one side of 15.8 and loaded into a server of the other
 * would call it with the arguments shifted: then the pages are left to
 * vacuum.
 */
#define PRUNE_WITH_OLDEST_XMIN (PG_VERSION_NUM >= 150008)

static bool
prune_call_matches(void)
{
	static int	matches = -1;

	if (matches < 0)
	{
		int			server = atoi(GetConfigOption("server_version_num", false, false));

		matches = (server >= 150008) == PRUNE_WITH_OLDEST_XMIN;
	}
	return matches;
}

/*
 * Prune a page as on access, under the cleanup lock the caller holds, but
 * whatever its free space: heap_page_prune_opt would leave one the inserts
 * filled to about the fillfactor, which is most of those whose rows all
 * died.  Its dead rows count, as heap_page_prune_opt counts them.
 */
static void
prune_page(Relation rel, Buffer buf)
{
	int			nnewlpdead;
	int			ndeleted;

#if PRUNE_WITH_OLDEST_XMIN
	ndeleted = heap_page_prune(rel, buf, InvalidTransactionId, GlobalVisTestFor(rel),
							   InvalidTransactionId, 0, &nnewlpdead, NULL);
#else
	ndeleted = heap_page_prune(rel, buf, GlobalVisTestFor(rel),
							   InvalidTransactionId, 0, &nnewlpdead, NULL);
#endif
	if (ndeleted > nnewlpdead)
		pgstat_update_heap_dead_tuples(rel, ndeleted - nnewlpdead);
}

/* By page, and a page's newest deleter last. */
static int
freed_cmp(const void *a, const void *b)
{
	const FreedPage *x = a;
	const FreedPage *y = b;
	uint64		xa = U64FromFullTransactionId(x->xid);
	uint64		xb = U64FromFullTransactionId(y->xid);

	if (x->block != y->block)
		return (x->block > y->block) - (x->block < y->block);
	return (xa > xb) - (xa < xb);
}

/*
 * Prune the pages of f in rel whose deleter's rows every snapshot now sees
 * gone, and record their free space.  The others (an older snapshot, a
 * long transaction or a wait_job, still sees the rows) stay in f, unread,
 * as does a page someone holds a pin on (a scan, the background writer).
 */
static void
reuse_pages(Relation rel, FreedPages *f)
{
	GlobalVisState *vistest = GlobalVisTestFor(rel);
	BlockNumber nblocks = RelationGetNumberOfBlocks(rel);
	BlockNumber lo = InvalidBlockNumber;
	BlockNumber hi = 0;
	int			kept = 0;
	int			pruned = 0;

	/* a page may be in it more than once: its newest deleter decides */
	qsort(f->pages, f->n, sizeof(FreedPage), freed_cmp);
	for (int i = 0; i < f->n; i++)
	{
		FreedPage	p = f->pages[i];
		Buffer		buf;
		Size		space;

		/* a vacuum truncated the table since, or the same page follows */
		if (p.block >= nblocks || (i + 1 < f->n && f->pages[i + 1].block == p.block))
			continue;
		/* after a long snapshot ends, the backlog goes over several checkpoints */
		if (pruned == REUSE_MAX_PAGES || !GlobalVisTestIsRemovableFullXid(vistest, p.xid))
		{
			f->pages[kept++] = p;
			continue;
		}
		CHECK_FOR_INTERRUPTS();
		buf = ReadBuffer(rel, p.block);
		if (!ConditionalLockBufferForCleanup(buf))
		{
			ReleaseBuffer(buf);
			f->pages[kept++] = p;
			continue;
		}
		/* a page a vacuum truncated and an extension added again, empty: the map knows it */
		if (PageIsNew(BufferGetPage(buf)))
		{
			UnlockReleaseBuffer(buf);
			continue;
		}
		prune_page(rel, buf);
		pruned++;
		space = PageGetHeapFreeSpace(BufferGetPage(buf));
		UnlockReleaseBuffer(buf);
		RecordPageWithFreeSpace(rel, p.block, space);
		lo = Min(lo, p.block);
		hi = Max(hi, p.block);
	}
	/* the map's upper levels, which a search starts from */
	if (lo != InvalidBlockNumber)
		FreeSpaceMapVacuumRange(rel, lo, hi + 1);
	f->n = kept;
}

void
memory_rows_reuse(MemoryRows *mr, FreedPages *state, FreedPages *undo)
{
	if (prune_call_matches())
	{
		reuse_pages(mr->state.rel, state);
		reuse_pages(mr->undo.rel, undo);
		mr->freed = state;
	}
	else
		state->n = undo->n = 0;
}

void
freed_pages_init(FreedPages *f)
{
	f->n = 0;
	f->cap = 1024;
	f->pages = palloc(sizeof(FreedPage) * f->cap);
}

void
freed_pages_add(FreedPages *f, BlockNumber block)
{
	FullTransactionId xid = GetCurrentFullTransactionIdIfAny();

	Assert(FullTransactionIdIsValid(xid));
	/* a checkpoint's writes go in address order: most repeats are here */
	if (f->n > 0 && f->pages[f->n - 1].block == block &&
		FullTransactionIdEquals(f->pages[f->n - 1].xid, xid))
		return;
	if (f->n == f->cap)
	{
		f->cap *= 2;
		f->pages = repalloc_huge(f->pages, sizeof(FreedPage) * f->cap);
	}
	f->pages[f->n].block = block;
	f->pages[f->n].xid = xid;
	f->n++;
}

/* A page that now holds a dead row of the checkpoint's, into the list. */
static void
note_freed(MemoryRows *mr, BlockNumber block)
{
	if (mr->freed)
		freed_pages_add(mr->freed, block);
}

/* A row's values, in the slot's arrays or in values/nulls: key and value are byteas (undo: bytea[]s). */
static void
fill_row(RowsTable *t, MemoryRows *mr, Datum *values, bool *nulls, Datum key, int group, Datum val)
{
	int			natts = RelationGetDescr(t->rel)->natts;

	for (int a = 0; a < natts; a++)
	{
		values[a] = (Datum) 0;
		nulls[a] = true;			/* a dropped column's */
	}
	values[t->att_job - 1] = Int64GetDatum(mr->job_id);
	nulls[t->att_job - 1] = false;
	values[t->att_key - 1] = key;
	nulls[t->att_key - 1] = false;
	values[t->att_group - 1] = Int32GetDatum(group);
	nulls[t->att_group - 1] = false;
	values[t->att_value - 1] = val;
	nulls[t->att_value - 1] = false;
}

/* Write a table's buffered rows and their index entries. */
static void
flush_inserts(MemoryRows *mr, RowsTable *t)
{
	if (t->n == 0)
		return;
	if (t->bistate == NULL)
	{
		/* kept for the whole checkpoint: the caller's context may be a row's */
		MemoryContext old = MemoryContextSwitchTo(mr->estate->es_query_cxt);

		t->bistate = GetBulkInsertState();
		MemoryContextSwitchTo(old);
	}
	table_multi_insert(t->rel, t->slots, t->n, mr->cid, 0, t->bistate);
	for (int i = 0; i < t->n; i++)
	{
		if (t->rri->ri_NumIndices > 0)
			list_free(ExecInsertIndexTuples(t->rri, t->slots[i], mr->estate, false, false, NULL, NIL));
		if (t->dest[i])
			*t->dest[i] = t->slots[i]->tts_tid;
		ExecClearTuple(t->slots[i]);
	}
	ResetPerTupleExprContext(mr->estate);
	if (t == &mr->state)
		mr->counts.inserted += t->n;
	t->n = 0;
	t->bytes = 0;
	MemoryContextReset(t->ctx);
}

/*
 * Buffer a row of the table: key and value are in the table's context,
 * which keeps them until the rows are written; bytes is their size.
 */
static void
buffer_insert(MemoryRows *mr, RowsTable *t, int64 epoch, Datum key, int group, Datum val,
			  Size bytes, ItemPointer dest)
{
	TupleTableSlot *slot;

	CHECK_FOR_INTERRUPTS();
	if (t->slots[t->n] == NULL)
	{
		/* kept for the whole checkpoint, whatever context the caller is in */
		MemoryContext old = MemoryContextSwitchTo(mr->estate->es_query_cxt);

		t->slots[t->n] = bulk_slot_create(t->rel, &t->slot_desc, &mr->estate->es_tupleTable);
		MemoryContextSwitchTo(old);
	}
	slot = t->slots[t->n];
	ExecClearTuple(slot);
	fill_row(t, mr, slot->tts_values, slot->tts_isnull, key, group, val);
	if (t->att_epoch != InvalidAttrNumber)
	{
		slot->tts_values[t->att_epoch - 1] = Int64GetDatum(epoch);
		slot->tts_isnull[t->att_epoch - 1] = false;
	}
	ExecStoreVirtualTuple(slot);
	slot->tts_tableOid = RelationGetRelid(t->rel);
	t->dest[t->n] = dest;
	t->bytes += bytes;
	if (++t->n == ROWS_BATCH || t->bytes >= ROWS_BATCH_BYTES)
		flush_inserts(mr, t);
}

void
memory_rows_insert(MemoryRows *mr, const char *key, int klen, int group,
				   const char *val, int vlen, ItemPointer dest)
{
	MemoryContext old = MemoryContextSwitchTo(mr->state.ctx);
	Datum		k = PointerGetDatum(mailer_bytea(key, klen));
	Datum		v = PointerGetDatum(mailer_bytea(val, vlen));

	MemoryContextSwitchTo(old);
	buffer_insert(mr, &mr->state, 0, k, group, v, klen + vlen, dest);
}

/* A packed row of keys and values into the undo (redo: false) or the redo. */
void
memory_rows_packed(MemoryRows *mr, bool redo, int64 epoch, int group, Datum keys, Datum values)
{
	RowsTable  *t = redo ? &mr->redo : &mr->undo;
	MemoryContext old = MemoryContextSwitchTo(t->ctx);
	Datum		k = datumCopy(keys, false, -1);
	Datum		v = datumCopy(values, false, -1);

	MemoryContextSwitchTo(old);
	buffer_insert(mr, t, epoch, k, group, v,
				  VARSIZE_ANY(DatumGetPointer(k)) + VARSIZE_ANY(DatumGetPointer(v)), NULL);
}

/*
 * Whether the row a heap tuple holds is this job's row of the key.  A key
 * stored out of line or compressed (a long one) is compared once
 * detoasted, which must not happen under the buffer lock: it is copied
 * into *later instead.
 */
static bool
row_is_key(MemoryRows *mr, HeapTuple tup, const char *key, int klen, struct varlena **later)
{
	TupleDesc	desc = RelationGetDescr(mr->state.rel);
	bool		isnull;
	Datum		d = heap_getattr(tup, mr->state.att_job, desc, &isnull);
	struct varlena *k;

	if (isnull || DatumGetInt64(d) != mr->job_id)
		return false;
	d = heap_getattr(tup, mr->state.att_key, desc, &isnull);
	if (isnull)
		return false;
	k = (struct varlena *) DatumGetPointer(d);
	if (VARATT_IS_EXTERNAL(k) || VARATT_IS_COMPRESSED(k))
	{
		*later = palloc(VARSIZE_ANY(k));
		memcpy(*later, k, VARSIZE_ANY(k));
		return true;
	}
	return VARSIZE_ANY_EXHDR(k) == klen && memcmp(VARDATA_ANY(k), key, klen) == 0;
}

/*
 * Whether *tid holds the job's row of the key, visible to the checkpoint:
 * then the buffer stays pinned (*buf), so that no pruning can reuse the
 * address before the caller's update or delete.  An address from before a
 * rewrite, or of a row someone else updated or deleted since, fails here
 * or in the update (TM_Updated, TM_Deleted).
 */
static bool
holds_key(MemoryRows *mr, ItemPointer tid, const char *key, int klen, Buffer *buf)
{
	Relation	rel = mr->state.rel;
	OffsetNumber off = ItemPointerGetOffsetNumber(tid);
	struct varlena *later = NULL;
	bool		ok = false;
	Page		page;

	if (!ItemPointerIsValid(tid) || ItemPointerGetBlockNumber(tid) >= mr->nblocks)
		return false;
	*buf = ReadBuffer(rel, ItemPointerGetBlockNumber(tid));

	/*
	 * As a scan or an index fetch would: what the updates of earlier
	 * checkpoints left goes, and the page has room for this one (a HOT
	 * update, no index entry).
	 */
	heap_page_prune_opt(rel, *buf);
	LockBuffer(*buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(*buf);
	if (off <= PageGetMaxOffsetNumber(page))
	{
		ItemId		lp = PageGetItemId(page, off);

		if (ItemIdIsNormal(lp))
		{
			HeapTupleData tup;

			tup.t_data = (HeapTupleHeader) PageGetItem(page, lp);
			tup.t_len = ItemIdGetLength(lp);
			tup.t_tableOid = RelationGetRelid(rel);
			tup.t_self = *tid;
			ok = HeapTupleSatisfiesVisibility(&tup, mr->snapshot, *buf) &&
				row_is_key(mr, &tup, key, klen, &later);
		}
	}
	LockBuffer(*buf, BUFFER_LOCK_UNLOCK);
	if (ok && later)
	{
		struct varlena *k = detoast_attr(later);

		ok = VARSIZE_ANY_EXHDR(k) == klen && memcmp(VARDATA_ANY(k), key, klen) == 0;
		if (k != later)
			pfree(k);
	}
	if (later)
		pfree(later);
	if (!ok)
		ReleaseBuffer(*buf);
	return ok;
}

bool
memory_rows_update(MemoryRows *mr, ItemPointer tid, const char *key, int klen,
				   int group, const char *val, int vlen)
{
	Relation	rel = mr->state.rel;
	int			natts = RelationGetDescr(rel)->natts;
	MemoryContext old = MemoryContextSwitchTo(mr->row_ctx);
	Datum	   *values = palloc(sizeof(Datum) * natts);
	bool	   *nulls = palloc(sizeof(bool) * natts);
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	HeapTuple	tup;
	TM_Result	result;
	Buffer		buf;

	CHECK_FOR_INTERRUPTS();
	if (!holds_key(mr, tid, key, klen, &buf))
	{
		MemoryContextSwitchTo(old);
		MemoryContextReset(mr->row_ctx);
		return false;
	}
	fill_row(&mr->state, mr, values, nulls, PointerGetDatum(mailer_bytea(key, klen)), group,
			 PointerGetDatum(mailer_bytea(val, vlen)));
	tup = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	result = heap_update(rel, tid, tup, mr->cid, InvalidSnapshot, true, &tmfd, &lockmode);
	ReleaseBuffer(buf);
	if (result == TM_Ok)
	{
		/* Not HOT (the page was full, or an index covers value): the new row needs its entries. */
		if (!HeapTupleIsHeapOnly(tup) && mr->state.rri->ri_NumIndices > 0)
		{
			ExecStoreHeapTuple(tup, mr->update_slot, false);
			list_free(ExecInsertIndexTuples(mr->state.rri, mr->update_slot, mr->estate,
											true, false, NULL, NIL));
			ExecClearTuple(mr->update_slot);
			ResetPerTupleExprContext(mr->estate);
		}
		if (ItemPointerGetBlockNumber(tid) != ItemPointerGetBlockNumber(&tup->t_self))
			note_freed(mr, ItemPointerGetBlockNumber(tid));
		*tid = tup->t_self;
		mr->counts.updated++;
		if (HeapTupleIsHeapOnly(tup))
			mr->counts.hot++;
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(mr->row_ctx);
	return result == TM_Ok;
}

bool
memory_rows_delete(MemoryRows *mr, ItemPointer tid, const char *key, int klen)
{
	MemoryContext old = CurrentMemoryContext;
	TM_FailureData tmfd;
	TM_Result	result;
	Buffer		buf;

	bool		ok;

	CHECK_FOR_INTERRUPTS();
	/* a long key's copies go with the context, as the update's do */
	MemoryContextSwitchTo(mr->row_ctx);
	ok = holds_key(mr, tid, key, klen, &buf);
	MemoryContextSwitchTo(old);
	MemoryContextReset(mr->row_ctx);
	if (!ok)
		return false;
	result = heap_delete(mr->state.rel, tid, mr->cid, InvalidSnapshot, true, &tmfd, false);
	ReleaseBuffer(buf);
	if (result == TM_Ok)
	{
		note_freed(mr, ItemPointerGetBlockNumber(tid));
		mr->counts.deleted++;
	}
	return result == TM_Ok;
}

void
memory_rows_end(MemoryRows *mr, MemoryRowsCounts *counts)
{
	RowsTable  *tables[ROWS_TABLES] = {&mr->state, &mr->undo, &mr->redo};
	CatalogAccess access = mr->access;

	for (int i = 0; i < ROWS_TABLES; i++)
	{
		flush_inserts(mr, tables[i]);
		if (tables[i]->bistate)
		{
			FreeBulkInsertState(tables[i]->bistate);
			table_finish_bulk_insert(tables[i]->rel, 0);
		}
		MemoryContextDelete(tables[i]->ctx);
	}
	MemoryContextDelete(mr->row_ctx);
	ExecResetTupleTable(mr->estate->es_tupleTable, false);
	ExecCloseResultRelations(mr->estate);
	ExecCloseRangeTableRelations(mr->estate);
	FreeExecutorState(mr->estate);
	*counts = mr->counts;
	pfree(mr);
	catalog_leave(&access);
	/* The statements after these writes see them, as they saw the SQL's. */
	CommandCounterIncrement();
}
