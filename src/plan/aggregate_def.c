/*
 * aggregate_def.c
 *		Compile an aggregate call of an "aggregate" step (aggregate_def.h).
 *
 * Result types and implementations follow PostgreSQL's own choices:
 * sum(int4) is a bigint that errors on overflow, sum(int8) and avg of
 * integers are numeric, float sums stay float; min and max take any type
 * with a btree ordering.  Every other aggregate, and these with DISTINCT,
 * FILTER or ORDER BY, run through the catalog (aggregate_call.c).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "nodes/parsenodes.h"
#include "utils/lsyscache.h"
#include "utils/typcache.h"

#include "plan/aggregate_call.h"
#include "plan/aggregate_def.h"
#include "plan/spec_error.h"

static bool compile_fast(AggregateDef *agg, const char *text, FuncCall *call, const char *path,
						 FieldScope *scope);

AggregateDef *
aggregate_compile(const char *name, const char *text, const char *path, FieldScope *scope)
{
	AggregateDef *agg = palloc0(sizeof(AggregateDef));
	Node	   *raw = expr_parse(text, path);

	if (!IsA(raw, FuncCall))
		spec_error(path, ERRCODE_SYNTAX_ERROR,
				   "An aggregate step's fields are aggregate calls, such as count(*), sum(e), count(DISTINCT e) or string_agg(e, ',').",
				   "expected an aggregate call");
	if (!compile_fast(agg, text, (FuncCall *) raw, path, scope))
	{
		/* what compile_fast set before it gave up is not the general aggregate's */
		memset(agg, 0, sizeof(AggregateDef));
		agg->impl = AGG_GENERAL;
		agg->general = aggregate_call_compile(text, raw, path, scope, &agg->result_type);
	}
	agg->name = pstrdup(name);
	agg->text = pstrdup(text);
	return agg;
}

/*
 * count(*), count(e), and sum, avg, min and max of the types mailer's own
 * code runs (operators/aggregate.c); false for anything else.
 */
static bool
compile_fast(AggregateDef *agg, const char *text, FuncCall *call, const char *path,
			 FieldScope *scope)
{
	char	   *fname;
	Oid			t;

	if (list_length(call->funcname) != 1 || call->agg_distinct || call->agg_filter ||
		call->agg_order || call->over || call->agg_within_group || call->func_variadic)
		return false;
	fname = strVal(linitial(call->funcname));
	if (strcmp(fname, "count") != 0 && strcmp(fname, "sum") != 0 && strcmp(fname, "avg") != 0 &&
		strcmp(fname, "min") != 0 && strcmp(fname, "max") != 0)
		return false;
	if (strcmp(fname, "count") == 0 && call->agg_star)
	{
		agg->impl = AGG_COUNT_STAR;
		agg->result_type = INT8OID;
		return true;
	}
	if (call->agg_star || list_length(call->args) != 1 || IsA(linitial(call->args), NamedArgExpr))
		return false;

	agg->arg = expr_compile(pstrdup(text), linitial(call->args), path, scope, EXPR_SCALAR);
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
				return false;	/* sum(interval), avg(money), ...: the catalog's */
		}
	}
	else
	{
		TypeCacheEntry *tc = lookup_type_cache(t, TYPECACHE_CMP_PROC_FINFO);

		if (!OidIsValid(tc->cmp_proc) || agg->arg_typlen == -2)
			return false;
		fmgr_info_copy(&agg->cmp_proc, &tc->cmp_proc_finfo, TopMemoryContext);
		agg->impl = fname[1] == 'i' ? AGG_MIN : AGG_MAX;
		agg->result_type = t;
	}
	return true;
}
