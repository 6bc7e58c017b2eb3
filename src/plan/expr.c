/*
 * expr.c
 *		Compile and evaluate SQL expressions over record fields (expr.h).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parse_collate.h"
#include "parser/parse_expr.h"
#include "parser/parse_func.h"
#include "parser/parse_node.h"
#include "parser/parser.h"
#include "postmaster/bgworker.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "base/mailer.h"
#include "plan/expr.h"
#include "plan/json_scan.h"
#include "plan/spec_error.h"

static Node *field_ref_hook(ParseState *pstate, ColumnRef *cref);
static Param *make_field_param(RecordSchema *schema, int slot, int location);
static ParamExternData *record_param_fetch(ParamListInfo params, int paramid,
										   bool speculative, ParamExternData *workspace);
static void rethrow_with_path(MemoryContext ctx, const char *path, const char *text,
							  FieldScope *scope) pg_attribute_noreturn();
static char *describe_fields(FieldScope *scope);
static Node *faster_casts(Node *node, void *context);
static void check_expr_use(ParseState *pstate, Node *node, const char *path, ExprUse use);
static void refuse_subqueries_and_srfs(ParseState *pstate, const char *path, bool srf_allowed);
static CompiledExpr *expr_compile_node(CompiledExpr *cexpr, Node *node, FieldScope *scope);
static Expr *plan_expr(Node *node);
static bool in_job_worker(void);
static Node *plan_without_running(Node *node, void *context);

Node *
expr_parse(const char *text, const char *path)
{
	MemoryContext ctx = CurrentMemoryContext;
	List	   *stmts = NIL;
	RawStmt    *raw;
	SelectStmt *select;
	ResTarget  *target;

	PG_TRY();
	{
		stmts = raw_parser(psprintf("SELECT %s", text), RAW_PARSE_DEFAULT);
	}
	PG_CATCH();
	{
		rethrow_with_path(ctx, path, text, NULL);
	}
	PG_END_TRY();

	if (list_length(stmts) != 1)
		spec_error(path, ERRCODE_SYNTAX_ERROR, "Write one SQL expression, with no semicolon.",
				   "expected one expression");
	raw = linitial_node(RawStmt, stmts);
	select = (SelectStmt *) raw->stmt;
	if (!IsA(select, SelectStmt) || select->op != SETOP_NONE ||
		list_length(select->targetList) != 1 ||
		select->fromClause || select->whereClause || select->groupClause ||
		select->havingClause || select->windowClause || select->sortClause ||
		select->limitCount || select->limitOffset || select->distinctClause ||
		select->intoClause || select->withClause || select->lockingClause ||
		select->valuesLists)
		spec_error(path, ERRCODE_SYNTAX_ERROR,
				   "Write one SQL expression over the record's fields, without FROM, WHERE or other clauses.",
				   "expected a single expression");
	target = linitial_node(ResTarget, select->targetList);
	if (target->name != NULL)
		spec_error(path, ERRCODE_SYNTAX_ERROR, "Leave out the AS: the field's name is its key in the spec.",
				   "an expression here cannot have an alias");
	if (IsA(target->val, ColumnRef) &&
		IsA(llast(((ColumnRef *) target->val)->fields), A_Star))
		spec_error(path, ERRCODE_SYNTAX_ERROR, "Name the fields you need.", "* is not an expression");
	return target->val;
}

CompiledExpr *
expr_compile(const char *text, Node *raw, const char *path, FieldScope *scope, ExprUse use)
{
	MemoryContext ctx = CurrentMemoryContext;
	CompiledExpr *cexpr = palloc0(sizeof(CompiledExpr));
	ParseState *pstate;
	Node	   *node = NULL;

	if (raw == NULL)
		raw = expr_parse(text, path);
	cexpr->text = text;
	cexpr->path = path;

	pstate = make_parsestate(NULL);
	pstate->p_pre_columnref_hook = field_ref_hook;
	pstate->p_ref_hook_state = scope;

	PG_TRY();
	{
		node = transformExpr(pstate, copyObject(raw),
							 use == EXPR_BOOLEAN ? EXPR_KIND_WHERE : EXPR_KIND_SELECT_TARGET);
		switch (use)
		{
			case EXPR_BOOLEAN:
				node = coerce_to_boolean(pstate, node, "filter");
				break;
			case EXPR_TIMESTAMPTZ:
				node = coerce_to_specific_type(pstate, node, TIMESTAMPTZOID, "event_time");
				break;
			case EXPR_SCALAR:
			case EXPR_SET:
				if (exprType(node) == UNKNOWNOID)
					node = coerce_to_specific_type(pstate, node, TEXTOID, "expression");
				break;
		}
		assign_expr_collations(pstate, node);
	}
	PG_CATCH();
	{
		rethrow_with_path(ctx, path, text, scope);
	}
	PG_END_TRY();

	check_expr_use(pstate, node, path, use);
	return expr_compile_node(cexpr, node, scope);
}

Node *
expr_transform_aggregate(const char *text, Node *raw, const char *path, FieldScope *scope)
{
	MemoryContext ctx = CurrentMemoryContext;
	ParseState *pstate = make_parsestate(NULL);
	Node	   *node = NULL;

	pstate->p_pre_columnref_hook = field_ref_hook;
	pstate->p_ref_hook_state = scope;
	PG_TRY();
	{
		node = transformExpr(pstate, copyObject(raw), EXPR_KIND_SELECT_TARGET);
		assign_expr_collations(pstate, node);
	}
	PG_CATCH();
	{
		rethrow_with_path(ctx, path, text, scope);
	}
	PG_END_TRY();
	if (!IsA(node, Aggref))
		spec_error(path, ERRCODE_WRONG_OBJECT_TYPE,
				   "An aggregate step's fields are aggregate calls, such as count(*), sum(e), count(DISTINCT e) or string_agg(e, ',').",
				   "%s", pstate->p_hasWindowFuncs ? "window functions (OVER) are not aggregates of a job" :
				   pstate->p_hasAggs ? "expected an aggregate call, not an expression that uses one" :
				   IsA(node, FuncExpr) ? psprintf("%s is not an aggregate function",
												  get_func_name(((FuncExpr *) node)->funcid)) :
				   "expected an aggregate call");
	refuse_subqueries_and_srfs(pstate, path, false);
	return node;
}

CompiledExpr *
expr_compile_part(const char *text, const char *path, Node *node, FieldScope *scope)
{
	CompiledExpr *cexpr = palloc0(sizeof(CompiledExpr));

	cexpr->text = text;
	cexpr->path = path;
	return expr_compile_node(cexpr, node, scope);
}

/* Plan a transformed expression into cexpr (text and path set). */
static CompiledExpr *
expr_compile_node(CompiledExpr *cexpr, Node *node, FieldScope *scope)
{
	MemoryContext ctx = CurrentMemoryContext;

	/* In the worker, constant folding evaluates immutable calls now: 1/0 fails here. */
	PG_TRY();
	{
		cexpr->expr = plan_expr(node);
	}
	PG_CATCH();
	{
		rethrow_with_path(ctx, cexpr->path, cexpr->text, scope);
	}
	PG_END_TRY();
	cexpr->expr = (Expr *) faster_casts((Node *) cexpr->expr, NULL);
	cexpr->type = exprType((Node *) cexpr->expr);
	cexpr->typmod = exprTypmod((Node *) cexpr->expr);
	cexpr->collation = exprCollation((Node *) cexpr->expr);
	return cexpr;
}

/* What the expression may contain, for its use. */
static void
check_expr_use(ParseState *pstate, Node *node, const char *path, ExprUse use)
{
	if (pstate->p_hasAggs || pstate->p_hasWindowFuncs)
		spec_error(path, ERRCODE_GROUPING_ERROR,
				   "Aggregates belong in an \"aggregate\" step, after \"key_by\".",
				   "aggregate and window functions are not allowed in this expression");
	refuse_subqueries_and_srfs(pstate, path, use == EXPR_SET);
	if (use == EXPR_SET)
	{
		if (!((IsA(node, FuncExpr) && ((FuncExpr *) node)->funcretset) ||
			  (IsA(node, OpExpr) && ((OpExpr *) node)->opretset)))
			spec_error(path, ERRCODE_WRONG_OBJECT_TYPE,
					   "A flat_map is a call of a set-returning function, such as jsonb_array_elements(value->'items').",
					   "expected a call of a set-returning function");
		if (type_is_rowtype(exprType(node)))
			spec_error(path, ERRCODE_DATATYPE_MISMATCH,
					   "Use a function that returns a set of scalar values, such as jsonb_array_elements or regexp_split_to_table.",
					   "a flat_map function must return scalar values, not rows");
	}
}

/* No subquery in any expression; a set-returning function only where allowed (flat_map). */
static void
refuse_subqueries_and_srfs(ParseState *pstate, const char *path, bool srf_allowed)
{
	if (pstate->p_hasSubLinks)
		spec_error(path, ERRCODE_FEATURE_NOT_SUPPORTED,
				   "Put the query in a function and call the function.",
				   "subqueries are not supported in job expressions");
	if (pstate->p_hasTargetSRFs && !srf_allowed)
		spec_error(path, ERRCODE_FEATURE_NOT_SUPPORTED,
				   "Use a \"flat_map\" step to turn one record into several.",
				   "set-returning functions are allowed only in flat_map");
}

/*
 * Constant folding evaluates immutable calls, with the privileges of
 * whoever compiles: only the job's worker, as the job's owner, plans for
 * real.  describe_job and create_job check types and run nothing of the
 * spec (a superuser describing a user's spec must not run its functions).
 */
static Expr *
plan_expr(Node *node)
{
	Node	   *planned;

	if (in_job_worker())
		return expression_planner((Expr *) node);
	planned = plan_without_running(node, NULL);
	fix_opfuncids(planned);
	return (Expr *) planned;
}

/* True in a job's worker, the one process that plans a spec to run it. */
static bool
in_job_worker(void)
{
	return IsBackgroundWorker && MyBgworkerEntry != NULL &&
		strcmp(MyBgworkerEntry->bgw_library_name, MAILER_EXTENSION) == 0 &&
		strcmp(MyBgworkerEntry->bgw_function_name, "job_worker_main") == 0;
}

/*
 * What expression_planner does that executor setup needs, without
 * evaluating anything: function calls get their named and default
 * arguments in place (fix_opfuncids does the rest), COLLATE becomes a
 * relabel.
 */
static Node *
plan_without_running(Node *node, void *context)
{
	if (node == NULL)
		return NULL;
	node = expression_tree_mutator(node, plan_without_running, context);
	/* COLLATE is the planner's to fold into a relabel: the executor has no step for it */
	if (IsA(node, CollateExpr))
	{
		CollateExpr *c = (CollateExpr *) node;
		Node	   *arg = (Node *) c->arg;

		if (!type_is_collatable(exprType(arg)))
			return arg;
		return (Node *) makeRelabelType((Expr *) arg, exprType(arg), exprTypmod(arg), c->collOid,
										COERCE_IMPLICIT_CAST);
	}
	if (IsA(node, FuncExpr))
	{
		FuncExpr   *f = (FuncExpr *) node;
		HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(f->funcid));

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for function %u", f->funcid);
		f->args = expand_function_arguments(f->args, false, f->funcresulttype, tup);
		ReleaseSysCache(tup);
	}
	return node;
}

CompiledExpr *
expr_compile_cast(int slot, FieldScope *scope, Oid type, int32 typmod, const char *path,
				  const char *target_desc)
{
	RecordField *f = &scope->schema->fields[slot];
	CompiledExpr *cexpr;
	ParseState *pstate;
	Node	   *node;

	if (f->type == type && (typmod < 0 || f->typmod == typmod))
		return NULL;
	pstate = make_parsestate(NULL);
	node = coerce_to_target_type(pstate, (Node *) make_field_param(scope->schema, slot, -1),
								 f->type, type, typmod,
								 COERCION_EXPLICIT, COERCE_EXPLICIT_CAST, -1);
	if (node == NULL)
		spec_error(path, ERRCODE_DATATYPE_MISMATCH,
				   psprintf("Convert the value in the expression that makes the field, for example with ::%s.",
							format_type_be(type)),
				   "field \"%s\" of type %s cannot be cast to %s %s",
				   f->name, format_type_be(f->type), target_desc, format_type_with_typemod(type, typmod));
	assign_expr_collations(pstate, node);
	cexpr = palloc0(sizeof(CompiledExpr));
	cexpr->text = psprintf("CAST(%s AS %s)", quote_identifier(f->name),
						   format_type_with_typemod(type, typmod));
	cexpr->path = path;
	cexpr->expr = plan_expr(node);
	cexpr->type = type;
	cexpr->typmod = typmod;
	cexpr->collation = exprCollation((Node *) cexpr->expr);
	return cexpr;
}

/*
 * text::timestamptz becomes mailer._timestamptz_iso(text): the same result,
 * much sooner for the ISO 8601 text event times usually are (iso_time.c).
 *
 * The function is looked up at each cast found, never kept across
 * compiles: its oid changes when the extension is dropped and created
 * again, and one lookup per cast is nothing beside compiling the rest.
 */
static Node *
faster_casts(Node *node, void *context)
{
	if (node == NULL)
		return NULL;
	node = expression_tree_mutator(node, faster_casts, context);
	if (IsA(node, CoerceViaIO) && ((CoerceViaIO *) node)->resulttype == TIMESTAMPTZOID &&
		exprType((Node *) ((CoerceViaIO *) node)->arg) == TEXTOID)
	{
		CoerceViaIO *cast = (CoerceViaIO *) node;
		Oid			argtype = TEXTOID;
		Oid			iso_func;

		iso_func = LookupFuncName(list_make2(makeString(MAILER_SCHEMA), makeString("_timestamptz_iso")),
								  1, &argtype, true);
		if (!OidIsValid(iso_func))
			return node;
		return (Node *) makeFuncExpr(iso_func, TIMESTAMPTZOID, list_make1(cast->arg),
									 InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL);
	}
	return node;
}

ExprRuntime *
expr_runtime_create(RecordSchema *schema)
{
	ExprRuntime *rt = palloc0(sizeof(ExprRuntime));

	rt->schema = schema;
	rt->econtext = CreateStandaloneExprContext();
	/* No params[] array: every value is fetched from the current record. */
	rt->params = palloc0(offsetof(ParamListInfoData, params));
	rt->params->paramFetch = record_param_fetch;
	rt->params->paramFetchArg = rt;
	rt->params->numParams = schema->nfields;
	rt->econtext->ecxt_param_list_info = rt->params;
	return rt;
}

void
expr_prepare(CompiledExpr *cexpr, ExprRuntime *rt)
{
	MemoryContext ctx = CurrentMemoryContext;

	if (cexpr == NULL)
		return;
	/* The executor checks EXECUTE on each function here: say which expression failed. */
	PG_TRY();
	{
		if (IsA(cexpr->expr, FuncExpr) && ((FuncExpr *) cexpr->expr)->funcretset)
			cexpr->set_state = ExecInitFunctionResultSet(cexpr->expr, rt->econtext, NULL);
		else if (IsA(cexpr->expr, OpExpr) && ((OpExpr *) cexpr->expr)->opretset)
			cexpr->set_state = ExecInitFunctionResultSet(cexpr->expr, rt->econtext, NULL);
		else
			cexpr->state = ExecInitExpr(cexpr->expr, NULL);
	}
	PG_CATCH();
	{
		rethrow_with_path(ctx, cexpr->path, cexpr->text, NULL);
	}
	PG_END_TRY();
}

Datum
expr_eval_set(CompiledExpr *cexpr, ExprRuntime *rt, Record *rec, bool *isnull, bool *done)
{
	ExprDoneCond is_done;
	Datum		d;

	rt->current = rec;
	d = ExecMakeFunctionResultSet(cexpr->set_state, rt->econtext,
								  rt->econtext->ecxt_per_tuple_memory, isnull, &is_done);
	*done = (is_done == ExprEndResult);
	return d;
}

static ParamExternData *
record_param_fetch(ParamListInfo params, int paramid, bool speculative,
				   ParamExternData *workspace)
{
	ExprRuntime *rt = (ExprRuntime *) params->paramFetchArg;
	int			slot = paramid - 1;

	/* Computed here, where the executor needs it first (json_scan.h). */
	if (unlikely(rt->current->pending != NULL) && rt->current->pending[slot])
		json_field_build(rt->current, slot);
	workspace->value = rt->current->values[slot];
	workspace->isnull = rt->current->isnull[slot];
	workspace->pflags = PARAM_FLAG_CONST;
	workspace->ptype = rt->schema->fields[slot].type;
	return workspace;
}

static Param *
make_field_param(RecordSchema *schema, int slot, int location)
{
	RecordField *f = &schema->fields[slot];
	Param	   *param = makeNode(Param);

	param->paramkind = PARAM_EXTERN;
	param->paramid = slot + 1;
	param->paramtype = f->type;
	param->paramtypmod = f->typmod;
	param->paramcollid = f->collation;
	param->location = location;
	return param;
}

/* A bare name that is a visible field becomes that field's Param. */
static Node *
field_ref_hook(ParseState *pstate, ColumnRef *cref)
{
	FieldScope *scope = (FieldScope *) pstate->p_ref_hook_state;
	Node	   *field;
	int			slot;

	if (list_length(cref->fields) != 1)
		return NULL;
	field = linitial(cref->fields);
	if (!IsA(field, String))
		return NULL;
	slot = field_scope_lookup(scope, strVal(field));
	if (slot < 0)
		return NULL;
	scope->schema->fields[slot].referenced = true;
	return (Node *) make_field_param(scope->schema, slot, cref->location);
}

static char *
describe_fields(FieldScope *scope)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < scope->nvisible; i++)
	{
		RecordField *f = &scope->schema->fields[scope->visible[i]];

		appendStringInfo(&buf, "%s%s %s", i ? ", " : "",
						 strcmp(f->name, "offset") == 0 ? "\"offset\"" : f->name,
						 format_type_be(f->type));
	}
	return buf.data;
}

/* Re-raise the error being handled with the JSON path in front. */
static void
rethrow_with_path(MemoryContext ctx, const char *path, const char *text, FieldScope *scope)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(ctx);
	edata = CopyErrorData();
	FlushErrorState();
	ereport(ERROR,
			(errcode(edata->sqlerrcode),
			 spec_errmsg(path, "%s", edata->message),
			 errdetail("The expression is: %s", text),
			 edata->sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE ?
			 errhint("A job's expressions run as its owner: grant EXECUTE on the function to the job's owner.") :
			 edata->hint ? errhint("%s", edata->hint) :
			 scope ? errhint("Expressions are SQL over the record's fields: %s.", describe_fields(scope)) :
			 errhint("Write one SQL expression, as in a SELECT list.")));
}
