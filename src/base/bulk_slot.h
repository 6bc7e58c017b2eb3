/*
 * bulk_slot.h
 *		Slots for the rows of one table written many at a time, as COPY FROM
 *		writes them (table_multi_insert): a batch's slots share one copy of
 *		the table's row descriptor.
 */
#ifndef BULK_SLOT_H
#define BULK_SLOT_H

#include "executor/tuptable.h"
#include "utils/rel.h"

/*
 * A slot for rel's rows, in *tuple_table (an EState's es_tupleTable), as
 * table_slot_create() makes, over *desc: the copy of rel's descriptor that
 * the first call makes, in the current memory context, which must keep it
 * as long as the slots.  *desc starts NULL.
 */
extern TupleTableSlot *bulk_slot_create(Relation rel, TupleDesc *desc, List **tuple_table);

#endif							/* BULK_SLOT_H */
