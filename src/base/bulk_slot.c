/*
 * bulk_slot.c
 *		Slots that do not pin their table's descriptor (bulk_slot.h).
 *
 * table_slot_create() pins the relation's descriptor once per slot, and
 * each pin is an entry in the resource owner's array of descriptors.  The
 * same pointer a thousand times hashes to one place in that array, so
 * remembering the pins and forgetting them again probed on linearly:
 * quadratic in the slots of a batch, 8.5% of the append job's worker at
 * 5M orders (BENCHMARKS.md, "The append path's slots").  A copy of the
 * descriptor is not reference-counted, and slots over it pin nothing.  It
 * is a whole copy, constraints and the defaults of columns added later
 * included, so that a slot over it reads a stored row as one over the
 * relation's would.
 */
#include "postgres.h"

#include "access/tableam.h"
#include "executor/executor.h"

#include "base/bulk_slot.h"

TupleTableSlot *
bulk_slot_create(Relation rel, TupleDesc *desc, List **tuple_table)
{
	if (*desc == NULL)
		*desc = CreateTupleDescCopyConstr(RelationGetDescr(rel));
	return ExecAllocTableSlot(tuple_table, *desc, table_slot_callbacks(rel));
}
