/*
 * plan.c
 *		Compile a job spec against the database (plan.h).
 *
 * The order of steps is checked here: stateless steps (filter, map,
 * flat_map) and one key_by, then optionally a window, then an aggregate,
 * which ends the pipeline.  Every field an expression names must exist at
 * that point; every aggregate output must have a column in the sink table
 * (sink_plan.c).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "plan/aggregate_call.h"
#include "plan/json_fields.h"
#include "plan/kafka_options.h"
#include "plan/pulsar_options.h"
#include "plan/plan.h"
#include "plan/spec_error.h"

/* What plan_compile has found so far, step by step. */
typedef struct CompileState
{
	JobPlan    *plan;
	FieldScope *scope;			/* the fields visible after the steps so far */
	List	   *agg_paths;		/* each aggregate's JSON path */
	const char *window_path;
	const char *key_by_path;
	const char *flat_map_path;
} CompileState;

/* Indexed by ValueFormat: the type of the record's value field. */
static const Oid value_types[] = {
	[FORMAT_JSON] = JSONBOID,
	[FORMAT_TEXT] = TEXTOID,
	[FORMAT_BYTES] = BYTEAOID
};
StaticAssertDecl(lengthof(value_types) == FORMAT_BYTES + 1, "every value format has a type");

static void compile_step(CompileState *cs, StepSpec *step);
static void check_step_order(JobPlan *plan, StepSpec *step);
static StatelessStep *compile_expr_step(StepSpec *step, FieldScope *scope);
static StatelessStep *compile_named_step(StepSpec *step, FieldScope *scope);
static void compile_key_by(CompileState *cs, StepSpec *step, StatelessStep *st);
static void compile_aggregate(CompileState *cs, StepSpec *step);
static void check_field_type(const char *path, Oid type, const char *what);
static void check_general_aggregate(const char *path, GeneralAggDef *g, WindowSpec *window);
static void build_output(JobPlan *plan, List *agg_paths, const char *window_path);

JobPlan *
plan_compile(JobSpec *spec, bool prepare_executor)
{
	JobPlan    *plan = palloc0(sizeof(JobPlan));
	CompileState cs = {0};
	ListCell   *lc;

	plan->spec = spec;
	if (spec->source.type == SOURCE_KAFKA)
		kafka_check_options(&spec->source.kafka);
	else if (spec->source.type == SOURCE_PULSAR)
		pulsar_check_options("source", spec->source.pulsar.service_url, spec->source.pulsar.options,
							 spec->source.pulsar.owner);
	plan->schema = record_schema_create(value_types[spec->source.format]);
	cs.plan = plan;
	cs.scope = field_scope_all(plan->schema);

	if (spec->event_time)
		plan->event_time = expr_compile(spec->event_time, NULL, "event_time", cs.scope,
										EXPR_TIMESTAMPTZ);

	plan->steps = palloc0(sizeof(StatelessStep *) * (list_length(spec->steps) + 1));
	foreach(lc, spec->steps)
		compile_step(&cs, lfirst(lc));

	/*
	 * A flat_map's outputs of one record are added to the keyed state
	 * together, or none is; a parallel job may send them to different
	 * subtasks, which cannot undo each other's.
	 */
	if (plan->aggregated && cs.flat_map_path && spec->parallelism > 1)
		spec_error(cs.flat_map_path, ERRCODE_FEATURE_NOT_SUPPORTED,
				   "Use \"parallelism\": 1 for a job with a flat_map before its aggregate, or split the records upstream.",
				   "a flat_map before an aggregate needs parallelism 1");
	if (plan->window && !plan->aggregated)
		spec_error(cs.window_path, ERRCODE_INVALID_PARAMETER_VALUE,
				   "Add an aggregate step after the window, e.g. {\"aggregate\": {\"orders\": \"count(*)\"}}.",
				   "a window needs an aggregate step after it");
	plan->scope = cs.scope;

	build_output(plan, cs.agg_paths, cs.window_path);
	/* create_job and describe_job refuse what a worker of an older job accepts. */
	plan->sink = plan_sink(plan, prepare_executor);
	plan->sink_width = plan->sink->ncolumns;
	if (spec->changelog)
	{
		plan->changelog = plan_kafka_sink(plan, &spec->changelog->kafka);
		plan->sink_width += plan->changelog->ncolumns;
	}
	plan->json_fields = json_fields_plan(plan);

	if (prepare_executor)
		plan_prepare_exprs(plan, expr_runtime_create(plan->schema),
						   expr_runtime_create(plan->out_schema));
	return plan;
}

static void
compile_step(CompileState *cs, StepSpec *step)
{
	JobPlan    *plan = cs->plan;
	StatelessStep *st = NULL;

	check_step_order(plan, step);
	switch (step->kind)
	{
		case STEP_FLAT_MAP:
			cs->flat_map_path = step->path;
			/* fall through */
		case STEP_FILTER:
			st = compile_expr_step(step, cs->scope);
			break;
		case STEP_KEY_BY:
			if (plan->keyed)
				spec_error(step->path, ERRCODE_INVALID_PARAMETER_VALUE,
						   "Name every key field in one key_by step.",
						   "a second key_by (the first is %s)", cs->key_by_path);
			st = compile_named_step(step, cs->scope);
			compile_key_by(cs, step, st);
			break;
		case STEP_MAP:
			st = compile_named_step(step, cs->scope);
			break;
		case STEP_WINDOW:
			if (!plan->keyed)
				spec_error(step->path, ERRCODE_INVALID_PARAMETER_VALUE,
						   "Put a key_by step before the window, e.g. {\"key_by\": {\"customer_id\": \"value->>'customer_id'\"}}.",
						   "a window needs an earlier key_by");
			plan->window = &step->window;
			cs->window_path = step->path;
			break;
		case STEP_AGGREGATE:
			compile_aggregate(cs, step);
			break;
	}
	if (st)
		plan->steps[plan->nsteps++] = st;
}

/* Nothing follows an aggregate; only an aggregate follows a window. */
static void
check_step_order(JobPlan *plan, StepSpec *step)
{
	if (plan->aggregated)
		spec_error(step->path, ERRCODE_INVALID_PARAMETER_VALUE,
				   "The aggregate step is the last one; filter or map before key_by.",
				   "no step may follow an aggregate");
	if (plan->window && step->kind != STEP_AGGREGATE)
		spec_error(step->path, ERRCODE_INVALID_PARAMETER_VALUE,
				   "A window step is followed by an aggregate step.",
				   "a %s step cannot follow a window", step_kind_names[step->kind]);
}

/* filter, or flat_map, whose values become the field "value". */
static StatelessStep *
compile_expr_step(StepSpec *step, FieldScope *scope)
{
	StatelessStep *st = palloc0(sizeof(StatelessStep));
	bool		filter = step->kind == STEP_FILTER;

	st->kind = step->kind;
	st->path = step->path;
	st->expr = expr_compile(step->expr, NULL, psprintf("%s.%s", step->path, step_kind_names[step->kind]),
							scope, filter ? EXPR_BOOLEAN : EXPR_SET);
	if (filter)
		return st;
	check_field_type(st->expr->path, st->expr->type, "the value it makes");
	st->slots = palloc(sizeof(int));
	st->slots[0] = record_schema_add(scope->schema, "value", st->expr->type,
									 st->expr->typmod, st->expr->collation);
	field_scope_bind(scope, st->slots[0]);
	return st;
}

/* The key_by step st (compiled) makes the plan keyed by its fields. */
static void
compile_key_by(CompileState *cs, StepSpec *step, StatelessStep *st)
{
	JobPlan    *plan = cs->plan;

	/* Keys are compared byte by byte: a collation that finds other bytes equal cannot hold. */
	for (int i = 0; i < st->nexprs; i++)
		if (OidIsValid(st->exprs[i]->collation) &&
			!get_collation_isdeterministic(st->exprs[i]->collation))
			spec_error(st->exprs[i]->path, ERRCODE_FEATURE_NOT_SUPPORTED,
					   "Normalize the key instead, e.g. lower(value->>'name'), or use a deterministic collation.",
					   "a key_by field cannot have a nondeterministic collation (%s): keys are compared byte by byte",
					   get_collation_name(st->exprs[i]->collation));
	plan->keyed = true;
	plan->nkeys = st->nexprs;
	plan->key_slots = st->slots;
	cs->key_by_path = step->path;
}

static void
compile_aggregate(CompileState *cs, StepSpec *step)
{
	JobPlan    *plan = cs->plan;
	ListCell   *lc;
	int			i = 0;

	if (!plan->keyed)
		spec_error(step->path, ERRCODE_INVALID_PARAMETER_VALUE,
				   "Put a key_by step before the aggregate; it names the groups.",
				   "an aggregate needs an earlier key_by");
	plan->aggregated = true;
	plan->naggs = list_length(step->fields);
	plan->aggs = palloc0(sizeof(AggregateDef *) * plan->naggs);
	foreach(lc, step->fields)
	{
		NamedExprSpec *ne = lfirst(lc);

		AggregateDef *agg = aggregate_compile(ne->name, ne->expr, ne->path, cs->scope);

		plan->aggs[i] = agg;
		if (agg->arg)
			check_field_type(ne->path, agg->arg->type, "the argument");
		if (agg->general)
			check_general_aggregate(ne->path, agg->general, plan->window);
		i++;
		cs->agg_paths = lappend(cs->agg_paths, ne->path);
	}
}

/*
 * Its arguments are kept (a record's values travel to the keyed stage, and
 * DISTINCT keeps them in the state); a session window merges the states of
 * the sessions a record joins, with the aggregate's combine function.
 */
static void
check_general_aggregate(const char *path, GeneralAggDef *g, WindowSpec *window)
{
	for (int i = 0; i < g->ninputs; i++)
		check_field_type(path, g->inputs[i]->type, "an argument");
	if (window && window->type == WINDOW_SESSION && !aggregate_call_combines(g))
		spec_error(path, ERRCODE_FEATURE_NOT_SUPPORTED,
				   "Use a tumbling or sliding window, or give the aggregate a COMBINEFUNC (CREATE AGGREGATE ... COMBINEFUNC = ...).",
				   "aggregate %s has no combine function, which a session window needs to merge sessions",
				   get_func_name(g->aggfnoid));
}

/* map and key_by: every expression sees the fields as they were before the step. */
static StatelessStep *
compile_named_step(StepSpec *step, FieldScope *scope)
{
	StatelessStep *st = palloc0(sizeof(StatelessStep));
	FieldScope *before = field_scope_copy(scope);
	ListCell   *lc;
	int			i = 0;

	st->kind = step->kind;
	st->path = step->path;
	st->nexprs = list_length(step->fields);
	st->exprs = palloc0(sizeof(CompiledExpr *) * st->nexprs);
	st->slots = palloc0(sizeof(int) * st->nexprs);
	foreach(lc, step->fields)
	{
		NamedExprSpec *ne = lfirst(lc);
		CompiledExpr *e = expr_compile(ne->expr, NULL, ne->path, before, EXPR_SCALAR);

		check_field_type(ne->path, e->type, psprintf("field \"%s\"", ne->name));
		st->exprs[i] = e;
		st->slots[i] = record_schema_add(scope->schema, ne->name, e->type, e->typmod, e->collation);
		field_scope_bind(scope, st->slots[i]);
		i++;
	}
	return st;
}

/*
 * A field, key or aggregate argument needs a type whose values are whole
 * in their bytes: keyed state stores them as such (serial.c) and reads them
 * back after a restart.  A pseudo-type's values are not (a cstring, a
 * pointer, an anonymous record whose row type exists in one backend only).
 */
static void
check_field_type(const char *path, Oid type, const char *what)
{
	Oid			base = getBaseType(type);

	if (get_typtype(base) != TYPTYPE_PSEUDO && get_typlen(base) != -2)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 spec_errmsg(path, "%s has type %s, which a job cannot hold", what, format_type_be(type)),
			 get_typtype(base) == TYPTYPE_PSEUDO ?
			 errdetail("%s is a pseudo-type: its values cannot be kept in a record or in the job's state, nor read back after a restart.",
					   format_type_be(type)) :
			 errdetail("Values of type %s are C strings, which the job's state does not store.",
					   format_type_be(type)),
			 errhint("Give the expression a type a table column can have: cast it, e.g. (...)::text, or make a row into jsonb with to_jsonb(...).")));
}

/* The output schema; out_paths[slot] says where each output field comes from. */
static void
build_output(JobPlan *plan, List *agg_paths, const char *window_path)
{
	char	  **paths;
	int			n = 0;

	if (!plan->aggregated)
	{
		plan->out_schema = plan->schema;
		plan->out_scope = plan->scope;
		plan->out_paths = palloc0(sizeof(char *) * plan->schema->nfields);
		return;
	}

	plan->out_schema = record_schema_create_empty();
	paths = palloc0(sizeof(char *) * (plan->nkeys + 2 + plan->naggs));
	for (int i = 0; i < plan->nkeys; i++)
	{
		RecordField *f = &plan->schema->fields[plan->key_slots[i]];

		record_schema_add(plan->out_schema, f->name, f->type, f->typmod, f->collation);
		paths[n++] = NULL;		/* filled below from the key_by step */
	}
	if (plan->window)
	{
		record_schema_add(plan->out_schema, "window_start", TIMESTAMPTZOID, -1, InvalidOid);
		paths[n++] = psprintf("%s (window_start)", window_path);
		record_schema_add(plan->out_schema, "window_end", TIMESTAMPTZOID, -1, InvalidOid);
		paths[n++] = psprintf("%s (window_end)", window_path);
	}
	for (int i = 0; i < plan->naggs; i++)
	{
		AggregateDef *agg = plan->aggs[i];

		for (int j = 0; j < plan->out_schema->nfields; j++)
			if (strcmp(plan->out_schema->fields[j].name, agg->name) == 0)
				spec_error(list_nth(agg_paths, i), ERRCODE_DUPLICATE_COLUMN,
						   "Give each aggregate a name of its own, different from the key fields and window_start, window_end.",
						   "output field \"%s\" is defined twice", agg->name);
		record_schema_add(plan->out_schema, agg->name, agg->result_type, -1,
						  get_typcollation(agg->result_type));
		paths[n++] = list_nth(agg_paths, i);
	}
	for (int i = 0; i < plan->nsteps; i++)
	{
		StatelessStep *st = plan->steps[i];

		if (st->kind != STEP_KEY_BY)
			continue;
		for (int j = 0; j < st->nexprs; j++)
			paths[j] = (char *) st->exprs[j]->path;
	}
	plan->out_scope = field_scope_all(plan->out_schema);
	plan->out_paths = paths;
}
