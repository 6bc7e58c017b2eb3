/*
 * aggregate_def.c
 *		Compile an aggregate call of an "aggregate" step (aggregate_def.h).
 *
 * Result types and implementations follow PostgreSQL's own choices:
 * sum(int4) is a bigint that errors on overflow, sum(int8) and avg of
 * integers are numeric, float sums stay float; min and max take any type
 * with a btree ordering.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "nodes/parsenodes.h"
#include "utils/lsyscache.h"
#include "utils/typcache.h"

#include "plan/aggregate_def.h"
#include "plan/spec_error.h"

static const char *const agg_hint =
"An aggregate is count(*), count(e), sum(e), min(e), max(e) or avg(e), with e an SQL expression over the record's fields.";

AggregateDef *
aggregate_compile(const char *name, const char *text, const char *path, FieldScope *scope)
{
	AggregateDef *agg = palloc0(sizeof(AggregateDef));
	Node	   *raw = expr_parse(text, path);
	FuncCall   *call;
	char	   *fname;
	Oid			t;

	agg->name = pstrdup(name);
	agg->text = pstrdup(text);
	if (!IsA(raw, FuncCall))
		spec_error(path, ERRCODE_SYNTAX_ERROR, agg_hint, "expected an aggregate call");
	call = (FuncCall *) raw;
	if (list_length(call->funcname) != 1)
		spec_error(path, ERRCODE_UNDEFINED_FUNCTION, agg_hint, "unknown aggregate");
	fname = strVal(linitial(call->funcname));
	if (call->agg_distinct || call->agg_filter || call->agg_order || call->over ||
		call->agg_within_group || call->func_variadic)
		spec_error(path, ERRCODE_FEATURE_NOT_SUPPORTED, agg_hint,
				  "DISTINCT, FILTER, ORDER BY, OVER and VARIADIC are not supported in aggregates");

	if (strcmp(fname, "count") == 0 && call->agg_star)
	{
		agg->impl = AGG_COUNT_STAR;
		agg->result_type = INT8OID;
		return agg;
	}
	if (call->agg_star || list_length(call->args) != 1)
		spec_error(path, ERRCODE_UNDEFINED_FUNCTION, agg_hint, "%s takes exactly one argument", fname);

	agg->arg = expr_compile(psprintf("%s", text), linitial(call->args), path, scope, EXPR_SCALAR);
	t = agg->arg->type;
	agg->arg_type = t;
	agg->arg_collation = agg->arg->collation;
	get_typlenbyval(t, &agg->arg_typlen, &agg->arg_typbyval);

	if (strcmp(fname, "count") == 0)
	{
		agg->impl = AGG_COUNT;
		agg->result_type = INT8OID;
	}
	else if (strcmp(fname, "sum") == 0 || strcmp(fname, "avg") == 0)
	{
		bool		is_sum = fname[0] == 's';

		switch (t)
		{
			case INT2OID:
			case INT4OID:
				agg->impl = is_sum ? AGG_SUM_INT : AGG_AVG_INT;
				agg->result_type = is_sum ? INT8OID : NUMERICOID;
				break;
			case INT8OID:
				agg->impl = is_sum ? AGG_SUM_INT8 : AGG_AVG_INT;
				agg->result_type = NUMERICOID;
				break;
			case NUMERICOID:
				agg->impl = is_sum ? AGG_SUM_NUMERIC : AGG_AVG_NUMERIC;
				agg->result_type = NUMERICOID;
				break;
			case FLOAT4OID:
				agg->impl = is_sum ? AGG_SUM_FLOAT4 : AGG_AVG_FLOAT;
				agg->result_type = is_sum ? FLOAT4OID : FLOAT8OID;
				break;
			case FLOAT8OID:
				agg->impl = is_sum ? AGG_SUM_FLOAT8 : AGG_AVG_FLOAT;
				agg->result_type = FLOAT8OID;
				break;
			default:
				spec_error(path, ERRCODE_UNDEFINED_FUNCTION,
						  "sum and avg take smallint, integer, bigint, numeric, real or double precision; cast the argument, e.g. (value->>'amount')::numeric.",
						  "%s of this type is not supported", fname);
		}
	}
	else if (strcmp(fname, "min") == 0 || strcmp(fname, "max") == 0)
	{
		TypeCacheEntry *tc = lookup_type_cache(t, TYPECACHE_CMP_PROC_FINFO);

		if (!OidIsValid(tc->cmp_proc) || agg->arg_typlen == -2)
			spec_error(path, ERRCODE_UNDEFINED_FUNCTION,
					  "min and max take a type with an ordering, such as numeric, text or timestamptz.",
					  "%s needs an ordered type", fname);
		fmgr_info_copy(&agg->cmp_proc, &tc->cmp_proc_finfo, TopMemoryContext);
		agg->impl = fname[1] == 'i' ? AGG_MIN : AGG_MAX;
		agg->result_type = t;
	}
	else
		spec_error(path, ERRCODE_UNDEFINED_FUNCTION, agg_hint, "unknown aggregate \"%s\"", fname);
	return agg;
}

