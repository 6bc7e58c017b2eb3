/*
 * agg_general.h
 *		Running any aggregate through the functions pg_aggregate names for
 *		it (plan/aggregate_call.h): aggregate.c's AGG_GENERAL case.  The
 *		calls follow aggregate.h's contract: next and merge compute a value
 *		apart from the state and may fail, store keeps it and does not.
 *
 * A record's values for one aggregate (its arguments, ORDER BY
 * expressions) travel packed in one bytea, null when FILTER drops the
 * record: agg_general_pack makes it where the record is, which may be
 * another subtask than the one that keeps the key (runtime/shuffle.c).
 */
#ifndef AGG_GENERAL_H
#define AGG_GENERAL_H

#include "operators/aggregate.h"

extern Datum agg_general_pack(AggregateDef *agg, ExprRuntime *rt, Record *rec, bool *isnull);

extern void agg_general_next(AggregateDef *agg, const AggValue *value, AggValue *next,
							 Datum packed);
extern void agg_general_merge(AggregateDef *agg, const AggValue *into, const AggValue *from,
							  AggValue *next);
extern void agg_general_store(AggregateDef *agg, AggValue *value, const AggValue *next,
							  MemoryContext ctx);
extern Datum agg_general_result(AggregateDef *agg, AggValue *value, bool *isnull);
extern void agg_general_serialize(AggregateDef *agg, AggValue *value, StringInfo buf);
extern void agg_general_deserialize(AggregateDef *agg, AggValue *value, const char *data,
									int len, int *pos, MemoryContext ctx);

#endif							/* AGG_GENERAL_H */
