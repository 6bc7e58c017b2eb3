/*
 * memory_undo.c
 *		The memory backend's undo packed into rows of about a page
 *		(memory_undo.h).
 *
 * mailer.memory_undo is made with toast_tuple_target at its largest, so
 * that a row of up to a page is stored as it is: neither compressed (CPU
 * at every checkpoint) nor split into TOAST chunks (a tuple and an index
 * entry each, what the packing saves).  A row is cut below that, keys,
 * values and the arrays' overhead counted; an entry larger than a row by
 * itself gets a row of its own, which TOAST then stores as any large value.
 *
 * Design: docs/ARCHITECTURE.md, "The memory backend's tables".
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "base/bytea.h"
#include "state/memory_undo.h"

/*
 * Bytes of keys and values, each with its array header and alignment, per
 * row: with the arrays' own headers and null bitmaps (at most about 300
 * bytes) and the row's other columns, a row stays under a page's largest
 * tuple (8160 bytes), the table's toast_tuple_target.
 */
#define UNDO_ROW_BYTES	7600

/* Entries per row: each costs at least 8 bytes (a 1-byte key, no value). */
#define UNDO_ROW_ENTRIES	(UNDO_ROW_BYTES / 8)

struct UndoPacker
{
	UndoRowWriter write;
	void	   *arg;
	MemoryContext ctx;			/* the row's byteas and arrays; reset after it is written */
	int			group;			/* of the entries held */
	int			n;
	Size		bytes;
	int64		rows;
	Datum		keys[UNDO_ROW_ENTRIES];
	Datum		olds[UNDO_ROW_ENTRIES];
	bool		absent[UNDO_ROW_ENTRIES];
};

UndoPacker *
undo_packer_create(UndoRowWriter write, void *arg)
{
	UndoPacker *up = palloc(sizeof(UndoPacker));

	up->write = write;
	up->arg = arg;
	up->ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer memory undo row", ALLOCSET_DEFAULT_SIZES);
	up->group = -1;
	up->n = 0;
	up->bytes = 0;
	up->rows = 0;
	return up;
}

static void
write_row(UndoPacker *up)
{
	MemoryContext old;

	if (up->n == 0)
		return;
	old = MemoryContextSwitchTo(up->ctx);
	up->write(up->arg, up->group, mailer_bytea_array(up->keys, NULL, up->n),
			  mailer_bytea_array(up->olds, up->absent, up->n));
	MemoryContextSwitchTo(old);
	MemoryContextReset(up->ctx);
	up->rows++;
	up->n = 0;
	up->bytes = 0;
}

void
undo_packer_add(UndoPacker *up, int group, const char *key, int klen, const char *old, int oldlen)
{
	Size		cost = INTALIGN(VARHDRSZ + klen) + (old ? INTALIGN(VARHDRSZ + oldlen) : 0);
	MemoryContext mcx;

	Assert(up->n == 0 || group >= up->group);
	if (up->n > 0 && (group != up->group || up->bytes + cost > UNDO_ROW_BYTES || up->n == UNDO_ROW_ENTRIES))
		write_row(up);
	mcx = MemoryContextSwitchTo(up->ctx);
	up->group = group;
	up->keys[up->n] = PointerGetDatum(mailer_bytea(key, klen));
	up->absent[up->n] = old == NULL;
	up->olds[up->n] = old ? PointerGetDatum(mailer_bytea(old, oldlen)) : (Datum) 0;
	MemoryContextSwitchTo(mcx);
	up->n++;
	up->bytes += cost;
}

int64
undo_packer_finish(UndoPacker *up)
{
	int64		rows;

	write_row(up);
	rows = up->rows;
	MemoryContextDelete(up->ctx);
	pfree(up);
	return rows;
}
