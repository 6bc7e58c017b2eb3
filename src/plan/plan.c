/*
 * plan.c
 *		Compile a job spec against the database (plan.h), and describe it.
 *
 * The order of steps is checked here: stateless steps (filter, map,
 * flat_map) and one key_by, then optionally a window, then an aggregate,
 * which ends the pipeline.  Every field an expression names must exist at
 * that point; every aggregate output must have a column in the sink table.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_type.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "plan/json_fields.h"
#include "plan/plan.h"
#include "connectors/source.h"

static StatelessStep *compile_named_step(StepSpec *step, FieldScope *scope);
static void check_field_type(const char *path, Oid type, const char *what);
static void build_output(JobPlan *plan, List *agg_paths, const char *window_path,
						 char ***out_paths);
static SinkPlan *plan_sink(JobPlan *plan, char **out_paths);
static List *sink_key_columns(Relation rel, SinkSpec *sink, bool *upsert, Oid *index);
static Oid	unique_index_on(Relation rel, List *columns, bool *deferrable);
static bool deferrable_primary_key(Relation rel);
static void sink_key_equality(SinkPlan *sink, Relation rel, Oid index);
static void check_column_privileges(Oid relid, SinkPlan *sink, const char *relname);
static void build_insert_sql(SinkPlan *sink);
static void build_delete_sql(SinkPlan *sink);
static char *qualified_operator(Oid op);

/* create_job and describe_job refuse what a worker of an older job accepts. */
static bool refuse_unhashable_keys;
static char *format_duration(int64 us);
static const char *field_desc(RecordSchema *schema, int slot);

static void
plan_error(const char *path, int code, const char *hint, const char *msg)
{
	ereport(ERROR,
			(errcode(code),
			 errmsg("invalid job spec at %s: %s", path, msg),
			 errhint("%s", hint)));
}

JobPlan *
plan_compile(JobSpec *spec, bool prepare_executor)
{
	JobPlan    *plan = palloc0(sizeof(JobPlan));
	FieldScope *scope;
	ListCell   *lc;
	List	   *agg_paths = NIL;
	const char *window_path = NULL;
	const char *key_by_path = NULL;
	char	  **out_paths;
	static const Oid value_types[] = {JSONBOID, TEXTOID, BYTEAOID};

	plan->spec = spec;
	refuse_unhashable_keys = prepare_executor;
	if (spec->source.type == SOURCE_KAFKA)
		kafka_check_options(&spec->source.kafka);
	plan->schema = record_schema_create(value_types[spec->source.format]);
	scope = field_scope_all(plan->schema);

	if (spec->event_time)
		plan->event_time = expr_compile(spec->event_time, NULL, "event_time", scope,
										EXPR_TIMESTAMPTZ);

	plan->steps = palloc0(sizeof(StatelessStep *) * (list_length(spec->steps) + 1));
	foreach(lc, spec->steps)
	{
		StepSpec   *step = lfirst(lc);
		StatelessStep *st = NULL;

		if (plan->aggregated)
			plan_error(step->path, ERRCODE_INVALID_PARAMETER_VALUE,
					   "The aggregate step is the last one; filter or map before key_by.",
					   "no step may follow an aggregate");
		if (plan->window && step->kind != STEP_AGGREGATE)
			plan_error(step->path, ERRCODE_INVALID_PARAMETER_VALUE,
					   "A window step is followed by an aggregate step.",
					   psprintf("a %s step cannot follow a window", step_kind_names[step->kind]));

		switch (step->kind)
		{
			case STEP_FILTER:
				st = palloc0(sizeof(StatelessStep));
				st->kind = STEP_FILTER;
				st->path = step->path;
				st->expr = expr_compile(step->expr, NULL, psprintf("%s.filter", step->path),
										scope, EXPR_BOOLEAN);
				break;
			case STEP_FLAT_MAP:
				st = palloc0(sizeof(StatelessStep));
				st->kind = STEP_FLAT_MAP;
				st->path = step->path;
				st->expr = expr_compile(step->expr, NULL, psprintf("%s.flat_map", step->path),
										scope, EXPR_SET);
				check_field_type(st->expr->path, st->expr->type, "the value it makes");
				st->slots = palloc(sizeof(int));
				st->slots[0] = record_schema_add(plan->schema, "value", st->expr->type,
												 st->expr->typmod, st->expr->collation);
				field_scope_bind(scope, st->slots[0]);
				break;
			case STEP_KEY_BY:
				if (plan->keyed)
					plan_error(step->path, ERRCODE_INVALID_PARAMETER_VALUE,
							   "Name every key field in one key_by step.",
							   psprintf("a second key_by (the first is %s)", key_by_path));
				st = compile_named_step(step, scope);
				plan->keyed = true;
				plan->nkeys = st->nexprs;
				plan->key_slots = st->slots;
				key_by_path = step->path;
				break;
			case STEP_MAP:
				st = compile_named_step(step, scope);
				break;
			case STEP_WINDOW:
				if (!plan->keyed)
					plan_error(step->path, ERRCODE_INVALID_PARAMETER_VALUE,
							   "Put a key_by step before the window, e.g. {\"key_by\": {\"customer_id\": \"value->>'customer_id'\"}}.",
							   "a window needs an earlier key_by");
				plan->window = &step->window;
				window_path = step->path;
				break;
			case STEP_AGGREGATE:
				{
					ListCell   *fc;
					int			i = 0;

					if (!plan->keyed)
						plan_error(step->path, ERRCODE_INVALID_PARAMETER_VALUE,
								   "Put a key_by step before the aggregate; it names the groups.",
								   "an aggregate needs an earlier key_by");
					plan->aggregated = true;
					plan->naggs = list_length(step->fields);
					plan->aggs = palloc0(sizeof(AggregateDef *) * plan->naggs);
					foreach(fc, step->fields)
					{
						NamedExprSpec *ne = lfirst(fc);

						plan->aggs[i] = aggregate_compile(ne->name, ne->expr, ne->path, scope);
						if (plan->aggs[i]->arg)
							check_field_type(ne->path, plan->aggs[i]->arg->type, "the argument");
						i++;
						agg_paths = lappend(agg_paths, ne->path);
					}
				}
				break;
		}
		if (st)
			plan->steps[plan->nsteps++] = st;
	}
	if (plan->window && !plan->aggregated)
		plan_error(window_path, ERRCODE_INVALID_PARAMETER_VALUE,
				   "Add an aggregate step after the window, e.g. {\"aggregate\": {\"orders\": \"count(*)\"}}.",
				   "a window needs an aggregate step after it");
	plan->scope = scope;

	build_output(plan, agg_paths, window_path, &out_paths);
	plan->out_paths = out_paths;
	plan->sink = plan_sink(plan, out_paths);
	plan->json_fields = json_fields_plan(plan);

	if (prepare_executor)
	{
		ExprRuntime *rt = expr_runtime_create(plan->schema);
		ExprRuntime *out_rt = expr_runtime_create(plan->out_schema);

		expr_prepare(plan->event_time, rt);
		for (int i = 0; i < plan->nsteps; i++)
		{
			StatelessStep *st = plan->steps[i];

			expr_prepare(st->expr, rt);
			for (int j = 0; j < st->nexprs; j++)
				expr_prepare(st->exprs[j], rt);
		}
		for (int i = 0; i < plan->naggs; i++)
			expr_prepare(plan->aggs[i]->arg, rt);
		for (int i = 0; i < plan->sink->ncolumns; i++)
			expr_prepare(plan->sink->columns[i].cast, out_rt);
	}
	return plan;
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
			 errmsg("invalid job spec at %s: %s has type %s, which a job cannot hold",
					path, what, format_type_be(type)),
			 get_typtype(base) == TYPTYPE_PSEUDO ?
			 errdetail("%s is a pseudo-type: its values cannot be kept in a record or in the job's state, nor read back after a restart.",
					   format_type_be(type)) :
			 errdetail("Values of type %s are C strings, which the job's state does not store.",
					   format_type_be(type)),
			 errhint("Give the expression a type a table column can have: cast it, e.g. (...)::text, or make a row into jsonb with to_jsonb(...).")));
}

/* The output schema; out_paths[slot] says where each output field comes from. */
static void
build_output(JobPlan *plan, List *agg_paths, const char *window_path, char ***out_paths)
{
	char	  **paths;
	int			n = 0;

	if (!plan->aggregated)
	{
		plan->out_schema = plan->schema;
		plan->out_scope = plan->scope;
		paths = palloc0(sizeof(char *) * plan->schema->nfields);
		*out_paths = paths;
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
				plan_error(list_nth(agg_paths, i), ERRCODE_DUPLICATE_COLUMN,
						   "Give each aggregate a name of its own, different from the key fields and window_start, window_end.",
						   psprintf("output field \"%s\" is defined twice", agg->name));
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
	*out_paths = paths;
}

static SinkPlan *
plan_sink(JobPlan *plan, char **out_paths)
{
	SinkSpec   *spec = &plan->spec->sink;
	SinkPlan   *sink = palloc0(sizeof(SinkPlan));
	MemoryContext ctx = CurrentMemoryContext;
	List	   *names = NIL;
	RangeVar   *rv;
	Relation	rel;
	TupleDesc	desc;
	List	   *keys;
	Oid			key_index;
	StringInfoData colnames;
	bool	   *fed;

	PG_TRY();
	{
		names = stringToQualifiedNameList(spec->table);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(ctx);
		FlushErrorState();
		plan_error("sink.table", ERRCODE_INVALID_NAME,
				   "A table name as in a query: orders_total, public.orders_total or \"Mixed Case\".",
				   psprintf("\"%s\" is not a table name", spec->table));
	}
	PG_END_TRY();
	rv = makeRangeVarFromNameList(names);
	sink->relid = RangeVarGetRelid(rv, AccessShareLock, true);
	if (!OidIsValid(sink->relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("invalid job spec at sink.table: table \"%s\" does not exist", spec->table),
				 errhint("Create the table before the job; an unqualified name is looked up in search_path (%s).",
						 namespace_search_path)));
	rel = table_open(sink->relid, NoLock);
	if (rel->rd_rel->relkind != RELKIND_RELATION && rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("invalid job spec at sink.table: \"%s\" is not a table", spec->table),
				 errhint("A sink is an ordinary or partitioned table.")));
	sink->relname = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
											   RelationGetRelationName(rel));
	desc = RelationGetDescr(rel);
	keys = sink_key_columns(rel, spec, &sink->upsert, &key_index);

	sink->columns = palloc0(sizeof(SinkColumn) * desc->natts);
	fed = palloc0(sizeof(bool) * plan->out_schema->nfields);
	initStringInfo(&colnames);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		char	   *attname = NameStr(att->attname);
		int			slot;
		SinkColumn *col;

		if (att->attisdropped)
			continue;
		appendStringInfo(&colnames, "%s%s %s", colnames.len ? ", " : "", quote_identifier(attname),
						 format_type_with_typemod(att->atttypid, att->atttypmod));
		if (att->attgenerated || att->attidentity == ATTRIBUTE_IDENTITY_ALWAYS)
			continue;
		slot = field_scope_lookup(plan->out_scope, attname);
		if (slot < 0)
		{
			if (att->attnotnull && !att->atthasdef && att->attidentity == '\0')
				ereport(ERROR,
						(errcode(ERRCODE_NOT_NULL_VIOLATION),
						 errmsg("invalid job spec at sink.table: column \"%s\" of table %s is NOT NULL, has no default, and no field of the job is named after it",
								attname, sink->relname),
						 errhint("Make a field named \"%s\" (in map, key_by or aggregate), give the column a default, or drop NOT NULL.",
								 attname)));
			continue;
		}
		col = &sink->columns[sink->ncolumns++];
		col->name = pstrdup(attname);
		col->type = att->atttypid;
		col->typmod = att->atttypmod;
		col->slot = slot;
		col->is_key = list_member(keys, makeString(attname));
		get_typlenbyvalalign(getBaseType(col->type), &col->typlen, &col->typbyval, &col->typalign);
		col->cast = expr_compile_cast(slot, plan->out_scope, att->atttypid, att->atttypmod,
									  out_paths[slot] ? out_paths[slot] : "sink.table",
									  psprintf("column \"%s\" of type", attname));
		fed[slot] = true;
		plan->out_schema->fields[slot].referenced = true;
		if (col->is_key)
			sink->nkeys++;
	}

	if (sink->nkeys < list_length(keys))
	{
		ListCell   *lc;

		foreach(lc, keys)
		{
			bool		found = false;

			for (int i = 0; i < sink->ncolumns; i++)
				if (sink->columns[i].is_key && strcmp(sink->columns[i].name, strVal(lfirst(lc))) == 0)
					found = true;
			if (!found)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid job spec at %s: conflict column \"%s\" of table %s receives no field",
								spec->key ? "sink.key" : "sink.table", strVal(lfirst(lc)), sink->relname),
						 errhint("Name a field \"%s\" in key_by or map, or use \"mode\": \"append\".",
								 strVal(lfirst(lc)))));
		}
	}

	if (plan->aggregated)
	{
		for (int s = 0; s < plan->out_schema->nfields; s++)
			if (!fed[s])
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_COLUMN),
						 errmsg("invalid job spec at %s: table %s has no column \"%s\"",
								out_paths[s], sink->relname, plan->out_schema->fields[s].name),
						 errhint("Add the column, or rename the field. The table's columns: %s.", colnames.data)));
	}
	else if (sink->ncolumns == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("invalid job spec at sink.table: no column of table %s is named after a field of the job",
						sink->relname),
				 errhint("Columns receive the fields of the same name (key, value, topic, partition, offset, timestamp, headers, and those made by map or key_by). The table's columns: %s.",
						 colnames.data)));

	if (plan->window && plan->window->type == WINDOW_SESSION)
	{
		/* A merged session replaces its parts' rows: deletes go by the conflict key. */
		bool		ok = sink->upsert;

		for (int i = 0; ok && i < sink->ncolumns; i++)
			if (sink->columns[i].is_key && sink->columns[i].slot > plan->nkeys)
				ok = false;		/* only key fields and window_start */
		if (!ok)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid job spec at sink: session windows need an upsert sink whose conflict key is made of the key fields and window_start"),
					 errhint("Give table %s a primary key such as (key fields..., window_start): a merged session's row then replaces the rows of its parts.",
							 sink->relname)));
	}

	sink->key_index = key_index;
	if (sink->upsert)
		sink_key_equality(sink, rel, key_index);
	check_column_privileges(sink->relid, sink, sink->relname);
	table_close(rel, NoLock);
	build_insert_sql(sink);
	if (sink->upsert)
		build_delete_sql(sink);

	/*
	 * From now on the name means this schema's table, and the mode is the
	 * one it resolved to: a table of the same name placed earlier in the
	 * search_path, or a primary key dropped, changes neither.
	 */
	spec->table = sink->relname;
	if (spec->mode == SINK_MODE_DEFAULT && spec->key == NIL)
		spec->mode = sink->upsert ? SINK_MODE_UPSERT : SINK_MODE_APPEND;
	return sink;
}

/*
 * Conflict columns (as String nodes) of an upsert sink, NIL for append;
 * *index: the unique index that decides a conflict.  A deferrable one is
 * refused: ON CONFLICT cannot use it, and a violation would show only at
 * COMMIT, past the point where a row can be told from the others.
 */
static List *
sink_key_columns(Relation rel, SinkSpec *spec, bool *upsert, Oid *index)
{
	List	   *keys = NIL;
	Oid			pk = RelationGetPrimaryKeyIndex(rel);
	ListCell   *lc;

	*upsert = false;
	*index = InvalidOid;
	if (spec->mode == SINK_MODE_APPEND)
		return NIL;
	if (spec->key != NIL)
	{
		bool		deferrable;

		foreach(lc, spec->key)
		{
			char	   *name = lfirst(lc);

			if (get_attnum(RelationGetRelid(rel), name) == InvalidAttrNumber)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_COLUMN),
						 errmsg("invalid job spec at sink.key: table %s has no column \"%s\"",
								RelationGetRelationName(rel), name),
						 errhint("Name columns of the sink table.")));
			keys = lappend(keys, makeString(name));
		}
		*index = unique_index_on(rel, keys, &deferrable);
		if (!OidIsValid(*index) && deferrable)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("invalid job spec at sink.key: the unique index on these columns of table %s is deferrable",
							RelationGetRelationName(rel)),
					 errhint("An upsert needs its conflict key checked at once: make the constraint NOT DEFERRABLE, or use \"mode\": \"append\".")));
		if (!OidIsValid(*index))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
					 errmsg("invalid job spec at sink.key: table %s has no unique index on exactly these columns",
							RelationGetRelationName(rel)),
					 errhint("An upsert needs a primary key or a unique, non-partial, non-deferrable index on the key columns.")));
	}
	else if (!OidIsValid(pk) && deferrable_primary_key(rel))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("invalid job spec at sink.table: the primary key of table %s is deferrable",
						RelationGetRelationName(rel)),
				 errhint("An upsert needs its conflict key checked at once: make the primary key NOT DEFERRABLE, name the columns of a non-deferrable unique index in \"key\", or use \"mode\": \"append\".")));
	else if (OidIsValid(pk))
	{
		Relation	idx = index_open(pk, AccessShareLock);

		for (int i = 0; i < idx->rd_index->indnkeyatts; i++)
			keys = lappend(keys, makeString(get_attname(RelationGetRelid(rel),
														idx->rd_index->indkey.values[i], false)));
		index_close(idx, AccessShareLock);
		*index = pk;
	}
	else if (spec->mode == SINK_MODE_UPSERT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
				 errmsg("invalid job spec at sink.mode: table %s has no primary key to upsert on",
						RelationGetRelationName(rel)),
				 errhint("Add a primary key, name the conflict columns in \"key\", or use \"mode\": \"append\".")));
	*upsert = keys != NIL;
	return keys;
}

SinkPlan *
plan_sink_again(JobPlan *plan)
{
	refuse_unhashable_keys = false;
	return plan_sink(plan, plan->out_paths);
}

Oid
plan_sink_key_index(SinkSpec *spec, Oid relid)
{
	Relation	rel = table_open(relid, NoLock);
	Oid			index;

	if (spec->key != NIL)
	{
		List	   *keys = NIL;
		ListCell   *lc;
		bool		deferrable;

		foreach(lc, spec->key)
			keys = lappend(keys, makeString(lfirst(lc)));
		index = unique_index_on(rel, keys, &deferrable);
	}
	else
		index = RelationGetPrimaryKeyIndex(rel);
	table_close(rel, NoLock);
	return index;
}

Jsonb *
plan_pin_sink(Jsonb *doc, JobPlan *plan)
{
	SinkSpec   *spec = &plan->spec->sink;
	Datum		path[2] = {CStringGetTextDatum("sink"), (Datum) 0};
	StringInfoData value;
	Datum		result = JsonbPGetDatum(doc);

	initStringInfo(&value);
	escape_json(&value, spec->table);
	path[1] = CStringGetTextDatum("table");
	result = DirectFunctionCall4(jsonb_set, result,
								 PointerGetDatum(construct_array(path, 2, TEXTOID, -1, false, TYPALIGN_INT)),
								 DirectFunctionCall1(jsonb_in, CStringGetDatum(value.data)),
								 BoolGetDatum(true));
	if (spec->mode != SINK_MODE_DEFAULT)
	{
		path[1] = CStringGetTextDatum("mode");
		result = DirectFunctionCall4(jsonb_set, result,
									 PointerGetDatum(construct_array(path, 2, TEXTOID, -1, false, TYPALIGN_INT)),
									 DirectFunctionCall1(jsonb_in,
														 CStringGetDatum(spec->mode == SINK_MODE_UPSERT ?
																		 "\"upsert\"" : "\"append\"")),
									 BoolGetDatum(true));
	}
	return DatumGetJsonbP(result);
}

Oid
plan_sink_relid(SinkSpec *spec, LOCKMODE lockmode)
{
	RangeVar   *rv = makeRangeVarFromNameList(stringToQualifiedNameList(spec->table));

	return RangeVarGetRelid(rv, lockmode, true);
}

/* The relcache knows only an immediate primary key as one. */
static bool
deferrable_primary_key(Relation rel)
{
	ListCell   *lc;
	bool		found = false;

	foreach(lc, RelationGetIndexList(rel))
	{
		HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));

		if (!HeapTupleIsValid(tup))
			continue;
		if (((Form_pg_index) GETSTRUCT(tup))->indisprimary &&
			!((Form_pg_index) GETSTRUCT(tup))->indimmediate)
			found = true;
		ReleaseSysCache(tup);
	}
	return found;
}

/*
 * A unique, immediate, non-partial index on exactly these columns, or
 * InvalidOid; *deferrable: a deferrable one would have matched.
 */
static Oid
unique_index_on(Relation rel, List *columns, bool *deferrable)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			found = InvalidOid;

	*deferrable = false;
	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = idx->rd_index;
		bool		match = form->indisunique &&
			heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL) &&
			heap_attisnull(idx->rd_indextuple, Anum_pg_index_indexprs, NULL) &&
			form->indnkeyatts == list_length(columns);

		for (int i = 0; match && i < form->indnkeyatts; i++)
		{
			char	   *att = get_attname(RelationGetRelid(rel), form->indkey.values[i], false);

			if (!list_member(columns, makeString(att)))
				match = false;
		}
		if (match && !form->indimmediate)
			*deferrable = true;
		else if (match && !OidIsValid(found))
			found = RelationGetRelid(idx);
		index_close(idx, AccessShareLock);
	}
	return found;
}

/*
 * The buffer merges rows of one key as the conflict index would: by its
 * operator class's equality in its collation (numeric 1.0 and 1.00, citext,
 * a nondeterministic collation, -0.0 and 0.0), with a hash function that
 * agrees with that equality.  Two rows the index sees as one key must never
 * reach one INSERT ... ON CONFLICT DO UPDATE.
 */
static void
sink_key_equality(SinkPlan *sink, Relation rel, Oid index)
{
	Relation	idx = index_open(index, AccessShareLock);

	sink->key_nulls_distinct = !idx->rd_index->indnullsnotdistinct;
	for (int i = 0; i < idx->rd_index->indnkeyatts; i++)
	{
		char	   *att = get_attname(RelationGetRelid(rel), idx->rd_index->indkey.values[i], false);
		Oid			opcintype = idx->rd_opcintype[i];
		Oid			eqop = InvalidOid;
		RegProcedure lhs_hash = InvalidOid;
		RegProcedure rhs_hash = InvalidOid;

		if (idx->rd_rel->relam == BTREE_AM_OID)
			eqop = get_opfamily_member(idx->rd_opfamily[i], opcintype, opcintype,
									   BTEqualStrategyNumber);
		if (!OidIsValid(eqop))
			eqop = lookup_type_cache(opcintype, TYPECACHE_EQ_OPR)->eq_opr;
		if (OidIsValid(eqop))
			(void) get_op_hash_functions(eqop, &lhs_hash, &rhs_hash);
		for (int c = 0; c < sink->ncolumns; c++)
		{
			SinkColumn *col = &sink->columns[c];
			Oid			base;

			if (!col->is_key || strcmp(col->name, att) != 0)
				continue;

			/*
			 * Without a hash every row of the buffer meets in one bucket
			 * (quadratic); an array's or a row's hash fails at run time
			 * when an element type has none.
			 */
			base = getBaseType(col->type);
			if (OidIsValid(lhs_hash) && (type_is_array(base) || type_is_rowtype(base) ||
										 type_is_range(base) || type_is_multirange(base)) &&
				!OidIsValid(lookup_type_cache(base, TYPECACHE_HASH_PROC)->hash_proc))
				lhs_hash = InvalidOid;
			if (!OidIsValid(lhs_hash) && refuse_unhashable_keys)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("invalid job spec at sink.table: conflict column \"%s\" of table %s has type %s, whose equality has no hash function",
								col->name, sink->relname, format_type_be(col->type)),
						 errdetail("An upsert merges the rows of each key in a hash table before it writes them."),
						 errhint("Key the table on a type with a hash operator class (cast money to numeric, bit or tsvector to text), or use \"mode\": \"append\".")));
			col->key_eq_op = eqop;
			col->key_eq_proc = OidIsValid(eqop) ? get_opcode(eqop) : InvalidOid;
			col->key_hash_proc = lhs_hash;
			col->key_collation = idx->rd_indcollation[i];
		}
	}
	index_close(idx, AccessShareLock);
}

/* The owner must be able to do what the sink statement does. */
static void
check_column_privileges(Oid relid, SinkPlan *sink, const char *relname)
{
	AclMode		needed = ACL_INSERT | (sink->upsert ? ACL_UPDATE | ACL_SELECT : 0);

	/* All of them on the table will do (pg_class_aclcheck would take any one). */
	if (pg_class_aclmask(relid, GetUserId(), needed, ACLMASK_ALL) == needed)
		return;
	for (int i = 0; i < sink->ncolumns; i++)
	{
		SinkColumn *col = &sink->columns[i];
		AttrNumber	attnum = get_attnum(relid, col->name);
		AclMode		mode = ACL_INSERT;

		if (sink->upsert)
			mode |= col->is_key ? ACL_SELECT : ACL_UPDATE;
		for (AclMode m = 1; m <= mode; m <<= 1)
		{
			if (!(mode & m))
				continue;
			if (pg_class_aclcheck(relid, GetUserId(), m) != ACLCHECK_OK &&
				pg_attribute_aclcheck(relid, attnum, GetUserId(), m) != ACLCHECK_OK)
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("invalid job spec at sink.table: role \"%s\" may not %s column \"%s\" of table %s",
								GetUserNameFromId(GetUserId(), false),
								m == ACL_INSERT ? "insert into" : m == ACL_UPDATE ? "update" : "select",
								col->name, relname),
						 errhint("A job writes as its owner: grant %s on the table to the job's owner.",
								 sink->upsert ? "INSERT, SELECT and UPDATE" : "INSERT")));
		}
	}
}

/*
 * One statement writes a whole batch: each column's values arrive as one
 * array parameter and unnest() turns them back into rows.  The unnest()
 * calls stand in the select list, where they run in step and a composite
 * value stays one column (in FROM, it would expand into its fields).
 * Every function and operator is schema-qualified and the parameters are
 * typed by SPI: nothing resolves through the job's search_path, where a
 * role with CREATE in an earlier schema could put its own unnest().
 */
static void
build_insert_sql(SinkPlan *sink)
{
	StringInfoData sql;
	bool		any_update = false;

	sink->param_types = palloc(sizeof(Oid) * sink->ncolumns);
	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s (", sink->relname);
	for (int i = 0; i < sink->ncolumns; i++)
		appendStringInfo(&sql, "%s%s", i ? ", " : "", quote_identifier(sink->columns[i].name));
	appendStringInfoString(&sql, ") SELECT ");
	for (int i = 0; i < sink->ncolumns; i++)
	{
		Oid			elem = getBaseType(sink->columns[i].type);

		sink->param_types[i] = get_array_type(elem);
		appendStringInfo(&sql, "%spg_catalog.unnest($%d)", i ? ", " : "", i + 1);
	}
	if (sink->upsert)
	{
		bool		first = true;

		appendStringInfoString(&sql, " ON CONFLICT (");
		for (int i = 0; i < sink->ncolumns; i++)
		{
			if (!sink->columns[i].is_key)
				continue;
			appendStringInfo(&sql, "%s%s", first ? "" : ", ", quote_identifier(sink->columns[i].name));
			first = false;
		}
		appendStringInfoString(&sql, ") DO UPDATE SET ");
		first = true;
		for (int i = 0; i < sink->ncolumns; i++)
		{
			const char *c = quote_identifier(sink->columns[i].name);

			if (sink->columns[i].is_key)
				continue;
			appendStringInfo(&sql, "%s%s = EXCLUDED.%s", first ? "" : ", ", c, c);
			first = false;
			any_update = true;
		}
		if (!any_update)
		{
			/* Only key columns: a row that exists already says everything. */
			sql.len -= strlen(" DO UPDATE SET ");
			sql.data[sql.len] = '\0';
			appendStringInfoString(&sql, " DO NOTHING");
		}
	}
	sink->insert_sql = sql.data;
}

/*
 * DELETE of the rows of some keys (a merged session's replaced parts):
 * the key arrays are the insert's parameters of the key columns, compared
 * with the conflict index's equality in its collation.
 */
static void
build_delete_sql(SinkPlan *sink)
{
	StringInfoData sql;
	bool		first = true;

	initStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s AS mailer_t USING (SELECT ", sink->relname);
	for (int i = 0; i < sink->ncolumns; i++)
	{
		if (!sink->columns[i].is_key)
			continue;
		appendStringInfo(&sql, "%spg_catalog.unnest($%d) AS k%d", first ? "" : ", ", i + 1, i + 1);
		first = false;
	}
	appendStringInfoString(&sql, ") AS mailer_d WHERE ");
	first = true;
	for (int i = 0; i < sink->ncolumns; i++)
	{
		SinkColumn *col = &sink->columns[i];

		if (!col->is_key)
			continue;
		appendStringInfo(&sql, "%smailer_t.%s %s mailer_d.k%d", first ? "" : " AND ",
						 quote_identifier(col->name), qualified_operator(col->key_eq_op), i + 1);
		if (OidIsValid(col->key_collation))
		{
			HeapTuple	tup = SearchSysCache1(COLLOID, ObjectIdGetDatum(col->key_collation));
			Form_pg_collation coll;

			if (!HeapTupleIsValid(tup))
				elog(ERROR, "cache lookup failed for collation %u", col->key_collation);
			coll = (Form_pg_collation) GETSTRUCT(tup);
			appendStringInfo(&sql, " COLLATE %s",
							 quote_qualified_identifier(get_namespace_name(coll->collnamespace),
														NameStr(coll->collname)));
			ReleaseSysCache(tup);
		}
		first = false;
	}
	sink->delete_sql = sql.data;
}

/* OPERATOR(schema.name), so that no search_path decides which one runs. */
static char *
qualified_operator(Oid op)
{
	HeapTuple	tup = SearchSysCache1(OPEROID, ObjectIdGetDatum(op));
	char	   *result;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for operator %u", op);
	result = psprintf("OPERATOR(%s.%s)",
					  quote_identifier(get_namespace_name(((Form_pg_operator) GETSTRUCT(tup))->oprnamespace)),
					  NameStr(((Form_pg_operator) GETSTRUCT(tup))->oprname));
	ReleaseSysCache(tup);
	return result;
}

/*
 * describe_job
 */

static char *
format_duration(int64 us)
{
	static const struct
	{
		int64		unit;
		const char *name;
	}			units[] = {
		{USECS_PER_DAY, "day"}, {USECS_PER_HOUR, "hour"}, {USECS_PER_MINUTE, "minute"},
		{USECS_PER_SEC, "second"}, {1000, "millisecond"}, {1, "microsecond"}
	};

	if (us == 0)
		return "0";
	for (int i = 0; i < lengthof(units); i++)
		if (us % units[i].unit == 0)
			return psprintf(INT64_FORMAT " %s%s", us / units[i].unit, units[i].name,
							us / units[i].unit == 1 ? "" : "s");
	return psprintf(INT64_FORMAT " microseconds", us);
}

static const char *
field_desc(RecordSchema *schema, int slot)
{
	RecordField *f = &schema->fields[slot];

	return psprintf("%s %s", quote_identifier(f->name), format_type_with_typemod(f->type, f->typmod));
}

char *
plan_describe(JobPlan *plan)
{
	JobSpec    *spec = plan->spec;
	StringInfoData buf;
	static const char *const window_names[] = {"tumbling", "sliding", "session"};
	static const char *const on_error_names[] = {"dead_letter", "skip", "fail"};

	initStringInfo(&buf);
	appendStringInfoString(&buf, "Source: ");
	if (spec->source.type == SOURCE_KAFKA)
	{
		KafkaSourceSpec *k = &spec->source.kafka;
		ListCell   *lc;

		appendStringInfo(&buf, "kafka, brokers %s, topic%s", k->brokers,
						 list_length(k->topics) > 1 ? "s" : "");
		foreach(lc, k->topics)
			appendStringInfo(&buf, "%s %s", foreach_current_index(lc) ? "," : "", (char *) lfirst(lc));
		appendStringInfo(&buf, ", start %s without a checkpoint, consumer group %s (progress only)",
						 k->start_latest ? "latest" : "earliest", k->group_id ? k->group_id : "<job name>");
		foreach(lc, k->options)
		{
			DefElem    *opt = lfirst(lc);

			appendStringInfo(&buf, "\n  option %s = %s", opt->defname,
							 spec_option_is_secret(opt->defname) ? "********" : strVal(opt->arg));
		}
	}
	else
	{
		GeneratorSpec *g = &spec->source.generator;

		appendStringInfoString(&buf, "generator, ");
		if (g->events < 0)
			appendStringInfoString(&buf, "unbounded");
		else
			appendStringInfo(&buf, INT64_FORMAT " events", g->events);
		appendStringInfo(&buf, ", %d keys, seed " INT64_FORMAT ", event time from %s every %s",
						 g->keys, g->seed, timestamptz_to_str(g->start_time), format_duration(g->step_us));
		if (g->rate > 0)
			appendStringInfo(&buf, ", %g events per second", g->rate);
	}
	appendStringInfo(&buf, "\n  record: %s", field_desc(plan->schema, FIELD_KEY));
	for (int i = 1; i < NUM_BASE_FIELDS; i++)
		appendStringInfo(&buf, ", %s", field_desc(plan->schema, i));
	if (plan->json_fields && plan->json_fields->nfields == 0)
		appendStringInfoString(&buf, "\n  value: validated as JSON, not built (no step reads it)");
	else if (plan->json_fields)
	{
		appendStringInfoString(&buf, "\n  value fields read from the JSON text without building jsonb:");
		for (int i = 0; i < plan->json_fields->nfields; i++)
			appendStringInfo(&buf, "%s %s", i ? "," : "", quote_literal_cstr(plan->json_fields->fields[i].key));
	}
	appendStringInfo(&buf, "\nEvent time: %s, watermark %s behind the latest",
					 plan->event_time ? plan->event_time->text : "the message timestamp",
					 format_duration(spec->max_out_of_orderness_us));
	if (spec->idle_timeout_us >= 0)
		appendStringInfo(&buf, ", partitions idle after %s", format_duration(spec->idle_timeout_us));

	appendStringInfoString(&buf, "\nStateless stage:");
	if (plan->nsteps == 0)
		appendStringInfoString(&buf, " none");
	for (int i = 0; i < plan->nsteps; i++)
	{
		StatelessStep *st = plan->steps[i];

		appendStringInfo(&buf, "\n  %s %s", st->path, step_kind_names[st->kind]);
		if (st->kind == STEP_FILTER)
			appendStringInfo(&buf, ": %s", st->expr->text);
		else if (st->kind == STEP_FLAT_MAP)
			appendStringInfo(&buf, ": %s := %s", field_desc(plan->schema, st->slots[0]), st->expr->text);
		for (int j = 0; j < st->nexprs; j++)
			appendStringInfo(&buf, "\n    %s := %s", field_desc(plan->schema, st->slots[j]),
							 st->exprs[j]->text);
	}

	if (plan->keyed)
	{
		appendStringInfoString(&buf, "\nKeyed stage: key (");
		for (int i = 0; i < plan->nkeys; i++)
			appendStringInfo(&buf, "%s%s", i ? ", " : "", quote_identifier(plan->schema->fields[plan->key_slots[i]].name));
		appendStringInfoChar(&buf, ')');
		if (plan->window)
		{
			WindowSpec *w = plan->window;

			appendStringInfo(&buf, "\n  window: %s", window_names[w->type]);
			if (w->type == WINDOW_SESSION)
				appendStringInfo(&buf, ", gap %s", format_duration(w->gap_us));
			else
				appendStringInfo(&buf, ", size %s", format_duration(w->size_us));
			if (w->type == WINDOW_SLIDING)
				appendStringInfo(&buf, ", slide %s", format_duration(w->slide_us));
			appendStringInfo(&buf, ", allowed lateness %s, emit %s",
							 format_duration(w->allowed_lateness_us), w->emit_update ? "update" : "final");
		}
		else if (plan->aggregated)
			appendStringInfoString(&buf, "\n  no window: running values per key, written at each checkpoint");
		for (int i = 0; i < plan->naggs; i++)
			appendStringInfo(&buf, "\n  aggregate %s %s := %s", quote_identifier(plan->aggs[i]->name),
							 format_type_be(plan->aggs[i]->result_type), plan->aggs[i]->text);
		appendStringInfo(&buf, "\n  state backend: %s", spec->state_backend == STATE_ROCKSDB ? "rocksdb" : "memory");
	}

	appendStringInfo(&buf, "\nSink: %s into %s", plan->sink->upsert ? "upsert" : "append", plan->sink->relname);
	for (int i = 0; i < plan->sink->ncolumns; i++)
	{
		SinkColumn *col = &plan->sink->columns[i];

		appendStringInfo(&buf, "\n  %s %s <- %s%s", quote_identifier(col->name),
						 format_type_with_typemod(col->type, col->typmod),
						 col->cast ? col->cast->text : quote_identifier(plan->out_schema->fields[col->slot].name),
						 col->is_key ? " (conflict key)" : "");
	}
	appendStringInfo(&buf, "\n  statement: %s", plan->sink->insert_sql);
	/* Only a merged session deletes rows. */
	if (plan->window && plan->window->type == WINDOW_SESSION)
		appendStringInfo(&buf, "\n  replaced rows: %s", plan->sink->delete_sql);
	appendStringInfo(&buf, "\nCheckpoint: every %s, %d retained",
					 format_duration(spec->checkpoint_interval_us), spec->checkpoint_retain);
	appendStringInfo(&buf, "\nOn error: %s", on_error_names[spec->on_error]);
	return buf.data;
}
