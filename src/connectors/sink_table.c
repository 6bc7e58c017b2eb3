/*
 * sink_table.c
 *		The table sink (sink_table.h).
 *
 * Rows are kept column by column.  At a checkpoint each chunk of rows is
 * one INSERT ... SELECT * FROM unnest($1, $2, ...) [ON CONFLICT ...], a
 * plan prepared once, or, into a table where that is the same,
 * table_multi_insert() and the index inserts (run_bulk): an append sink's
 * rows, and an upsert's while its keys are new (see bulk_attempt_failed).
 * An upsert's rows tried as new go in its conflict index's order when that
 * index is larger than the cache (key_order).
 * When the table rejects a chunk for a row's data (a constraint, a value
 * out of range), the chunk is split in halves until the bad rows are
 * alone; they become dead letters and the rest is written.
 * Deferred constraints are checked in each statement, so that the halving
 * sees them too; two rows that a trigger makes one key are written in
 * separate statements, in their order.  The deletes of a merged session's
 * replaced rows are halved the same way.
 *
 * When every row of a checkpoint (two or more) fails alone with the same
 * SQLSTATE, the table is taken to refuse everything (row-level security
 * without a policy, a new constraint, parent rows not loaded yet): the
 * checkpoint fails and is retried, nothing is dead-lettered.
 *
 * The spec names the table: each checkpoint resolves the name again
 * (table_sink_bind), and a table made anew under it is written from then on.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_index.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/sortsupport.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "base/bulk_slot.h"
#include "base/guard.h"
#include "base/local_hash.h"
#include "base/record.h"
#include "base/test_point.h"
#include "connectors/sink_table.h"

#define SINK_CHUNK_ROWS 10000

/* Rows per table_multi_insert() of the append path (as COPY FROM buffers). */
#define SINK_BULK_ROWS 1000

/*
 * The conflict index's size from which an upsert's rows are sorted first
 * (key_order): 8 MB, between the sizes measured to lose (4 MB) and to gain
 * (12 MB) on the bench machine, whose L2 cache is 4 MB a core.
 */
#define SINK_SORT_MIN_INDEX_BLOCKS (8 * 1024 * 1024 / BLCKSZ)

/* Flushes at most that an upsert goes without trying its keys as new. */
#define SINK_BULK_MAX_WAIT 64

/* Bytes of buffered rows past which the worker checkpoints early. */
#define SINK_MAX_BYTES (64 * 1024 * 1024)

typedef struct RowEntry
{
	uint32		row;
	uint32		hash;
	char		status;
} RowEntry;

typedef struct SinkOrigin
{
	const char *topic;			/* a source's topic name, or NULL */
	int32		partition;
	int64		offset;
} SinkOrigin;

/* A row the table refused, alone in its statement. */
typedef struct SinkRefusal
{
	int			row;
	int			sqlerrcode;
	char	   *message;
	char	   *text;			/* message: detail */
} SinkRefusal;

/*
 * The bulk path's view of the table, made at each flush (bulk_prepare):
 * where each attribute's value comes from.
 */
typedef struct SinkBulk
{
	Oid			relid;
	int			natts;
	int		   *column;			/* [attribute]: the sink column, or -1 */
	Expr	  **defaults;		/* [attribute]: its planned default, or NULL */
	Bitmapset  *inserted;		/* the sink's columns, as an RTE's insertedCols */
	List	   *statement_rtable;	/* upsert: its statement's, for the privileges */
} SinkBulk;

/* One flush: the refused rows, and a context for each statement's attempt. */
typedef struct SinkFlush
{
	MemoryContext attempt;		/* reset after each statement */
	OnError		on_error;
	int64		written;
	List	   *refused;		/* SinkRefusal, in order */
	SinkBulk   *bulk;			/* rows go through table_multi_insert() */
} SinkFlush;

struct TableSink
{
	SinkPlan   *plan;
	MemoryContext ctx;			/* the rows; reset at each flush */
	int			nrows;
	int			capacity;
	Datum	  **values;			/* [column][row] */
	bool	  **nulls;
	SinkOrigin *origins;
	int		   *order;			/* in a flush: the rows in key order (key_order); NULL: as buffered */
	bool	   *dropped;		/* rows deleted after they were buffered */
	int			ndropped;
	struct rowset_hash *keys;	/* upsert: row of each key */
	SPIPlanPtr	insert_plan;
	bool	   *failing;		/* set before raising a refused row's error (on_error "fail") */
	TableSink *deletes;		/* keys to delete, as rows of their own */
	SPIPlanPtr	delete_plan;
	FmgrInfo   *key_eq;			/* [column]: the conflict index's equality */
	FmgrInfo   *key_hash;		/* [column]: a hash that agrees with it */
	int			bulk_wait;		/* upsert: flushes left before its keys are tried as new */
	int			bulk_backoff;	/* upsert: the wait after its last failed attempt */
};

static uint32 row_hash(TableSink *sink, uint32 row);
static bool row_equal(TableSink *sink, uint32 a, uint32 b);

#define SH_PREFIX rowset
#define SH_ELEMENT_TYPE RowEntry
#define SH_KEY_TYPE uint32
#define SH_KEY row
#define SH_HASH_KEY(tb, key) row_hash((TableSink *) (tb)->private_data, key)
#define SH_EQUAL(tb, a, b) row_equal((TableSink *) (tb)->private_data, a, b)
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) a->hash
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

static void grow(TableSink *sink);
static void compact(TableSink *sink);
static void delete_keys(TableSink *sink, SinkFlush *fl, DeadLetterBuffer *dlq);
static void write_range(TableSink *sink, TableSink *rows, bool delete, int from, int to,
						SinkFlush *fl);
static void refuse(TableSink *sink, TableSink *rows, bool delete, SinkRefusal *r,
				   DeadLetterBuffer *dlq, OnError on_error);
static bool is_row_error(ErrorData *edata);
static char *row_as_json(TableSink *sink, int row);
static bool key_has_null(TableSink *sink, int row);
static void prepare_insert(TableSink *sink);
static bool sink_plans_alike(SinkPlan *a, SinkPlan *b);
static SinkBulk *bulk_prepare(TableSink *sink);
static int *key_order(TableSink *sink, SinkBulk *bulk, MemoryContext attempt);
static int	refusal_cmp(const ListCell *a, const ListCell *b);
static void text_values(SinkColumn *col, Datum *values, const bool *nulls, int n);

TableSink *
table_sink_create(JobPlan *plan, MemoryContext parent, bool *failing)
{
	TableSink *sink = MemoryContextAllocZero(parent, sizeof(TableSink));
	SinkPlan   *sp = plan->sink;

	sink->failing = failing;
	sink->plan = sp;
	sink->ctx = AllocSetContextCreate(parent, "mailer sink rows", ALLOCSET_DEFAULT_SIZES);
	sink->values = MemoryContextAllocZero(parent, sizeof(Datum *) * sp->ncolumns);
	sink->nulls = MemoryContextAllocZero(parent, sizeof(bool *) * sp->ncolumns);
	if (sp->upsert)
	{
		/* a context of its own: the memory context dumps show the table's size */
		sink->keys = rowset_create(AllocSetContextCreate(parent, "mailer sink keys",
														 ALLOCSET_SMALL_SIZES),
								   1024, sink);
		sink->key_eq = MemoryContextAllocZero(parent, sizeof(FmgrInfo) * sp->ncolumns);
		sink->key_hash = MemoryContextAllocZero(parent, sizeof(FmgrInfo) * sp->ncolumns);
		for (int c = 0; c < sp->ncolumns; c++)
		{
			SinkColumn *col = &sp->columns[c];

			if (col->is_key && OidIsValid(col->key_eq_proc))
				fmgr_info_cxt(col->key_eq_proc, &sink->key_eq[c], parent);
			if (col->is_key && OidIsValid(col->key_hash_proc))
				fmgr_info_cxt(col->key_hash_proc, &sink->key_hash[c], parent);
		}
	}
	prepare_insert(sink);
	return sink;
}

static void
prepare_insert(TableSink *sink)
{
	SinkPlan   *sp = sink->plan;

	SPI_connect();
	if (sink->insert_plan)
		SPI_freeplan(sink->insert_plan);
	sink->insert_plan = SPI_prepare(sp->insert_sql, sp->ncolumns, sp->param_types);
	if (sink->insert_plan == NULL)
		elog(ERROR, "could not prepare the sink statement: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(sink->insert_plan);
	if (sink->delete_plan)
		SPI_freeplan(sink->delete_plan);
	sink->delete_plan = NULL;
	if (sp->delete_sql)
	{
		sink->delete_plan = SPI_prepare(sp->delete_sql, sp->ncolumns, sp->param_types);
		if (sink->delete_plan == NULL)
			elog(ERROR, "could not prepare the sink delete: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(sink->delete_plan);
	}
	SPI_finish();
}

bool
table_sink_bind(TableSink *sink, JobPlan *plan)
{
	SinkPlan   *sp = sink->plan;
	Oid			relid = plan_sink_relid(&plan->spec->sink, RowExclusiveLock);
	Oid			index = InvalidOid;
	MemoryContext old;
	SinkPlan   *now;

	if (!OidIsValid(relid))
		return false;
	if (sp->upsert)
	{
		/* An upsert job never appends: rows of one key would pile up. */
		index = plan_sink_key_index(&plan->spec->sink, relid);
		if (!OidIsValid(index))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("sink table %s has no conflict key for the job's upsert", sp->relname),
					 errdetail("The job upserts on the primary key or the unique index of its sink.key; it no longer exists."),
					 errhint("Create the primary key or unique index again: the job retries and goes on from its last checkpoint. To append, create a job with \"mode\": \"append\".")));
	}
	if (relid == sp->relid && index == sp->key_index)
		return true;

	/*
	 * Another table has the name now, or another index decides conflicts:
	 * the rows buffered fit only if the sink compiles to the same columns
	 * and the same key equality (rows were merged by it) against it.
	 */
	old = MemoryContextSwitchTo(GetMemoryChunkContext(sink));
	now = plan_sink_again(plan);
	MemoryContextSwitchTo(old);
	if (!sink_plans_alike(sp, now) && relid == sp->relid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the conflict key of sink table %s changed", sp->relname),
				 errdetail("The rows the job holds were merged per key as the index it replaced compares keys."),
				 errhint("The job's worker restarts from its last checkpoint and merges rows as the new index does.")));
	if (!sink_plans_alike(sp, now))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sink table %s was replaced by a table of other columns", sp->relname),
				 errdetail("The rows the job holds were made for the columns of the table it replaced."),
				 errhint("The job's worker restarts from its last checkpoint and writes into the new table.")));
	sp->delete_sql = now->delete_sql;
	prepare_insert(sink);
	/* Only once the statement is ready: a failure above binds again next time. */
	sp->relid = now->relid;
	sp->key_index = now->key_index;
	return true;
}

/* The same columns, keys and statement: rows made for one fit the other. */
static bool
sink_plans_alike(SinkPlan *a, SinkPlan *b)
{
	if (a->ncolumns != b->ncolumns || a->upsert != b->upsert || a->nkeys != b->nkeys ||
		a->key_nulls_distinct != b->key_nulls_distinct || strcmp(a->insert_sql, b->insert_sql) != 0)
		return false;
	for (int c = 0; c < a->ncolumns; c++)
	{
		SinkColumn *x = &a->columns[c];
		SinkColumn *y = &b->columns[c];

		if (strcmp(x->name, y->name) != 0 || x->type != y->type || x->typmod != y->typmod ||
			x->slot != y->slot || x->is_key != y->is_key || (x->cast == NULL) != (y->cast == NULL) ||
			x->key_eq_proc != y->key_eq_proc || x->key_hash_proc != y->key_hash_proc ||
			x->key_hash_image != y->key_hash_image ||
			x->key_collation != y->key_collation)
			return false;
	}
	return true;
}

void
table_sink_project(TableSink *sink, ExprRuntime *out_rt, Record *rec, Datum *values, bool *nulls)
{
	SinkPlan   *sp = sink->plan;

	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];

		if (col->cast)
			values[c] = expr_eval(col->cast, out_rt, rec, &nulls[c]);
		else
		{
			values[c] = rec->values[col->slot];
			nulls[c] = rec->isnull[col->slot];
		}
	}
}

void
table_sink_add(TableSink *sink, Datum *values, bool *nulls, const char *topic, int32 partition,
				int64 offset)
{
	SinkPlan   *sp = sink->plan;
	MemoryContext old = MemoryContextSwitchTo(sink->ctx);
	int			row;

	if (sink->nrows == sink->capacity)
		grow(sink);
	row = sink->nrows;
	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];

		sink->nulls[c][row] = nulls[c];
		sink->values[c][row] = nulls[c] ? (Datum) 0 :
			datumCopy(values[c], col->typbyval, col->typlen);
	}
	sink->origins[row].topic = topic;
	sink->origins[row].partition = partition;
	sink->origins[row].offset = offset;
	sink->dropped[row] = false;

	/* A null key matches no row in the index (unless NULLS NOT DISTINCT). */
	if (sink->keys && !(sp->key_nulls_distinct && key_has_null(sink, row)))
	{
		bool		found;
		RowEntry   *entry = rowset_insert(sink->keys, (uint32) row, &found);

		if (found)
		{
			/* The newest row of a key replaces the one buffered before. */
			for (int c = 0; c < sp->ncolumns; c++)
			{
				if (!sink->nulls[c][entry->row] && !sp->columns[c].typbyval)
					pfree(DatumGetPointer(sink->values[c][entry->row]));
				sink->values[c][entry->row] = sink->values[c][row];
				sink->nulls[c][entry->row] = sink->nulls[c][row];
			}
			sink->origins[entry->row] = sink->origins[row];
			if (sink->dropped[entry->row])
			{
				sink->dropped[entry->row] = false;
				sink->ndropped--;
			}
			MemoryContextSwitchTo(old);
			return;
		}
	}
	sink->nrows++;
	MemoryContextSwitchTo(old);
}

void
table_sink_delete(TableSink *sink, Datum *values, bool *nulls)
{
	SinkPlan   *sp = sink->plan;

	Assert(sp->upsert);
	if (sink->deletes == NULL)
	{
		/* The keys to delete are kept as rows of a buffer of their own. */
		MemoryContext parent = GetMemoryChunkContext(sink);

		sink->deletes = MemoryContextAllocZero(parent, sizeof(TableSink));
		sink->deletes->plan = sp;
		sink->deletes->ctx = AllocSetContextCreate(parent, "mailer sink deletes", ALLOCSET_DEFAULT_SIZES);
		sink->deletes->values = MemoryContextAllocZero(parent, sizeof(Datum *) * sp->ncolumns);
		sink->deletes->nulls = MemoryContextAllocZero(parent, sizeof(bool *) * sp->ncolumns);
		sink->deletes->keys = rowset_create(parent, 256, sink->deletes);
		sink->deletes->key_eq = sink->key_eq;
		sink->deletes->key_hash = sink->key_hash;
	}
	table_sink_add(sink->deletes, values, nulls, NULL, -1, -1);

	/* A buffered row of that key must not be written after the delete. */
	if (sink->keys)
	{
		RowEntry   *entry;

		if (sink->nrows == sink->capacity)
		{
			MemoryContext old = MemoryContextSwitchTo(sink->ctx);

			grow(sink);
			MemoryContextSwitchTo(old);
		}
		/* The key goes in the first unused row, only to be looked up. */
		for (int c = 0; c < sp->ncolumns; c++)
		{
			sink->values[c][sink->nrows] = values[c];
			sink->nulls[c][sink->nrows] = nulls[c];
		}
		entry = sp->key_nulls_distinct && key_has_null(sink, sink->nrows) ? NULL :
			rowset_lookup(sink->keys, (uint32) sink->nrows);
		if (entry && !sink->dropped[entry->row])
		{
			sink->dropped[entry->row] = true;
			sink->ndropped++;
		}
	}
}

int
table_sink_rows(TableSink *sink)
{
	return sink->nrows;
}

bool
table_sink_full(TableSink *sink)
{
	Size		bytes = MemoryContextMemAllocated(sink->ctx, true);

	if (sink->deletes)
		bytes += MemoryContextMemAllocated(sink->deletes->ctx, true);
	return bytes >= SINK_MAX_BYTES;
}

int64
table_sink_flush(TableSink *sink, DeadLetterBuffer *dlq, OnError on_error, bool last,
				  int64 *rejected)
{
	SinkFlush	fl = {NULL, on_error, 0, NIL, NULL};
	MemoryContext old;
	ListCell   *lc;

	*rejected = 0;
	fl.attempt = AllocSetContextCreate(sink->ctx, "mailer sink statement", ALLOCSET_DEFAULT_SIZES);
	if ((sink->deletes && sink->deletes->nrows > 0) || sink->nrows > sink->ndropped)
	{
		/*
		 * SET CONSTRAINTS ALL IMMEDIATE: a deferred constraint fails in the
		 * statement, where the halving finds its rows, not at COMMIT.
		 */
		ConstraintsSetStmt *immediate = makeNode(ConstraintsSetStmt);

		immediate->constraints = NIL;
		immediate->deferred = false;
		AfterTriggerSetState(immediate);
	}
	if (sink->deletes && sink->deletes->nrows > 0)
		delete_keys(sink, &fl, dlq);
	if (sink->ndropped > 0)
		compact(sink);
	if (sink->nrows > 0)
	{
		SPI_connect();
		fl.bulk = bulk_prepare(sink);
		sink->order = fl.bulk && sink->plan->upsert ? key_order(sink, fl.bulk, fl.attempt) : NULL;
		old = MemoryContextSwitchTo(fl.attempt);
		for (int from = 0; from < sink->nrows; from += SINK_CHUNK_ROWS)
			write_range(sink, sink, false, from, Min(from + SINK_CHUNK_ROWS, sink->nrows), &fl);
		MemoryContextSwitchTo(old);
		SPI_finish();
		sink->order = NULL;
		/* the dead letters in the order the rows came */
		list_sort(fl.refused, refusal_cmp);
		if (fl.bulk)
		{
			/* An upsert's keys were all new: the next flush tries them as new again. */
			sink->bulk_backoff = 0;
			TEST_POINT("sink_after_bulk_insert");
		}
	}

	/*
	 * Every row refused alone, for the same reason: the table's doing (see
	 * the file's header), not the rows'.  One row tells nothing, and the
	 * last checkpoint of a finished source would be retried for good.
	 */
	if (!last && sink->nrows >= 2 && list_length(fl.refused) == sink->nrows)
	{
		SinkRefusal *first = linitial(fl.refused);
		bool		same = true;

		foreach(lc, fl.refused)
			if (((SinkRefusal *) lfirst(lc))->sqlerrcode != first->sqlerrcode)
				same = false;
		if (same)
			ereport(ERROR,
					(errcode(first->sqlerrcode),
					 errmsg("table %s refused every row of the checkpoint: %s", sink->plan->relname,
							first->message),
					 errdetail("Each of the %d rows failed alone with SQLSTATE %s; that is taken for a change of the table (a policy, a constraint, missing parent rows), not bad rows, so none is dead-lettered.",
							   sink->nrows, unpack_sql_state(first->sqlerrcode)),
					 errhint("Fix the table: the job retries from its last checkpoint. Rows that are bad themselves are dead-lettered once a checkpoint also holds a row the table accepts.")));
	}
	foreach(lc, fl.refused)
	{
		(*rejected)++;
		refuse(sink, sink, false, lfirst(lc), dlq, on_error);
	}
	/* The rows, their arrays and the statements' memory: dead letters keep copies. */
	MemoryContextReset(sink->ctx);
	sink->nrows = 0;
	sink->capacity = 0;
	sink->ndropped = 0;
	if (sink->keys)
		rowset_reset(sink->keys);
	return fl.written;
}

/* A row's place in the buffer: the i-th row to write. */
static inline int
row_at(TableSink *rows, int i)
{
	return rows->order ? rows->order[i] : i;
}

/* key_order's sort: the conflict index's leading columns that the sink writes. */
typedef struct KeySort
{
	TableSink  *sink;
	SinkBulk   *bulk;
	int			nkeys;
	int		   *column;			/* [index column]: the sink column */
	SortSupportData *ssup;		/* [index column] */
	int		   *order;			/* the result, in sink->ctx; NULL: as buffered */
} KeySort;

static int
key_cmp(const void *a, const void *b, void *arg)
{
	KeySort    *ks = arg;
	int			ra = *(const int *) a;
	int			rb = *(const int *) b;

	CHECK_FOR_INTERRUPTS();
	for (int i = 0; i < ks->nkeys; i++)
	{
		int			c = ks->column[i];
		int			cmp = ApplySortComparator(ks->sink->values[c][ra], ks->sink->nulls[c][ra],
											  ks->sink->values[c][rb], ks->sink->nulls[c][rb],
											  &ks->ssup[i]);

		if (cmp != 0)
			return cmp;
	}
	return ra - rb;
}

/*
 * Whether the order of the rows could show in what is written, on a table
 * fit for the bulk path (no trigger, rule, policy, default or CHECK that
 * reads the table): a volatile default of a column the sink does not write
 * (a serial's nextval draws in row order), or a unique or exclusion index
 * besides the conflict index (which of two clashing rows is refused).
 */
static bool
order_may_show(Relation rel, SinkBulk *bulk, Oid key_index)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	bool		shows = false;

	for (int a = 0; a < bulk->natts && !shows; a++)
		if (bulk->defaults[a] && contain_volatile_functions((Node *) bulk->defaults[a]))
			shows = true;
	foreach(lc, indexes)
	{
		HeapTuple	tuple;
		Form_pg_index index;

		if (shows || lfirst_oid(lc) == key_index)
			continue;
		tuple = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));
		if (!HeapTupleIsValid(tuple))
			elog(ERROR, "cache lookup failed for index %u", lfirst_oid(lc));
		index = (Form_pg_index) GETSTRUCT(tuple);
		shows = index->indisunique || index->indisexclusion;
		ReleaseSysCache(tuple);
	}
	list_free(indexes);
	return shows;
}

/* key_order's work, in a subtransaction: ks->order, or NULL. */
static void
key_order_run(void *arg)
{
	KeySort    *ks = arg;
	TableSink  *sink = ks->sink;
	SinkPlan   *sp = sink->plan;
	Relation	rel = table_open(sp->relid, RowExclusiveLock);
	Relation	index = index_open(sp->key_index, AccessShareLock);

	if (index->rd_index->indrelid == sp->relid && index->rd_rel->relam == BTREE_AM_OID &&
		RelationGetNumberOfBlocks(index) >= SINK_SORT_MIN_INDEX_BLOCKS &&
		!order_may_show(rel, ks->bulk, sp->key_index))
	{
		int			nkeyatts = IndexRelationGetNumberOfKeyAttributes(index);

		ks->column = palloc(sizeof(int) * nkeyatts);
		ks->ssup = palloc0(sizeof(SortSupportData) * nkeyatts);
		for (; ks->nkeys < nkeyatts; ks->nkeys++)
		{
			int			i = ks->nkeys;
			AttrNumber	attnum = index->rd_index->indkey.values[i];
			int16		option = index->rd_indoption[i];
			SortSupport ssup = &ks->ssup[i];
			int			c;

			/*
			 * An expression, or a column the sink does not write: the order
			 * ends there.  The bulk path's view maps the table's columns to
			 * the sink's, whose values it found of the column's type.
			 */
			if (attnum <= 0 || attnum > ks->bulk->natts)
				break;
			c = ks->bulk->column[attnum - 1];
			if (c < 0 || !sp->columns[c].is_key)
				break;
			ks->column[i] = c;
			ssup->ssup_cxt = CurrentMemoryContext;
			ssup->ssup_collation = index->rd_indcollation[i];
			ssup->ssup_nulls_first = (option & INDOPTION_NULLS_FIRST) != 0;
			ssup->ssup_attno = i + 1;
			PrepareSortSupportFromIndexRel(index, (option & INDOPTION_DESC) ?
										   BTGreaterStrategyNumber : BTLessStrategyNumber, ssup);
		}
	}
	if (ks->nkeys > 0)
	{
		int		   *order = MemoryContextAlloc(sink->ctx, sizeof(int) * sink->nrows);

		for (int r = 0; r < sink->nrows; r++)
			order[r] = r;
		qsort_arg(order, sink->nrows, sizeof(int), key_cmp, ks);
		ks->order = order;
	}
	index_close(index, NoLock);
	table_close(rel, NoLock);
}

/*
 * An upsert's rows in its conflict index's order, or NULL (as buffered),
 * when they are tried as new (bulk, the bulk path's view of the table).
 * Each chunk's index inserts then go down the tree side by side, each to
 * the leaf the one before left in the cache, not to a random one.  That
 * pays once the index is larger than the cache: the sort costs about a
 * microsecond a row, and an index that fits takes random inserts as fast
 * (docs/ARCHITECTURE.md, "The sink buffer").  A buffer holds one row per
 * key, and the table has nothing that would see the order (the bulk
 * path's conditions, order_may_show): the rows written are the same.  A
 * comparison that fails (a data error) leaves the rows as they came.
 */
static int *
key_order(TableSink *sink, SinkBulk *bulk, MemoryContext attempt)
{
	KeySort		ks = {sink, bulk, 0, NULL, NULL, NULL};
	ErrorData  *edata;

	if (sink->nrows < 2)
		return NULL;
	edata = guard_try(key_order_run, &ks, attempt);
	MemoryContextReset(attempt);
	return edata ? NULL : ks.order;
}

/* Refused rows in the buffer's order (key_order may have written them in another). */
static int
refusal_cmp(const ListCell *a, const ListCell *b)
{
	int			ra = ((SinkRefusal *) lfirst(a))->row;
	int			rb = ((SinkRefusal *) lfirst(b))->row;

	return (ra > rb) - (ra < rb);
}

/* Leave out the rows deleted after they were buffered. */
static void
compact(TableSink *sink)
{
	SinkPlan   *sp = sink->plan;
	int			kept = 0;

	for (int r = 0; r < sink->nrows; r++)
	{
		if (sink->dropped[r])
			continue;
		for (int c = 0; c < sp->ncolumns; c++)
		{
			sink->values[c][kept] = sink->values[c][r];
			sink->nulls[c][kept] = sink->nulls[c][r];
		}
		sink->origins[kept] = sink->origins[r];
		sink->dropped[kept] = false;
		kept++;
	}
	sink->nrows = kept;
	sink->ndropped = 0;
}

/*
 * Delete the rows of the keys to delete (plan.c's delete statement), halved
 * like inserts: a row that may not go (a restricting foreign key, a trigger
 * that raises) is refused as a row, and stays.
 */
static void
delete_keys(TableSink *sink, SinkFlush *fl, DeadLetterBuffer *dlq)
{
	TableSink *del = sink->deletes;
	MemoryContext old;
	ListCell   *lc;

	SPI_connect();
	old = MemoryContextSwitchTo(fl->attempt);
	for (int from = 0; from < del->nrows; from += SINK_CHUNK_ROWS)
		write_range(sink, del, true, from, Min(from + SINK_CHUNK_ROWS, del->nrows), fl);
	MemoryContextSwitchTo(old);
	SPI_finish();
	foreach(lc, fl->refused)
		refuse(sink, del, true, lfirst(lc), dlq, fl->on_error);
	list_free(fl->refused);
	fl->refused = NIL;
	fl->written = 0;
	MemoryContextReset(del->ctx);
	del->nrows = 0;
	del->capacity = 0;
	rowset_reset(del->keys);
}

static void
grow(TableSink *sink)
{
	SinkPlan   *sp = sink->plan;
	int			cap = Max(1024, sink->capacity * 2);

	for (int c = 0; c < sp->ncolumns; c++)
	{
		sink->values[c] = sink->capacity ? repalloc(sink->values[c], sizeof(Datum) * cap) :
			palloc(sizeof(Datum) * cap);
		sink->nulls[c] = sink->capacity ? repalloc(sink->nulls[c], sizeof(bool) * cap) :
			palloc(sizeof(bool) * cap);
	}
	sink->origins = sink->capacity ? repalloc(sink->origins, sizeof(SinkOrigin) * cap) :
		palloc(sizeof(SinkOrigin) * cap);
	sink->dropped = sink->capacity ? repalloc(sink->dropped, sizeof(bool) * cap) :
		palloc(sizeof(bool) * cap);
	sink->capacity = cap;
}

typedef struct StatementRun
{
	SPIPlanPtr	plan;
	int			expected;
	Datum	   *params;
	char	   *nulls;
} StatementRun;

static void
run_statement(void *arg)
{
	StatementRun *run = (StatementRun *) arg;
	int			rc = SPI_execute_plan(run->plan, run->params, run->nulls, false, 0);

	if (rc != run->expected)
		elog(ERROR, "sink statement returned %s", SPI_result_code_string(rc));
}

/*
 * The bulk path.  An append sink's rows go into the table the way COPY
 * FROM puts them: table_multi_insert() a thousand at a time (one WAL record
 * per page, the target page kept pinned), then each row's index entries.
 * INSERT ... SELECT FROM unnest() took twice the CPU for the same rows:
 * arrays built and taken apart again, and a heap_insert() with its own WAL
 * record per row.  An upsert's rows go the same way while its keys are new
 * (bulk_attempt_failed).
 *
 * Only where that does exactly what the INSERT would: an ordinary table
 * that is not a partition, without triggers (foreign keys and deferrable
 * constraints are triggers too), rules, row-level security that applies to
 * the owner, stored generated columns, a default or CHECK that might read
 * the table (a volatile function other than the few below: with a thousand
 * rows held back, it would not see the rows before it, as it does in the
 * INSERT), or a sink column that is no longer the column planned
 * (bulk_column_fits).  Any of these: the INSERT.
 * Executor hooks do not see these writes (docs/ARCHITECTURE.md).  The owner's INSERT
 * privilege on the columns (and an upsert's statement's UPDATE and SELECT
 * privileges), NOT NULL and CHECK constraints, unique and
 * exclusion indexes are checked as the executor checks them, and a row
 * they refuse raises the INSERT's error: the halving works unchanged.
 */

/* A volatile function that cannot look at any table. */
static bool
volatile_reads_nothing(Oid func)
{
	switch (func)
	{
		case F_NEXTVAL:
		case F_CLOCK_TIMESTAMP:
		case F_TIMEOFDAY:
		case F_RANDOM:
		case F_GEN_RANDOM_UUID:
			return true;
		default:
			return false;
	}
}

static bool
volatile_may_read(Oid func, void *context)
{
	return func_volatile(func) == PROVOLATILE_VOLATILE && !volatile_reads_nothing(func);
}

static bool may_read_table(Node *node, void *context);

/*
 * A domain's constraints are not in the expression that coerces to it:
 * they are looked up when it runs.  context: the memory context that holds
 * the reference to them until the flush ends.
 */
static bool
domain_may_read_table(Oid type, MemoryContext cxt)
{
	DomainConstraintRef *ref = MemoryContextAllocZero(cxt, sizeof(DomainConstraintRef));
	ListCell   *lc;

	InitDomainConstraintRef(type, ref, cxt, false);
	foreach(lc, ref->constraints)
	{
		DomainConstraintState *con = lfirst(lc);

		if (con->check_expr && may_read_table((Node *) con->check_expr, cxt))
			return true;
	}
	return false;
}

/*
 * Whether an expression the bulk path evaluates ahead of the heap inserts
 * (a default, a CHECK, a domain's CHECK reached through either) might read
 * the table: with a thousand rows held back, it would not see the rows
 * before its own, as it does in the INSERT.
 */
static bool
may_read_table(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (check_functions_in_node(node, volatile_may_read, context))
		return true;
	if (IsA(node, Query) || IsA(node, SubLink))
		return true;
	if (IsA(node, CoerceToDomain) &&
		domain_may_read_table(((CoerceToDomain *) node)->resulttype, (MemoryContext) context))
		return true;
	return expression_tree_walker(node, may_read_table, context);
}

/*
 * Whether attribute att takes sink column col's buffered values as they
 * are.  The values were made, by casts compiled with the plan, for the
 * column the job was planned against; the table can have changed since
 * under the same OID (ALTER COLUMN TYPE, a column dropped and added again,
 * a typmod narrowed, an identity added).  The INSERT, re-planned, then
 * converts the values or fails the checkpoint; the bulk path would store a
 * Datum of one type as another.  A domain's constraints may have changed
 * since the values were checked, and the INSERT checks them again.
 */
static bool
bulk_column_fits(Form_pg_attribute att, SinkColumn *col)
{
	return att->atttypid == col->type && att->atttypmod == col->typmod &&
		att->attcollation == col->collation &&
		att->attidentity != ATTRIBUTE_IDENTITY_ALWAYS && att->attgenerated == '\0' &&
		get_typtype(att->atttypid) != TYPTYPE_DOMAIN;
}

/*
 * An upsert's rows take the bulk path as if every key were new.  A key
 * that exists already fails the chunk's unique index insert, and the
 * subtransaction's rollback takes back the chunk's rows: the chunk, and
 * the rest of the flush, then go through the INSERT ... ON CONFLICT, which
 * updates.  A window's results are new keys, running totals mostly old
 * ones: after a chunk the bulk path failed, the next 1, 2, 4 ... up to 64
 * flushes take the INSERT at once, and a flush that took the bulk path
 * with every key new starts the count again.  Any row error counts: an
 * existing key can raise an exclusion constraint's 23P01 first (indexes
 * are inserted into in OID order), and a row the table refuses for its
 * data fails the next attempt too; the INSERT's halving finds it.
 *
 * The statement's rows are the same as the bulk path's, as long as the
 * table qualifies (bulk_prepare): no trigger, rule or policy, so only the
 * conflict tells INSERT ... ON CONFLICT from INSERT, and a failed attempt
 * leaves what a rolled-back INSERT leaves (dead tuples, sequence values
 * its defaults drew).  The privileges are the statement's own: run_bulk
 * checks its range table.
 */
static void
bulk_attempt_failed(TableSink *sink, SinkFlush *fl)
{
	fl->bulk = NULL;
	sink->bulk_backoff = Min(Max(1, sink->bulk_backoff * 2), SINK_BULK_MAX_WAIT);
	sink->bulk_wait = sink->bulk_backoff;
}

/* The upsert statement's range table: the relations and privileges it checks. */
static List *
statement_rtable(TableSink *sink)
{
	CachedPlan *cplan = SPI_plan_get_cached_plan(sink->insert_plan);
	List	   *rtable = NIL;
	ListCell   *lc;

	if (cplan == NULL)
		elog(ERROR, "the sink statement has no plan");
	foreach(lc, cplan->stmt_list)
		rtable = list_concat(rtable, copyObject(lfirst_node(PlannedStmt, lc)->rtable));
	ReleaseCachedPlan(cplan, CurrentResourceOwner);
	return rtable;
}

/* The bulk path for this flush, or NULL: the INSERT (see above). */
static SinkBulk *
bulk_prepare(TableSink *sink)
{
	SinkPlan   *sp = sink->plan;
	MemoryContext old;
	Relation	rel;
	TupleDesc	desc;
	SinkBulk   *bulk;
	bool	   *found;
	bool		ok;

	if (sp->upsert && sink->bulk_wait > 0)
	{
		sink->bulk_wait--;
		return NULL;
	}
	old = MemoryContextSwitchTo(sink->ctx);
	rel = table_open(sp->relid, RowExclusiveLock);
	desc = RelationGetDescr(rel);
	ok = rel->rd_rel->relkind == RELKIND_RELATION && !rel->rd_rel->relispartition &&
		rel->trigdesc == NULL && !rel->rd_rel->relhasrules &&
		!(desc->constr && desc->constr->has_generated_stored) &&
		check_enable_rls(sp->relid, InvalidOid, true) != RLS_ENABLED;
	bulk = palloc0(sizeof(SinkBulk));
	bulk->relid = sp->relid;
	bulk->natts = desc->natts;
	bulk->column = palloc(sizeof(int) * desc->natts);
	bulk->defaults = palloc0(sizeof(Expr *) * desc->natts);
	found = palloc0(sizeof(bool) * Max(sp->ncolumns, 1));
	for (int a = 0; ok && a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		Node	   *def;

		bulk->column[a] = -1;
		if (att->attisdropped)
			continue;
		for (int c = 0; c < sp->ncolumns; c++)
			if (strcmp(sp->columns[c].name, NameStr(att->attname)) == 0)
				bulk->column[a] = c;
		if (bulk->column[a] >= 0)
		{
			found[bulk->column[a]] = true;
			if (!bulk_column_fits(att, &sp->columns[bulk->column[a]]))
				ok = false;
			bulk->inserted = bms_add_member(bulk->inserted,
											att->attnum - FirstLowInvalidHeapAttributeNumber);
			continue;
		}
		def = build_column_default(rel, att->attnum);
		if (def == NULL)
		{
			/* The INSERT checks a domain's constraints on the NULL it puts there. */
			if (get_typtype(att->atttypid) == TYPTYPE_DOMAIN)
				ok = false;
			continue;
		}
		bulk->defaults[a] = expression_planner((Expr *) def);
		if (may_read_table((Node *) bulk->defaults[a], sink->ctx))
			ok = false;
	}

	/* A column renamed or dropped since: the INSERT fails as it should. */
	for (int c = 0; ok && c < sp->ncolumns; c++)
		if (!found[c])
			ok = false;

	/*
	 * A CHECK is evaluated for a thousand rows before any is in the heap:
	 * one that may read the table would not see the rows before its own.
	 */
	for (int i = 0; ok && desc->constr && i < desc->constr->num_check; i++)
		if (may_read_table(stringToNode(desc->constr->check[i].ccbin), sink->ctx))
			ok = false;
	if (ok && sp->upsert)
		bulk->statement_rtable = statement_rtable(sink);
	table_close(rel, NoLock);
	MemoryContextSwitchTo(old);
	return ok ? bulk : NULL;
}

typedef struct BulkRun
{
	SinkBulk   *bulk;
	TableSink  *rows;
	int			from;
	int			to;
} BulkRun;

/* Rows [from, to) into the table, in the statement's subtransaction. */
static void
run_bulk(void *arg)
{
	BulkRun    *run = (BulkRun *) arg;
	SinkBulk   *bulk = run->bulk;
	TableSink  *rows = run->rows;
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	EState	   *estate;
	ExprContext *econtext;
	Relation	rel;
	ExprState **defaults;
	TupleTableSlot *slots[SINK_BULK_ROWS] = {NULL};
	TupleDesc	slot_desc = NULL;
	BulkInsertState bistate;
	CommandId	cid;
	int			row = run->from;

	rte->rtekind = RTE_RELATION;
	rte->relid = bulk->relid;
	rte->relkind = RELKIND_RELATION;
	rte->rellockmode = RowExclusiveLock;
	rte->requiredPerms = ACL_INSERT;
	rte->insertedCols = bulk->inserted;

	/* The job's owner may write these columns, or the statement fails as the INSERT would. */
	ExecCheckRTPerms(bulk->statement_rtable ? bulk->statement_rtable : list_make1(rte), true);

	estate = CreateExecutorState();
	ExecInitRangeTable(estate, list_make1(rte));
	ExecInitResultRelation(estate, rri, 1);
	rel = rri->ri_RelationDesc;
	/* The INSERT's executor refuses to write in a read-only transaction: so does this. */
	if (XactReadOnly && !rel->rd_islocaltemp)
		PreventCommandIfReadOnly("INSERT");
	CheckValidResultRel(rri, CMD_INSERT);
	ExecOpenIndices(rri, false);
	PushActiveSnapshot(GetTransactionSnapshot());
	estate->es_snapshot = GetActiveSnapshot();
	cid = GetCurrentCommandId(true);
	estate->es_output_cid = cid;
	econtext = GetPerTupleExprContext(estate);
	defaults = palloc0(sizeof(ExprState *) * bulk->natts);
	for (int a = 0; a < bulk->natts; a++)
		if (bulk->defaults[a])
			defaults[a] = ExecInitExpr(bulk->defaults[a], NULL);
	bistate = GetBulkInsertState();

	while (row < run->to)
	{
		int			n = 0;

		for (; row < run->to && n < SINK_BULK_ROWS; row++, n++)
		{
			TupleTableSlot *slot;
			int			at = row_at(rows, row);

			CHECK_FOR_INTERRUPTS();
			if (slots[n] == NULL)
				slots[n] = bulk_slot_create(rel, &slot_desc, &estate->es_tupleTable);
			slot = slots[n];
			ExecClearTuple(slot);
			for (int a = 0; a < bulk->natts; a++)
			{
				int			c = bulk->column[a];

				if (c >= 0)
				{
					slot->tts_values[a] = rows->values[c][at];
					slot->tts_isnull[a] = rows->nulls[c][at];
				}
				else if (defaults[a])
					slot->tts_values[a] = ExecEvalExprSwitchContext(defaults[a], econtext,
																	&slot->tts_isnull[a]);
				else
				{
					slot->tts_values[a] = (Datum) 0;
					slot->tts_isnull[a] = true;
				}
			}
			ExecStoreVirtualTuple(slot);
			/* A CHECK may use tableoid, as it may in the INSERT. */
			slot->tts_tableOid = RelationGetRelid(rel);
			if (rel->rd_att->constr)
				ExecConstraints(rri, slot, estate);
		}
		table_multi_insert(rel, slots, n, cid, 0, bistate);
		for (int i = 0; i < n && rri->ri_NumIndices > 0; i++)
			list_free(ExecInsertIndexTuples(rri, slots[i], estate, false, false, NULL, NIL));
		ResetPerTupleExprContext(estate);
	}

	FreeBulkInsertState(bistate);
	table_finish_bulk_insert(rel, 0);
	PopActiveSnapshot();
	ExecResetTupleTable(estate->es_tupleTable, false);
	ExecCloseResultRelations(estate);
	ExecCloseRangeTableRelations(estate);
	FreeExecutorState(estate);
	/* The statements after this one see its rows, as they see the INSERT's. */
	CommandCounterIncrement();
}

/*
 * Write (or delete) rows [from, to) of rows in one statement, in a
 * subtransaction; halve on a row's error.  Runs in fl->attempt, reset
 * after each statement.
 */
static void
write_range(TableSink *sink, TableSink *rows, bool delete, int from, int to, SinkFlush *fl)
{
	SinkPlan   *sp = sink->plan;
	StatementRun run;
	int			dims[1] = {to - from};
	int			lbs[1] = {1};
	ErrorData  *edata;
	bool		split;

	if (!delete && fl->bulk)
	{
		BulkRun		bulk = {fl->bulk, rows, from, to};

		edata = guard_try(run_bulk, &bulk, fl->attempt);
		if (edata == NULL || !sp->upsert || !is_row_error(edata))
			goto done;
		bulk_attempt_failed(sink, fl);
		MemoryContextReset(fl->attempt);
	}
	run.plan = delete ? sink->delete_plan : sink->insert_plan;
	run.expected = delete ? SPI_OK_DELETE : SPI_OK_INSERT;
	run.params = palloc(sizeof(Datum) * sp->ncolumns);
	run.nulls = palloc(sp->ncolumns);
	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];
		Datum	   *elems;
		bool	   *nulls;

		run.nulls[c] = delete && !col->is_key ? 'n' : ' ';
		if (run.nulls[c] == 'n')
		{
			run.params[c] = (Datum) 0;
			continue;
		}

		/*
		 * construct_md_array() puts the values it detoasts (a short header
		 * included) back into the array it is given: give it a copy, so
		 * that the buffer never points into this attempt's memory.
		 */
		elems = palloc(sizeof(Datum) * (to - from));
		nulls = palloc(sizeof(bool) * (to - from));
		for (int i = from; i < to; i++)
		{
			int			at = row_at(rows, i);

			elems[i - from] = rows->values[c][at];
			nulls[i - from] = rows->nulls[c][at];
		}
		if (col->via_text)
		{
			text_values(col, elems, nulls, to - from);
			run.params[c] = PointerGetDatum(construct_md_array(elems, nulls,
															   1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT));
			continue;
		}
		run.params[c] = PointerGetDatum(construct_md_array(elems, nulls,
														   1, dims, lbs, getBaseType(col->type),
														   col->typlen, col->typbyval, col->typalign));
	}

	edata = guard_try(run_statement, &run, fl->attempt);
done:
	if (edata == NULL)
	{
		if (!delete)
			fl->written += to - from;
		MemoryContextReset(fl->attempt);
		return;
	}
	/* 21000 (a row class): rows a trigger made one key; apart, in order, the last one wins. */
	if (!is_row_error(edata))
		ReThrowError(edata);
	split = to - from > 1;
	if (!split)
	{
		MemoryContext old = MemoryContextSwitchTo(sink->ctx);
		SinkRefusal *r = palloc(sizeof(SinkRefusal));

		r->row = row_at(rows, from);
		r->sqlerrcode = edata->sqlerrcode;
		r->message = pstrdup(edata->message);
		r->text = pstrdup(guard_error_text(edata));
		fl->refused = lappend(fl->refused, r);
		MemoryContextSwitchTo(old);
	}
	MemoryContextReset(fl->attempt);
	if (split)
	{
		int			mid = from + (to - from) / 2;

		write_range(sink, rows, delete, from, mid, fl);
		write_range(sink, rows, delete, mid, to, fl);
	}
}

/* A refused row (of rows), per on_error. */
static void
refuse(TableSink *sink, TableSink *rows, bool delete, SinkRefusal *r, DeadLetterBuffer *dlq,
	   OnError on_error)
{
	SinkPlan   *sp = sink->plan;
	SinkOrigin *origin = &rows->origins[r->row];

	if (on_error == ON_ERROR_FAIL)
	{
		*sink->failing = true;
		ereport(ERROR,
				(errcode(r->sqlerrcode),
				 errmsg(delete ? "table %s refused to delete a row a merged session replaced: %s" :
						"table %s rejected a row: %s", sp->relname, r->message),
				 errdetail("The row: %s%s", row_as_json(rows, r->row),
						   origin->topic ?
						   psprintf(" (from %s partition %d offset " INT64_FORMAT ")",
									origin->topic, origin->partition, origin->offset) : ""),
				 errhint("The job's on_error is \"fail\"; with \"dead_letter\" such rows go to mailer.dead_letters.")));
	}
	if (on_error == ON_ERROR_DEAD_LETTER)
	{
		char	   *json = row_as_json(rows, r->row);
		char	   *error = delete ? psprintf("could not delete the row a merged session replaced: %s",
											  r->text) : r->text;

		dead_letter_add(dlq, origin->topic, origin->partition, origin->offset, NULL, -1, json,
						strlen(json), "sink", error);
	}
}

/*
 * A row that a row-level security policy refuses (WITH CHECK, or USING for
 * ON CONFLICT DO UPDATE) raises 42501, as a missing privilege does, and its
 * message is translated per lc_messages.  The executor raises it in
 * ExecWithCheckOptions, which raises 42501 for nothing else; privileges are
 * refused elsewhere (aclcheck_error).  So the function that raised it tells
 * the two apart, in any language.
 */
static bool
is_policy_violation(ErrorData *edata)
{
	return edata->sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE &&
		edata->funcname != NULL &&
		strcmp(edata->funcname, "ExecWithCheckOptions") == 0;
}

/*
 * Errors about a row's data, as opposed to the table or the server: those
 * of a record (guard.c: 22, 23, 21, 54, a trigger's RAISE or ASSERT), a
 * view's WITH CHECK OPTION, a policy's WITH CHECK.
 */
static bool
is_row_error(ErrorData *edata)
{
	return guard_is_data_error(edata) ||
		edata->sqlerrcode == ERRCODE_WITH_CHECK_OPTION_VIOLATION ||
		is_policy_violation(edata);
}

/* A row as a JSON object of its column values' text, for a dead letter. */
static char *
row_as_json(TableSink *sink, int row)
{
	SinkPlan   *sp = sink->plan;
	const char **names = palloc(sizeof(char *) * sp->ncolumns);
	Oid		   *types = palloc(sizeof(Oid) * sp->ncolumns);
	Datum	   *values = palloc(sizeof(Datum) * sp->ncolumns);
	bool	   *nulls = palloc(sizeof(bool) * sp->ncolumns);

	for (int c = 0; c < sp->ncolumns; c++)
	{
		names[c] = sp->columns[c].name;
		types[c] = sp->columns[c].type;
		values[c] = sink->values[c][row];
		nulls[c] = sink->nulls[c][row];
	}
	return values_to_json(sp->ncolumns, names, types, values, nulls);
}

static bool
key_has_null(TableSink *sink, int row)
{
	SinkPlan   *sp = sink->plan;

	for (int c = 0; c < sp->ncolumns; c++)
		if (sp->columns[c].is_key && sink->nulls[c][row])
			return true;
	return false;
}

/*
 * Rows of one key are found by the conflict index's equality and a hash
 * that agrees with it; a type without such a hash adds nothing to the hash
 * (rows then meet in one bucket, still told apart by the equality).  The
 * rows come from the stream, so the hash is seeded (base/local_hash.h):
 * a column whose equality is its image's by its bytes; another by its
 * type's unseeded hash, finished with the seed, so that values whose
 * hashes agree in all 32 bits still meet (int8's hash folds its halves:
 * that is why int8 and timestamps go by their bytes).
 */
static uint32
row_hash(TableSink *sink, uint32 row)
{
	SinkPlan   *sp = sink->plan;
	uint32		h = 0;

	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];
		uint32		ch;

		if (!col->is_key)
			continue;
		if (sink->nulls[c][row])
			ch = 0x5bd1e995;
		else if (col->key_hash_image || !OidIsValid(col->key_eq_proc))
			ch = local_hash_datum_image(sink->values[c][row], col->typbyval, col->typlen);
		else if (OidIsValid(col->key_hash_proc))
			ch = local_hash_uint64(DatumGetUInt32(FunctionCall1Coll(&sink->key_hash[c], col->key_collation,
																	sink->values[c][row])));
		else
			ch = 0;
		h = hash_combine(h, ch);
	}
	return h;
}

static bool
row_equal(TableSink *sink, uint32 a, uint32 b)
{
	SinkPlan   *sp = sink->plan;

	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];

		if (!col->is_key)
			continue;
		if (sink->nulls[c][a] != sink->nulls[c][b])
			return false;
		if (sink->nulls[c][a])
			continue;
		if (OidIsValid(col->key_eq_proc))
		{
			if (!DatumGetBool(FunctionCall2Coll(&sink->key_eq[c], col->key_collation,
												sink->values[c][a], sink->values[c][b])))
				return false;
		}
		else if (!datum_image_eq(sink->values[c][a], sink->values[c][b], col->typbyval, col->typlen))
			return false;
	}
	return true;
}

/*
 * A column passed as text (SinkColumn.via_text): each value by its type's
 * output function, which the statement's cast reads back.  The settings
 * that shape the text are fixed for it, whatever the job's owner or a
 * function set: every float digit, ISO dates (read back under any
 * DateStyle), intervals with a sign per field (under any IntervalStyle).
 */
static void
text_values(SinkColumn *col, Datum *values, const bool *nulls, int n)
{
	Oid			out;
	bool		varlena;
	FmgrInfo	flinfo;
	int			level = NewGUCNestLevel();

	set_config_option("extra_float_digits", "3", PGC_USERSET, PGC_S_SESSION,
					  GUC_ACTION_SAVE, true, 0, false);
	set_config_option("DateStyle", "ISO", PGC_USERSET, PGC_S_SESSION,
					  GUC_ACTION_SAVE, true, 0, false);
	set_config_option("IntervalStyle", "postgres", PGC_USERSET, PGC_S_SESSION,
					  GUC_ACTION_SAVE, true, 0, false);
	getTypeOutputInfo(col->type, &out, &varlena);
	fmgr_info(out, &flinfo);
	for (int i = 0; i < n; i++)
		if (!nulls[i])
			values[i] = CStringGetTextDatum(OutputFunctionCall(&flinfo, values[i]));
	AtEOXact_GUC(true, level);
}
