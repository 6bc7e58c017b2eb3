/*
 * aggregate.h
 *		Running the aggregates of an "aggregate" step (as the plan compiled
 *		them, plan/aggregate_def.h): count(*), count(e), sum, min, max and
 *		avg, and any other through agg_general.h, as per-key running values
 *		that serialize to bytes for the state backend.
 */
#ifndef AGGREGATE_H
#define AGGREGATE_H

#include "lib/stringinfo.h"

#include "plan/aggregate_def.h"

/* One aggregate's running value for one key (and window). */
typedef struct AggValue
{
	int64		count;			/* values seen (non-null for all but count(*)) */
	union
	{
		int64		i64;
		int128		i128;
		double		f8;
		float		f4;
		Datum		datum;		/* numeric sum, min, max: owned by the value */
	}			v;

	/*
	 * numeric sum and avg: v.i128 is the sum times 10^scale
	 * (operators/numeric_sum.h), or at AGG_SCALE_DATUM v.datum is the sum,
	 * a numeric that did not fit.
	 */
	int32		scale;

	/*
	 * AGG_GENERAL (operators/agg_general.h): v.datum is the transition
	 * value (transnull when null), its serialized bytes, or the key's
	 * inputs; pending is an input that aggregate_store adds to them.
	 */
	bool		transnull;
	struct varlena *pending;
} AggValue;

#define AGG_SCALE_DATUM (-1)

/* Make the value empty (no rows). */
extern void aggregate_init(AggregateDef *agg, AggValue *value);

/*
 * The value that folding one argument into value gives, into *next, value
 * left as is.  May raise an ERROR (an overflow).  A by-reference result may
 * point at arg, at value's own datum or at memory of the current context:
 * aggregate_store makes it the value's own.
 */
extern void aggregate_next(AggregateDef *agg, const AggValue *value, AggValue *next, Datum arg,
						   bool isnull);

/* The value merging 'from' into 'into' gives (merging session windows), into *next, as above. */
extern void aggregate_merge(AggregateDef *agg, const AggValue *into, const AggValue *from,
							AggValue *next);

/*
 * Make *value the *next computed from it: by-reference datums are copied
 * into ctx and the old one freed.  Raises no error but out of memory.
 */
extern void aggregate_store(AggregateDef *agg, AggValue *value, const AggValue *next,
							MemoryContext ctx);

/*
 * Whether the value owns memory out of line (a datum aggregate_store
 * copied, a general aggregate's state): freeing the value alone would
 * leak it.
 */
extern bool aggregate_owns_memory(AggregateDef *agg, const AggValue *value);

/* The result as PostgreSQL would give it, allocated in the current context. */
extern Datum aggregate_result(AggregateDef *agg, AggValue *value, bool *isnull);

/*
 * Append a value's bytes; read them back (advancing *pos, within the len
 * bytes of data) into ctx.
 */
extern void aggregate_serialize(AggregateDef *agg, AggValue *value, StringInfo buf);
extern void aggregate_deserialize(AggregateDef *agg, AggValue *value, const char *data,
								  int len, int *pos, MemoryContext ctx);

#endif							/* AGGREGATE_H */
