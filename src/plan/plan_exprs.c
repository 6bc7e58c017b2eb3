/*
 * plan_exprs.c
 *		Walk every expression of a compiled plan (plan.h).
 *
 * One walker serves everything that must visit each expression: preparing
 * the executor state (plan_compile, the worker) and the JSON field rewriter
 * (json_fields.c).  It has a file of its own so that the rewriter, which the
 * compiler calls, does not call back into the compiler's file.
 */
#include "postgres.h"

#include "plan/aggregate_call.h"
#include "plan/plan.h"

static void prepare_expr(CompiledExpr *expr, bool over_output, void *arg);

void
plan_foreach_expr(JobPlan *plan, PlanExprFn fn, void *arg)
{
	if (plan->event_time)
		fn(plan->event_time, false, arg);
	for (int i = 0; i < plan->nsteps; i++)
	{
		StatelessStep *st = plan->steps[i];

		if (st->expr)
			fn(st->expr, false, arg);
		for (int j = 0; j < st->nexprs; j++)
			fn(st->exprs[j], false, arg);
	}
	for (int i = 0; i < plan->naggs; i++)
	{
		GeneralAggDef *g = plan->aggs[i]->general;

		if (plan->aggs[i]->arg)
			fn(plan->aggs[i]->arg, false, arg);
		for (int j = 0; g && j < g->ninputs; j++)
			fn(g->inputs[j], false, arg);
		if (g && g->filter)
			fn(g->filter, false, arg);
	}
	for (int i = 0; i < plan->sink->ncolumns; i++)
		if (plan->sink->columns[i].cast)
			fn(plan->sink->columns[i].cast, true, arg);
	for (int s = 0; s < 2; s++)
	{
		SinkPlan   *sink = s == 0 ? plan->sink : plan->changelog;
		KafkaSinkPlan *kp = sink ? sink->kafka : NULL;

		if (kp == NULL)
			continue;
		if (kp->key)
			fn(kp->key, true, arg);
		fn(kp->value, true, arg);
		for (int i = 0; i < kp->nheaders; i++)
			fn(kp->headers[i], true, arg);
	}
}

/* The runtimes plan_prepare_exprs prepares for. */
typedef struct PlanRuntimes
{
	ExprRuntime *rt;
	ExprRuntime *out_rt;
} PlanRuntimes;

void
plan_prepare_exprs(JobPlan *plan, ExprRuntime *rt, ExprRuntime *out_rt)
{
	PlanRuntimes runtimes = {rt, out_rt};

	plan_foreach_expr(plan, prepare_expr, &runtimes);
}

static void
prepare_expr(CompiledExpr *expr, bool over_output, void *arg)
{
	PlanRuntimes *runtimes = arg;

	expr_prepare(expr, over_output ? runtimes->out_rt : runtimes->rt);
}
