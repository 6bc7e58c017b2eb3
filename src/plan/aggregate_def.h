/*
 * aggregate_def.h
 *		An aggregate of an "aggregate" step as the plan compiles it: which
 *		implementation runs it, its argument and its result type.  Running
 *		it (operators/aggregate.h) is the keyed stage's business.
 */
#ifndef AGGREGATE_DEF_H
#define AGGREGATE_DEF_H

#include "fmgr.h"

#include "plan/expr.h"

/*
 * The values are recorded in each checkpoint's state layout
 * (operators/keyed_entry.c): append new ones, never renumber.
 */
typedef enum AggImpl
{
	AGG_COUNT_STAR,
	AGG_COUNT,					/* non-null values */
	AGG_SUM_INT,				/* int2, int4 -> int8 */
	AGG_SUM_INT8,				/* int8 -> numeric, 128-bit running sum */
	AGG_SUM_NUMERIC,
	AGG_SUM_FLOAT4,
	AGG_SUM_FLOAT8,
	AGG_AVG_INT,				/* int2, int4, int8 -> numeric */
	AGG_AVG_NUMERIC,
	AGG_AVG_FLOAT,				/* float4, float8 -> float8 */
	AGG_MIN,
	AGG_MAX,
	AGG_GENERAL					/* any aggregate, through its catalog functions */
} AggImpl;

typedef struct AggregateDef
{
	char	   *name;			/* output field */
	char	   *text;			/* as written: "sum((value->>'amount')::numeric)" */
	AggImpl		impl;
	CompiledExpr *arg;			/* NULL for count(*) */
	Oid			result_type;
	/* min/max: the argument type's comparison and storage */
	Oid			arg_type;
	Oid			arg_collation;
	int16		arg_typlen;
	bool		arg_typbyval;
	FmgrInfo	cmp_proc;
	/* AGG_GENERAL: arg is NULL, the arguments and the rest are in here */
	struct GeneralAggDef *general;
	void	   *run;			/* ... and what running it needs (operators/agg_general.c) */
} AggregateDef;

/*
 * Parse and type-check an aggregate call; ERROR naming path when invalid.
 * count, sum, min, max and avg of the types they know run on code of
 * mailer's own; any other call through the catalog (plan/aggregate_call.h).
 */
extern AggregateDef *aggregate_compile(const char *name, const char *text, const char *path,
									   FieldScope *scope);

#endif							/* AGGREGATE_DEF_H */
