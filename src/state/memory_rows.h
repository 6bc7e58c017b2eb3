/*
 * memory_rows.h
 *		The memory backend's checkpoint writes at the heap level: a key's row
 *		of mailer.memory_state updated or deleted at its address, new rows
 *		and the undo's rows inserted many at a time.
 *
 * The backend keeps each key's row address (from the load and from the
 * writes after it); an address that no longer holds the key's live row
 * (the table was rewritten, or someone else changed the row) makes the
 * update or delete say no, and the caller writes that key with SQL, which
 * finds the row by its key (a scan: the table has no index).
 *
 * Design: docs/ARCHITECTURE.md, "The memory backend's tables".
 */
#ifndef MEMORY_ROWS_H
#define MEMORY_ROWS_H

#include "access/transam.h"
#include "storage/block.h"
#include "storage/itemptr.h"
#include "storage/relfilenode.h"

typedef struct MemoryRows MemoryRows;

/*
 * Pages of a table that hold rows the backend deleted: of
 * mailer.memory_state, where a checkpoint's deletes and its updates that
 * moved a row off its page left them; of mailer.memory_undo, where an undo
 * cleanup deleted rows.  Each with the transaction that deleted them.  A
 * later checkpoint prunes those no snapshot sees the rows on any more and
 * gives their free space to the free space map, where inserts look for
 * room, so that its new rows fill them instead of extending the table
 * (of the room pruning makes, only a vacuum tells the map).  The caller
 * keeps the lists between checkpoints; docs/ARCHITECTURE.md, "The memory
 * backend's tables".
 */
typedef struct FreedPage
{
	BlockNumber block;
	FullTransactionId xid;		/* full: an entry may wait through wraparound */
} FreedPage;

typedef struct FreedPages
{
	FreedPage  *pages;			/* allocated in the context current at init */
	int			n;
	int			cap;
} FreedPages;

extern void freed_pages_init(FreedPages *f);
/* A page the current transaction deleted rows on (it has an xid: it deleted them). */
extern void freed_pages_add(FreedPages *f, BlockNumber block);

/* The state rows a checkpoint wrote at the heap level. */
typedef struct MemoryRowsCounts
{
	int64		updated;		/* at their address */
	int64		hot;			/* of those, HOT */
	int64		deleted;		/* at their address */
	int64		inserted;		/* new keys */
} MemoryRowsCounts;

/*
 * Open mailer.memory_state, memory_undo and memory_redo of the installation for
 * one checkpoint's writes, locked until the transaction ends.  NULL when
 * they are not the plain heap tables the direct writes are for (a column,
 * a default, a CHECK constraint, a trigger, a rule, row security or a
 * child table added since): then every write is SQL.  Until
 * memory_rows_end the caller runs as the catalog's writer (catalog.h).
 * *node gets the state table's storage: one that changed since the
 * addresses were taken (VACUUM FULL, CLUSTER, TRUNCATE) means they are all
 * stale.
 */
extern MemoryRows *memory_rows_begin(Oid ext_oid, int64 job_id, RelFileNode *node);

/*
 * Prune the pages of both lists whose rows no snapshot sees any more and
 * record their free space (they leave the lists; the others stay, and so
 * do those past a checkpoint's bound, REUSE_MAX_PAGES a table), then
 * collect into state the pages this checkpoint's writes leave dead rows
 * on.  The caller empties the lists when mailer.memory_state was
 * rewritten (its pages are another storage's); a rewrite of
 * mailer.memory_undo only makes some of the undo list's pages prunes of
 * others, which is no harm.
 */
extern void memory_rows_reuse(MemoryRows *mr, FreedPages *state, FreedPages *undo);

/* The state table's storage now (the caller's transaction has it locked). */
extern RelFileNode memory_rows_node(Oid ext_oid);

/*
 * Update the key's row at *tid to val (*tid then gets the new address), or
 * delete it.  false: *tid does not hold the key's live row, nothing was
 * written.
 */
extern bool memory_rows_update(MemoryRows *mr, ItemPointer tid, const char *key, int klen,
							   int group, const char *val, int vlen);
extern bool memory_rows_delete(MemoryRows *mr, ItemPointer tid, const char *key, int klen);

/* A new key's row; *dest gets its address by memory_rows_end. */
extern void memory_rows_insert(MemoryRows *mr, const char *key, int klen, int group,
							   const char *val, int vlen, ItemPointer dest);

/*
 * An undo or redo row of epoch (memory_undo.h): a key group's keys and
 * their values before it (undo) or after it (redo), two bytea[]s, copied.
 */
extern void memory_rows_packed(MemoryRows *mr, bool redo, int64 epoch, int group, Datum keys,
							   Datum values);

/*
 * Write what is buffered and close the tables (their locks stay); *counts
 * gets what was written.
 */
extern void memory_rows_end(MemoryRows *mr, MemoryRowsCounts *counts);

#endif							/* MEMORY_ROWS_H */
