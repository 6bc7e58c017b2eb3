/*
 * aggregate.c
 *		Running aggregates with PostgreSQL's semantics (aggregate.h).
 *
 * Sums and averages follow PostgreSQL's own choices of result type and
 * overflow behaviour: sum(int4) is a bigint that errors on overflow,
 * sum(int8) and avg of integers are numeric, float sums stay float.
 * min and max work for any type with a btree ordering.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/int.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/float.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/typcache.h"

#include "operators/agg_general.h"
#include "operators/aggregate.h"
#include "operators/numeric_sum.h"
#include "state/serial.h"

static bool state_is_datum(AggregateDef *agg);
static bool sums_numeric(AggregateDef *agg);
static bool holds_datum(AggregateDef *agg, const AggValue *value);
static Datum numeric_value(const AggValue *value);
static Datum int128_to_numeric_datum(int128 v);

/* sum of int2 and int4 is a bigint, as in PostgreSQL: an overflow is an ERROR. */
static inline void
add_int8(AggregateDef *agg, int64 *sum, int64 v)
{
	if (pg_add_s64_overflow(*sum, v, sum))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("bigint out of range in %s", agg->text)));
}

void
aggregate_init(AggregateDef *agg, AggValue *value)
{
	memset(value, 0, sizeof(AggValue));
}

/*
 * A record's changes are computed first, into values apart from the state
 * (aggregate_next, aggregate_merge), and stored only once every one of them
 * has been computed (aggregate_store): a record that raises an error, an
 * overflow say, has changed nothing.  By-reference results stay in the
 * current (per-batch) memory until stored.
 */
void
aggregate_next(AggregateDef *agg, const AggValue *value, AggValue *next, Datum arg, bool isnull)
{
	AggValue	one = {0};

	if (isnull && agg->impl != AGG_COUNT_STAR)
	{
		*next = *value;
		return;
	}
	if (agg->impl == AGG_GENERAL)
	{
		agg_general_next(agg, value, next, arg);
		return;
	}

	/* The running value of this one argument, merged in. */
	one.count = 1;
	switch (agg->impl)
	{
		case AGG_COUNT_STAR:
		case AGG_COUNT:
			break;
		case AGG_SUM_INT:
			one.v.i64 = agg->arg_type == INT2OID ? DatumGetInt16(arg) : DatumGetInt32(arg);
			break;
		case AGG_SUM_INT8:
		case AGG_AVG_INT:
			one.v.i128 = agg->arg_type == INT8OID ? DatumGetInt64(arg) :
				agg->arg_type == INT2OID ? DatumGetInt16(arg) : DatumGetInt32(arg);
			break;
		/*
		 * A running float sum starts from zero: 0 + x, so that a first value
		 * of -0 sums to 0 as it always has (merge would copy it as is).
		 */
		case AGG_SUM_FLOAT4:
			one.v.f4 = float4_pl(0.0f, DatumGetFloat4(arg));
			break;
		case AGG_SUM_FLOAT8:
		case AGG_AVG_FLOAT:
			one.v.f8 = float8_pl(0.0, agg->arg_type == FLOAT4OID ? DatumGetFloat4(arg) : DatumGetFloat8(arg));
			break;
		case AGG_SUM_NUMERIC:
		case AGG_AVG_NUMERIC:
			/* A sum already past the scaled form adds the argument as it is: no parse, no rebuild */
			if ((value->count > 0 && value->scale == AGG_SCALE_DATUM) ||
				!numeric_sum_from_datum(arg, &one.v.i128, &one.scale))
			{
				one.v.datum = arg;
				one.scale = AGG_SCALE_DATUM;
			}
			break;
		case AGG_MIN:
		case AGG_MAX:
			one.v.datum = arg;
			break;
		case AGG_GENERAL:
			pg_unreachable();	/* agg_general_next */
	}
	aggregate_merge(agg, value, &one, next);
}

void
aggregate_merge(AggregateDef *agg, const AggValue *into, const AggValue *from, AggValue *next)
{
	AggValue	r = *into;

	if (from->count == 0)
	{
		*next = r;
		return;
	}
	if (into->count == 0 && agg->impl != AGG_COUNT_STAR && agg->impl != AGG_COUNT)
	{
		*next = *from;
		return;
	}
	if (agg->impl == AGG_GENERAL)
	{
		agg_general_merge(agg, into, from, next);
		return;
	}
	switch (agg->impl)
	{
		case AGG_COUNT_STAR:
		case AGG_COUNT:
			break;
		case AGG_SUM_INT:
			add_int8(agg, &r.v.i64, from->v.i64);
			break;
		case AGG_SUM_INT8:
		case AGG_AVG_INT:
			r.v.i128 += from->v.i128;
			break;
		case AGG_SUM_FLOAT4:
			r.v.f4 = float4_pl(r.v.f4, from->v.f4);
			break;
		case AGG_SUM_FLOAT8:
		case AGG_AVG_FLOAT:
			r.v.f8 = float8_pl(r.v.f8, from->v.f8);
			break;
		case AGG_SUM_NUMERIC:
		case AGG_AVG_NUMERIC:
			/* numeric_add where the scaled sum cannot go: same value, same scale */
			if (r.scale == AGG_SCALE_DATUM || from->scale == AGG_SCALE_DATUM ||
				!numeric_sum_add(&r.v.i128, &r.scale, from->v.i128, from->scale))
			{
				Datum		sum = DirectFunctionCall2(numeric_add, numeric_value(&r),
													  numeric_value(from));

				/*
				 * Back to the scaled form when the sum fits again, as a
				 * reload of the state would: a key's speed does not depend
				 * on whether it was evicted.  The parse rejects NaN,
				 * Infinity, a large scale or weight on the header alone.
				 */
				if (!numeric_sum_from_datum(sum, &r.v.i128, &r.scale))
				{
					r.v.datum = sum;
					r.scale = AGG_SCALE_DATUM;
				}
			}
			break;
		case AGG_MIN:
		case AGG_MAX:
			{
				int32		cmp = DatumGetInt32(FunctionCall2Coll(&agg->cmp_proc, agg->arg_collation,
																  from->v.datum, r.v.datum));

				if ((agg->impl == AGG_MIN && cmp < 0) || (agg->impl == AGG_MAX && cmp > 0))
					r.v.datum = from->v.datum;
			}
			break;
		case AGG_GENERAL:
			pg_unreachable();	/* agg_general_merge */
	}
	r.count += from->count;
	*next = r;
}

void
aggregate_store(AggregateDef *agg, AggValue *value, const AggValue *next, MemoryContext ctx)
{
	Datum		old_datum = value->v.datum;
	bool		had_datum = holds_datum(agg, value);
	bool		keeps = had_datum && holds_datum(agg, next) && next->v.datum == old_datum;

	if (agg->impl == AGG_GENERAL)
	{
		agg_general_store(agg, value, next, ctx);
		return;
	}
	*value = *next;
	/* A datum the value does not own yet (the argument, a sum, a merged session's) is copied. */
	if (holds_datum(agg, next) && !keeps)
	{
		MemoryContext old = MemoryContextSwitchTo(ctx);

		value->v.datum = datumCopy(next->v.datum, false, agg->arg_typlen);
		MemoryContextSwitchTo(old);
	}
	if (had_datum && !keeps)
		pfree(DatumGetPointer(old_datum));
}

Datum
aggregate_result(AggregateDef *agg, AggValue *value, bool *isnull)
{
	*isnull = false;
	switch (agg->impl)
	{
		case AGG_GENERAL:
			return agg_general_result(agg, value, isnull);
		case AGG_COUNT_STAR:
		case AGG_COUNT:
			return Int64GetDatum(value->count);
		default:
			break;
	}
	/* Like PostgreSQL: an aggregate over no (non-null) values is NULL. */
	if (value->count == 0)
	{
		*isnull = true;
		return (Datum) 0;
	}
	switch (agg->impl)
	{
		case AGG_SUM_INT:
			return Int64GetDatum(value->v.i64);
		case AGG_SUM_INT8:
			return int128_to_numeric_datum(value->v.i128);
		case AGG_SUM_NUMERIC:
			if (value->scale != AGG_SCALE_DATUM)
				return numeric_sum_datum(value->v.i128, value->scale);
			return datumCopy(value->v.datum, false, -1);
		case AGG_SUM_FLOAT4:
			return Float4GetDatum(value->v.f4);
		case AGG_SUM_FLOAT8:
			return Float8GetDatum(value->v.f8);
		case AGG_AVG_INT:
			return DirectFunctionCall2(numeric_div, int128_to_numeric_datum(value->v.i128),
									   NumericGetDatum(int64_to_numeric(value->count)));
		case AGG_AVG_NUMERIC:
			return DirectFunctionCall2(numeric_div, numeric_value(value),
									   NumericGetDatum(int64_to_numeric(value->count)));
		case AGG_AVG_FLOAT:
			return Float8GetDatum(value->v.f8 / (double) value->count);
		case AGG_MIN:
		case AGG_MAX:
			return datumCopy(value->v.datum, agg->arg_typbyval, agg->arg_typlen);
		default:
			elog(ERROR, "unexpected aggregate implementation %d", agg->impl);
	}
	return (Datum) 0;
}

/*
 * Where a value's running state lives: a datum of the argument's type
 * (numeric sums, min, max), or fixed-size bytes at *p.
 */
static bool
state_is_datum(AggregateDef *agg)
{
	return sums_numeric(agg) || agg->impl == AGG_MIN || agg->impl == AGG_MAX;
}

/* numeric sum or avg: the value is scaled (numeric_sum.h) or a numeric datum */
static bool
sums_numeric(AggregateDef *agg)
{
	return agg->impl == AGG_SUM_NUMERIC || agg->impl == AGG_AVG_NUMERIC;
}

bool
aggregate_owns_memory(AggregateDef *agg, const AggValue *value)
{
	/* A general aggregate's state takes many forms (agg_general.c): assume it does. */
	return agg->impl == AGG_GENERAL || holds_datum(agg, value);
}

/* Whether the value owns a datum (aggregate_store copies and frees it). */
static bool
holds_datum(AggregateDef *agg, const AggValue *value)
{
	if (value->count == 0 || !state_is_datum(agg) || agg->arg_typbyval)
		return false;
	if (sums_numeric(agg))
		return value->scale == AGG_SCALE_DATUM;
	return true;
}

/* A numeric sum as a numeric datum: its own, or made in the current context. */
static Datum
numeric_value(const AggValue *value)
{
	if (value->scale == AGG_SCALE_DATUM)
		return value->v.datum;
	return numeric_sum_datum(value->v.i128, value->scale);
}

static int
state_bytes(AggregateDef *agg, AggValue *value, void **p)
{
	switch (agg->impl)
	{
		case AGG_SUM_INT:
			*p = &value->v.i64;
			return sizeof(int64);
		case AGG_SUM_INT8:
		case AGG_AVG_INT:
			*p = &value->v.i128;
			return sizeof(int128);
		case AGG_SUM_FLOAT4:
			*p = &value->v.f4;
			return sizeof(float);
		case AGG_SUM_FLOAT8:
		case AGG_AVG_FLOAT:
			*p = &value->v.f8;
			return sizeof(double);
		default:
			return 0;			/* counts: the count is all */
	}
}

void
aggregate_serialize(AggregateDef *agg, AggValue *value, StringInfo buf)
{
	void	   *p;
	int			n;

	if (agg->impl == AGG_GENERAL)
	{
		agg_general_serialize(agg, value, buf);
		return;
	}
	serial_put(buf, &value->count, sizeof(int64));
	if (value->count == 0)
		return;
	if (sums_numeric(agg) && value->scale != AGG_SCALE_DATUM)
	{
		/* The bytes serial_put_datum would write for the same numeric */
		char		bytes[NUMERIC_SUM_MAX_BYTES];
		int32		len = numeric_sum_bytes(value->v.i128, value->scale, bytes);

		serial_put(buf, &len, sizeof(int32));
		serial_put(buf, bytes, len);
	}
	else if (state_is_datum(agg))
		serial_put_datum(buf, value->v.datum, agg->arg_typlen, agg->arg_typbyval);
	else if ((n = state_bytes(agg, value, &p)) > 0)
		serial_put(buf, p, n);
}

void
aggregate_deserialize(AggregateDef *agg, AggValue *value, const char *data, int len,
					  int *pos, MemoryContext ctx)
{
	void	   *p;
	int			n;

	if (agg->impl == AGG_GENERAL)
	{
		agg_general_deserialize(agg, value, data, len, pos, ctx);
		return;
	}
	memset(value, 0, sizeof(AggValue));
	serial_get(data, len, pos, &value->count, sizeof(int64));
	if (value->count == 0)
		return;
	if (sums_numeric(agg))
	{
		int			start = *pos;
		int32		vlen;

		/* Scaled when it fits (numeric_sum.h), else read as the datum below */
		serial_get(data, len, pos, &vlen, sizeof(int32));
		if (vlen >= 0 && vlen <= len - *pos &&
			numeric_sum_parse(data + *pos, vlen, &value->v.i128, &value->scale))
		{
			*pos += vlen;
			return;
		}
		*pos = start;
		value->scale = AGG_SCALE_DATUM;
	}
	if (state_is_datum(agg))
		value->v.datum = serial_get_datum(data, len, pos, agg->arg_typlen, agg->arg_typbyval, ctx);
	else if ((n = state_bytes(agg, value, &p)) > 0)
		serial_get(data, len, pos, p, n);
}

static Datum
int128_to_numeric_datum(int128 v)
{
	char		buf[64];
	char	   *p = buf + sizeof(buf) - 1;
	bool		neg = v < 0;
	uint128		u = neg ? -(uint128) v : (uint128) v;

	*p = '\0';
	do
	{
		*--p = '0' + (int) (u % 10);
		u /= 10;
	} while (u != 0);
	if (neg)
		*--p = '-';
	return DirectFunctionCall3(numeric_in, CStringGetDatum(p), ObjectIdGetDatum(InvalidOid),
							   Int32GetDatum(-1));
}
