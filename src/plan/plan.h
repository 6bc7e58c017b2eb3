/*
 * plan.h
 *		A job spec compiled against the database: the record's fields, the
 *		expressions of every step, the keyed stage and the sink table.
 *
 * create_job and describe_job compile a plan to validate a spec; a job
 * worker compiles the same plan once, at start, and runs it.
 *
 * Design: docs/ARCHITECTURE.md, "From a Kafka message to a table row".
 */
#ifndef PLAN_H
#define PLAN_H

#include "plan/aggregate_def.h"
#include "plan/expr.h"
#include "plan/sink_plan.h"
#include "plan/spec.h"

/* A filter, map, flat_map or key_by step. */
typedef struct StatelessStep
{
	StepKind	kind;
	const char *path;
	CompiledExpr *expr;			/* filter, flat_map */
	int			nexprs;			/* map, key_by */
	CompiledExpr **exprs;
	int		   *slots;			/* where each map/key_by field, or flat_map's value, goes */
} StatelessStep;

typedef struct JobPlan
{
	JobSpec    *spec;
	RecordSchema *schema;
	FieldScope *scope;			/* fields visible at the end of the stateless steps */
	CompiledExpr *event_time;	/* NULL: the timestamp field */
	int			nsteps;
	StatelessStep **steps;

	/* keyed stage: key_by, then optional window and aggregate */
	bool		keyed;
	int			nkeys;
	int		   *key_slots;
	bool		aggregated;
	WindowSpec *window;			/* NULL: running totals per key */
	int			naggs;
	AggregateDef **aggs;

	/*
	 * What the sink sees.  Without an aggregate: the record itself.  With
	 * one: key fields, then window_start and window_end when windowed, then
	 * the aggregates, in this order.
	 */
	RecordSchema *out_schema;
	FieldScope *out_scope;
	SinkPlan   *sink;
	SinkPlan   *changelog;		/* "sinks": the Kafka sink beside the table, or NULL */
	int			sink_width;		/* columns sink_project makes: the sink's, then the changelog's */
	char	  **out_paths;		/* each output field's JSON path, for errors */

	/* JSON fields read straight from the message text (json_fields.h), or NULL */
	struct JsonFields *json_fields;
} JobPlan;

/*
 * Compile a parsed spec.  prepare_executor also builds executor state, as
 * a worker needs and as create_job does to check EXECUTE privileges.
 */
extern JobPlan *plan_compile(JobSpec *spec, bool prepare_executor);

/*
 * Call fn for every expression of the plan (none is NULL).  over_output:
 * the expression reads the record the sink sees (out_schema), not the
 * record of the stateless steps (schema); without an aggregate the two are
 * one record.
 */
typedef void (*PlanExprFn) (CompiledExpr *expr, bool over_output, void *arg);
extern void plan_foreach_expr(JobPlan *plan, PlanExprFn fn, void *arg);

/*
 * Build the executor state of every expression: rt is over the plan's
 * schema, out_rt over its out_schema.
 */
extern void plan_prepare_exprs(JobPlan *plan, ExprRuntime *rt, ExprRuntime *out_rt);

/* The plan as a person reads it (describe_job; describe.c). */
extern char *plan_describe(JobPlan *plan);

#endif							/* PLAN_H */
