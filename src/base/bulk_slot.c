/*
 * bulk_slot.c
 *		Slots that do not pin their table's descriptor (bulk_slot.h).
 *
 * table_slot_create() pins the relation's descriptor once per slot, and
 * each pin is an entry in the resource owner's array of descriptors.  The
 * same pointer a thousand times hashes to one place in that array, so
 * remembering the pins and forgetting them again probed on linearly:
 * quadratic in the slots of a batch, 8.5% of the append job's worker at
 * 5M orders (BENCHMARKS.md, "Per-record speed (issue 16): the sink's
 * slots").  A copy of the descriptor is not reference-counted, and slots
 * over it pin nothing.  It has the table's columns and types, all that a
 * slot reads; NOT NULL, defaults and CHECK are the relation's, where the
 * executor's checks look for them.
 */
#include "postgres.h"

#include "access/tableam.h"
#include "executor/executor.h"

#include "base/bulk_slot.h"

TupleTableSlot *
bulk_slot_create(Relation rel, TupleDesc *desc, List **tuple_table)
{
	if (*desc == NULL)
		*desc = CreateTupleDescCopy(RelationGetDescr(rel));
	return ExecAllocTableSlot(tuple_table, *desc, table_slot_callbacks(rel));
}
