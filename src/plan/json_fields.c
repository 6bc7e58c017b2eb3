/*
 * json_fields.c
 *		Rewrite a plan to read top-level JSON fields straight from the
 *		message text (json_fields.h).
 *
 * When every use of the jsonb value is value->>'key' or value->'key' with
 * a constant key, each such access becomes a field of its own, which the
 * scanner (json_scan.c) fills from the text; the value itself is then never
 * built.  Any other use keeps the plan as it is.
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "nodes/nodeFuncs.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"

#include "plan/json_fields.h"

typedef struct Analysis
{
	JobPlan    *plan;
	bool		other_use;		/* the jsonb value is used whole somewhere */
	bool		field_use;		/* and a field of it somewhere */
	JsonFields *jf;
	RecordSchema *schema;
} Analysis;

static bool analyse(Node *node, Analysis *a);
static Node *rewrite(Node *node, Analysis *a);

static bool
is_value_param(Node *node)
{
	return node && IsA(node, Param) && ((Param *) node)->paramkind == PARAM_EXTERN &&
		((Param *) node)->paramid == FIELD_VALUE + 1;
}

/* value->>'k' or value->'k' (as operator or function): its key, else NULL. */
static char *
field_access(Node *node, bool *as_text)
{
	Oid			func;
	List	   *args;
	Node	   *key;

	if (IsA(node, OpExpr))
	{
		func = ((OpExpr *) node)->opfuncid;
		args = ((OpExpr *) node)->args;
	}
	else if (IsA(node, FuncExpr))
	{
		func = ((FuncExpr *) node)->funcid;
		args = ((FuncExpr *) node)->args;
	}
	else
		return NULL;
	if ((func != F_JSONB_OBJECT_FIELD_TEXT && func != F_JSONB_OBJECT_FIELD) ||
		list_length(args) != 2 || !is_value_param(linitial(args)))
		return NULL;
	key = lsecond(args);
	if (!IsA(key, Const) || ((Const *) key)->constisnull)
		return NULL;
	*as_text = func == F_JSONB_OBJECT_FIELD_TEXT;
	return TextDatumGetCString(((Const *) key)->constvalue);
}

/* The index of the field key, made on first use. */
static int
field_index(Analysis *a, const char *key)
{
	JsonFields *jf = a->jf;
	JsonField  *f;

	for (int i = 0; i < jf->nfields; i++)
		if (strcmp(jf->fields[i].key, key) == 0)
			return i;
	jf->fields = jf->nfields ? repalloc(jf->fields, sizeof(JsonField) * (jf->nfields + 1)) :
		palloc(sizeof(JsonField));
	f = &jf->fields[jf->nfields];
	f->key = pstrdup(key);
	f->key_len = strlen(key);
	f->text_slot = f->jsonb_slot = -1;
	return jf->nfields++;
}

/* The field's slot, made on first use. */
static int
field_slot(Analysis *a, const char *key, bool as_text)
{
	int			field = field_index(a, key);	/* may move jf->fields */
	JsonField  *f = &a->jf->fields[field];
	int		   *slot;

	slot = as_text ? &f->text_slot : &f->jsonb_slot;
	if (*slot < 0)
		*slot = record_schema_add(a->schema, psprintf("value%s'%s'", as_text ? "->>" : "->", key),
								  as_text ? TEXTOID : JSONBOID, -1,
								  as_text ? DEFAULT_COLLATION_OID : InvalidOid);
	return *slot;
}

static bool
analyse(Node *node, Analysis *a)
{
	bool		as_text;

	if (node == NULL)
		return false;
	if (field_access(node, &as_text) != NULL)
	{
		a->field_use = true;
		return false;
	}
	if (is_value_param(node))
	{
		a->other_use = true;
		return true;
	}
	return expression_tree_walker(node, analyse, a);
}

/*
 * A cast of value->>'k' through text (CoerceViaIO) whose type's input
 * function can be called straight on the field's text: strict (NULL stays
 * NULL without a call, as in the cast) and not volatile (one call serves
 * every use of the cast in a record).  The slot of its result, made on
 * first use; -1 when the cast is not one of those.
 */
static int
typed_field_slot(Analysis *a, CoerceViaIO *cast)
{
	bool		as_text;
	char	   *key = field_access((Node *) cast->arg, &as_text);
	JsonFields *jf = a->jf;
	JsonTypedField *t;
	Oid			input;
	Oid			ioparam;
	int			field;

	if (key == NULL || !as_text)
		return -1;
	getTypeInputInfo(cast->resulttype, &input, &ioparam);
	if (!func_strict(input) || func_volatile(input) == PROVOLATILE_VOLATILE)
		return -1;
	field = field_index(a, key);
	for (int i = 0; i < jf->ntyped; i++)
		if (jf->typed[i].field == field && jf->typed[i].type == cast->resulttype)
			return jf->typed[i].slot;
	jf->typed = jf->ntyped ? repalloc(jf->typed, sizeof(JsonTypedField) * (jf->ntyped + 1)) :
		palloc(sizeof(JsonTypedField));
	t = &jf->typed[jf->ntyped++];
	t->field = field;
	t->type = cast->resulttype;
	t->input = input;
	t->ioparam = ioparam;
	t->finfo = NULL;
	t->slot = record_schema_add(a->schema, psprintf("(value->>'%s')::%s", key, format_type_be(t->type)),
								t->type, -1, cast->resultcollid);
	return t->slot;
}

static Node *
rewrite(Node *node, Analysis *a)
{
	bool		as_text;
	char	   *key;

	if (node == NULL)
		return NULL;
	if (IsA(node, CoerceViaIO))
	{
		int			slot = typed_field_slot(a, (CoerceViaIO *) node);

		if (slot >= 0)
		{
			RecordField *f = &a->schema->fields[slot];
			Param	   *param = makeNode(Param);

			f->referenced = true;
			param->paramkind = PARAM_EXTERN;
			param->paramid = slot + 1;
			param->paramtype = f->type;
			param->paramtypmod = -1;
			param->paramcollid = f->collation;
			param->location = -1;
			return (Node *) param;
		}
	}
	key = field_access(node, &as_text);
	if (key != NULL)
	{
		RecordField *f;
		Param	   *param = makeNode(Param);

		param->paramkind = PARAM_EXTERN;
		param->paramid = field_slot(a, key, as_text) + 1;
		f = &a->schema->fields[param->paramid - 1];
		f->referenced = true;
		param->paramtype = f->type;
		param->paramtypmod = -1;
		param->paramcollid = f->collation;
		param->location = -1;
		return (Node *) param;
	}
	return expression_tree_mutator(node, rewrite, a);
}

/*
 * Whether an expression reads the record the message becomes: a sink
 * column's cast reads the output record, which is that one only without
 * an aggregate.
 */
static bool
reads_message(Analysis *a, bool over_output)
{
	return !over_output || a->plan->out_schema == a->plan->schema;
}

static void
analyse_expr(CompiledExpr *e, bool over_output, void *arg)
{
	Analysis   *a = arg;

	if (reads_message(a, over_output))
		(void) analyse((Node *) e->expr, a);
}

static void
rewrite_expr(CompiledExpr *e, bool over_output, void *arg)
{
	Analysis   *a = arg;

	if (reads_message(a, over_output))
		e->expr = (Expr *) rewrite((Node *) e->expr, a);
}

JsonFields *
json_fields_plan(JobPlan *plan)
{
	Analysis	a = {0};

	/* \u escapes are decoded to UTF-8 here: other encodings take the jsonb path. */
	if (plan->spec->source.format != FORMAT_JSON || GetDatabaseEncoding() != PG_UTF8)
		return NULL;
	a.plan = plan;
	a.schema = plan->schema;
	plan_foreach_expr(plan, analyse_expr, &a);
	a.jf = palloc0(sizeof(JsonFields));
	/* A sink column fed the value itself needs the jsonb too. */
	if (plan->out_schema == plan->schema)
		for (int i = 0; i < plan->sink->ncolumns; i++)
			if (plan->sink->columns[i].slot == FIELD_VALUE && plan->sink->columns[i].cast == NULL)
				a.other_use = a.jf->sink_reads_value = true;

	/*
	 * A value used whole and never for a field is built from every message,
	 * as before.  Used whole and for fields, it is built only for the
	 * records that reach a whole use: a filter on a field drops most
	 * records of many jobs before any such use.
	 */
	if (a.other_use && !a.field_use)
		return NULL;
	plan_foreach_expr(plan, rewrite_expr, &a);
	if (a.other_use)
		a.jf->lazy_value = true;
	else
		plan->schema->fields[FIELD_VALUE].referenced = false;
	a.jf->nslots = plan->schema->nfields;
	return a.jf;
}
