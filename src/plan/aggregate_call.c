/*
 * aggregate_call.c
 *		Compile any aggregate call through the catalog (aggregate_call.h).
 *
 * The parser resolves the call as it would in a SELECT list, over the
 * record's fields: overloads, polymorphic and variadic arguments, implicit
 * casts, DISTINCT, ORDER BY and FILTER.  pg_aggregate then names the
 * functions that run it, and the privileges are checked as ExecInitAgg
 * checks them: EXECUTE on the aggregate for the job's owner, EXECUTE on its
 * functions for the aggregate's owner.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_aggregate.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "access/tupdesc.h"
#include "nodes/nodeFuncs.h"
#include "parser/parse_agg.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "plan/aggregate_call.h"
#include "plan/spec_error.h"

static void check_execute(const char *path, Oid fn, Oid role, const char *what, Oid aggfnoid);
static void set_fn(FmgrInfo *finfo, Oid fn, Expr *expr);
static AggStateForm choose_form(GeneralAggDef *g, Aggref *aggref, Oid serialfn, Oid deserialfn);
static bool has_binary_io(Oid type);
static void compile_inputs(GeneralAggDef *g, Aggref *aggref, const char *text, const char *path,
						   FieldScope *scope);

GeneralAggDef *
aggregate_call_compile(const char *text, Node *raw, const char *path, FieldScope *scope,
					   Oid *result_type)
{
	GeneralAggDef *g = palloc0(sizeof(GeneralAggDef));
	Aggref	   *aggref = (Aggref *) expr_transform_aggregate(text, raw, path, scope);
	Oid			input_types[FUNC_MAX_ARGS];
	int			nargs;
	HeapTuple	tup;
	Form_pg_aggregate form;
	Oid			agg_owner;
	Oid			fns[5];
	Datum		initval;
	bool		initval_null;
	Expr	   *transfn_expr;
	Expr	   *unused_expr;
	Expr	   *expr;

	g->aggref = aggref;
	g->aggfnoid = aggref->aggfnoid;
	*result_type = aggref->aggtype;
	if (aggref->aggkind != AGGKIND_NORMAL)
		spec_error(path, ERRCODE_FEATURE_NOT_SUPPORTED,
				   "Keep the values in a table and compute it in SQL, or use an aggregate whose state can be kept, such as an approximate one.",
				   "%s is an ordered-set aggregate: its state is a sort of all its input inside the executor, which a job cannot keep between checkpoints",
				   get_func_name(aggref->aggfnoid));
	check_execute(path, aggref->aggfnoid, GetUserId(), "aggregate", aggref->aggfnoid);

	tup = SearchSysCache1(AGGFNOID, ObjectIdGetDatum(aggref->aggfnoid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for aggregate %u", aggref->aggfnoid);
	form = (Form_pg_aggregate) GETSTRUCT(tup);
	fns[0] = form->aggtransfn;
	fns[1] = form->aggfinalfn;
	fns[2] = form->aggcombinefn;
	fns[3] = form->aggserialfn;
	fns[4] = form->aggdeserialfn;
	g->finalextra = form->aggfinalextra;
	initval = SysCacheGetAttr(AGGFNOID, tup, Anum_pg_aggregate_agginitval, &initval_null);
	g->initval_text = initval_null ? NULL : text_to_cstring((struct varlena *) DatumGetPointer(initval));
	nargs = get_aggregate_argtypes(aggref, input_types);
	g->transtype = resolve_aggregate_transtype(aggref->aggfnoid, form->aggtranstype,
											   input_types, nargs);
	ReleaseSysCache(tup);

	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(aggref->aggfnoid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", aggref->aggfnoid);
	agg_owner = ((Form_pg_proc) GETSTRUCT(tup))->proowner;
	ReleaseSysCache(tup);
	for (int i = 0; i < lengthof(fns); i++)
		if (OidIsValid(fns[i]))
			check_execute(path, fns[i], agg_owner, "function", aggref->aggfnoid);

	get_typlenbyval(g->transtype, &g->transtyplen, &g->transtypbyval);
	g->inputcollid = aggref->inputcollid;
	g->ntransargs = nargs;
	compile_inputs(g, aggref, text, path, scope);
	g->form = choose_form(g, aggref, fns[3], fns[4]);

	build_aggregate_transfn_expr(input_types, nargs, 0, aggref->aggvariadic, g->transtype,
								 g->inputcollid, fns[0], InvalidOid, &transfn_expr, &unused_expr);
	set_fn(&g->transfn, fns[0], transfn_expr);
	if (OidIsValid(fns[1]))
	{
		build_aggregate_finalfn_expr(input_types, 1 + (g->finalextra ? nargs : 0), g->transtype,
									 aggref->aggtype, g->inputcollid, fns[1], &expr);
		set_fn(&g->finalfn, fns[1], expr);
	}
	if (OidIsValid(fns[2]))
	{
		/* the combine function is a transition function whose input is a state */
		build_aggregate_transfn_expr(&g->transtype, 1, 0, false, g->transtype, g->inputcollid,
									 fns[2], InvalidOid, &expr, &unused_expr);
		set_fn(&g->combinefn, fns[2], expr);
	}
	if (g->form == AGG_FORM_SERIAL)
	{
		build_aggregate_serialfn_expr(fns[3], &expr);
		set_fn(&g->serialfn, fns[3], expr);
		build_aggregate_deserialfn_expr(fns[4], &expr);
		set_fn(&g->deserialfn, fns[4], expr);
	}
	if (g->form == AGG_FORM_VALUE)
	{
		Oid			send;
		Oid			recv;
		bool		varlena;

		getTypeBinaryOutputInfo(g->transtype, &send, &varlena);
		getTypeBinaryInputInfo(g->transtype, &recv, &g->recv_ioparam);
		set_fn(&g->sendfn, send, NULL);
		set_fn(&g->recvfn, recv, NULL);
	}
	return g;
}

/*
 * The form of the state.  DISTINCT and ORDER BY need the inputs (as
 * PostgreSQL sorts them before the transition function sees any); so does
 * an internal state PostgreSQL cannot serialize (array_agg, string_agg and
 * the json aggregates in 15), or a transition type without binary I/O or
 * of no fixed row type (an anonymous record).
 */
static AggStateForm
choose_form(GeneralAggDef *g, Aggref *aggref, Oid serialfn, Oid deserialfn)
{
	if (aggref->aggdistinct != NIL || aggref->aggorder != NIL)
		return AGG_FORM_INPUTS;
	if (g->transtype == INTERNALOID)
		return OidIsValid(serialfn) && OidIsValid(deserialfn) ? AGG_FORM_SERIAL : AGG_FORM_INPUTS;
	return has_binary_io(g->transtype) ? AGG_FORM_VALUE : AGG_FORM_INPUTS;
}

/*
 * Whether a value of type can go through its send and receive functions:
 * those of an array, a row, a domain or a range call the ones of what they
 * hold, which may have none (hll_hashval[]).
 */
static bool
has_binary_io(Oid type)
{
	HeapTuple	tup;
	Form_pg_type t;
	bool		ok;
	Oid			elem;
	char		typtype;

	check_stack_depth();
	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(type));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for type %u", type);
	t = (Form_pg_type) GETSTRUCT(tup);
	ok = OidIsValid(t->typsend) && OidIsValid(t->typreceive) && t->typtype != TYPTYPE_PSEUDO;
	typtype = t->typtype;
	elem = IsTrueArrayType(t) ? t->typelem : InvalidOid;
	ReleaseSysCache(tup);
	if (!ok)
		return false;
	if (OidIsValid(elem))
		return has_binary_io(elem);
	if (typtype == TYPTYPE_DOMAIN)
		return has_binary_io(getBaseType(type));
	if (typtype == TYPTYPE_RANGE)
		return has_binary_io(get_range_subtype(type));
	if (typtype == TYPTYPE_MULTIRANGE)
		return has_binary_io(get_multirange_range(type));
	if (typtype == TYPTYPE_COMPOSITE)
	{
		TupleDesc	desc = lookup_rowtype_tupdesc(type, -1);

		for (int i = 0; ok && i < desc->natts; i++)
			if (!TupleDescAttr(desc, i)->attisdropped)
				ok = has_binary_io(TupleDescAttr(desc, i)->atttypid);
		ReleaseTupleDesc(desc);
	}
	return ok;
}

/* The arguments, ORDER BY expressions and FILTER, compiled; the sort keys. */
static void
compile_inputs(GeneralAggDef *g, Aggref *aggref, const char *text, const char *path,
			   FieldScope *scope)
{
	List	   *sortlist = aggref->aggdistinct != NIL ? aggref->aggdistinct : aggref->aggorder;
	ListCell   *lc;
	int			i = 0;

	g->ninputs = list_length(aggref->args);
	g->inputs = palloc0(sizeof(CompiledExpr *) * Max(g->ninputs, 1));
	g->input_typlen = palloc0(sizeof(int16) * Max(g->ninputs, 1));
	g->input_typbyval = palloc0(sizeof(bool) * Max(g->ninputs, 1));
	foreach(lc, aggref->args)
	{
		TargetEntry *tle = lfirst(lc);

		g->inputs[i] = expr_compile_part(text, path, (Node *) tle->expr, scope);
		get_typlenbyval(g->inputs[i]->type, &g->input_typlen[i], &g->input_typbyval[i]);
		i++;
	}
	if (aggref->aggfilter)
		g->filter = expr_compile_part(text, path, (Node *) aggref->aggfilter, scope);

	g->distinct = aggref->aggdistinct != NIL;
	g->nsortkeys = list_length(sortlist);
	g->sortkeys = palloc0(sizeof(AggSortKey) * Max(g->nsortkeys, 1));
	i = 0;
	foreach(lc, sortlist)
	{
		SortGroupClause *sgc = lfirst(lc);
		int			col = 0;
		ListCell   *lt;

		foreach(lt, aggref->args)
		{
			if (((TargetEntry *) lfirst(lt))->ressortgroupref == sgc->tleSortGroupRef)
				break;
			col++;
		}
		Assert(col < g->ninputs);
		g->sortkeys[i].input = col;
		g->sortkeys[i].sort_op = sgc->sortop;
		g->sortkeys[i].collation = g->inputs[col]->collation;
		g->sortkeys[i].nulls_first = sgc->nulls_first;
		i++;
	}
}

/*
 * EXECUTE on fn for role, as the executor would check it when the job runs:
 * refused now, at create_job, rather than at the worker's start.
 */
static void
check_execute(const char *path, Oid fn, Oid role, const char *what, Oid aggfnoid)
{
	if (pg_proc_aclcheck(fn, role, ACL_EXECUTE) == ACLCHECK_OK)
		return;
	if (fn == aggfnoid)
		spec_error(path, ERRCODE_INSUFFICIENT_PRIVILEGE,
				   psprintf("A job's aggregates run as its owner: GRANT EXECUTE ON FUNCTION %s TO %s.",
							format_procedure(fn), GetUserNameFromId(role, false)),
				   "permission denied for aggregate %s", get_func_name(fn));
	spec_error(path, ERRCODE_INSUFFICIENT_PRIVILEGE,
			   psprintf("The aggregate's owner needs EXECUTE on the functions it calls: GRANT EXECUTE ON FUNCTION %s TO %s.",
						format_procedure(fn), GetUserNameFromId(role, false)),
			   "permission denied for function %s, which aggregate %s calls",
			   get_func_name(fn), get_func_name(aggfnoid));
}

static void
set_fn(FmgrInfo *finfo, Oid fn, Expr *expr)
{
	fmgr_info(fn, finfo);
	finfo->fn_expr = (Node *) expr;
}

char *
aggregate_call_describe(const GeneralAggDef *g)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "transition %s, combine %s, final %s",
					 format_procedure(g->transfn.fn_oid),
					 OidIsValid(g->combinefn.fn_oid) ? format_procedure(g->combinefn.fn_oid) : "none",
					 OidIsValid(g->finalfn.fn_oid) ? format_procedure(g->finalfn.fn_oid) : "none");
	switch (g->form)
	{
		case AGG_FORM_VALUE:
			appendStringInfo(&buf, "; state: %s, stored through its send and receive functions",
							 format_type_be(g->transtype));
			break;
		case AGG_FORM_SERIAL:
			appendStringInfo(&buf, "; state: internal, stored through %s and %s",
							 format_procedure(g->serialfn.fn_oid),
							 format_procedure(g->deserialfn.fn_oid));
			break;
		case AGG_FORM_INPUTS:
			appendStringInfo(&buf, "; state: the key's %sinputs (%s), replayed through the transition function, at most mailer.aggregate_state_limit per key",
							 g->distinct ? "distinct " : "",
							 g->distinct ? "DISTINCT" : g->nsortkeys > 0 ? "ORDER BY" :
							 g->transtype == INTERNALOID ? "its internal state has no serialization" :
							 "its state type has no binary send and receive");
			break;
	}
	return buf.data;
}
