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

#include "storage/itemptr.h"
#include "storage/relfilenode.h"

typedef struct MemoryRows MemoryRows;

/* The state rows a checkpoint wrote at the heap level. */
typedef struct MemoryRowsCounts
{
	int64		updated;		/* at their address */
	int64		hot;			/* of those, HOT */
	int64		deleted;		/* at their address */
	int64		inserted;		/* new keys */
} MemoryRowsCounts;

/*
 * Open mailer.memory_state and mailer.memory_undo of the installation for
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
 * An undo row of epoch (memory_undo.h): a key group's keys and their
 * values before it, two bytea[]s, copied.
 */
extern void memory_rows_undo(MemoryRows *mr, int64 epoch, int group, Datum keys, Datum olds);

/*
 * Write what is buffered and close the tables (their locks stay); *counts
 * gets what was written.
 */
extern void memory_rows_end(MemoryRows *mr, MemoryRowsCounts *counts);

#endif							/* MEMORY_ROWS_H */
