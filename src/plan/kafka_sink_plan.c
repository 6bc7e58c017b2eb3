/*
 * kafka_sink_plan.c
 *		Plan a Kafka or Pulsar sink (plan_kafka_sink in sink_plan.h):
 *		compile the expressions that make a record's key, value and headers
 *		(a Pulsar message's properties) from an output record, and judge
 *		the Kafka producer's options.
 *
 * The user's expressions are wrapped, as parse trees, in the conversion
 * sink.format names: json is to_jsonb(expr)::text, text is expr::text,
 * bytes is expr::bytea.  The defaults are JSON objects built by
 * jsonb_build_object over output fields: the value holds every output
 * field; the key of an aggregate's record holds the key_by fields, and
 * window_start for a windowed job, which is what identifies a result row
 * (an upsert table's key), so that a compacted topic keeps every window's
 * latest answer and a merged session's tombstone removes its part.  Their
 * times are written in UTC, so that a key's bytes never depend on the
 * worker's TimeZone.
 *
 * Design: docs/ARCHITECTURE.md, "The Kafka sink".
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "plan/kafka_options.h"
#include "plan/pulsar_options.h"
#include "plan/plan.h"
#include "plan/sink_plan.h"
#include "plan/spec_error.h"

/* How the defaults write a timestamptz: ISO 8601 in UTC, to the microsecond. */
#define UTC_FORMAT "YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\""

/* Name/value pairs per jsonb_build_object call: a call takes at most 100 arguments. */
#define PAIRS_PER_CALL 50

static Node *as_bytes(Node *raw, ValueFormat format);
static Node *string_const(const char *s);
static Node *cast_to(Node *raw, char *type);
static Node *json_object_of(JobPlan *plan, int nslots, const int *slots);
static CompiledExpr *compile(JobPlan *plan, const char *text, Node *raw, const char *path);

SinkPlan *
plan_kafka_sink(JobPlan *plan, KafkaSinkSpec *spec)
{
	SinkPlan   *sink = palloc0(sizeof(SinkPlan));
	KafkaSinkPlan *kp = palloc0(sizeof(KafkaSinkPlan));
	FieldScope *scope = plan->out_scope;
	ListCell   *lc;
	int			h = 0;

	char	   *value_path = psprintf("%s.value", spec->path);
	char	   *key_path = psprintf("%s.key", spec->path);

	if (spec->pulsar)
		pulsar_check_options(spec->path, spec->service_url, spec->options, spec->owner);
	else
		kafka_check_sink_options(spec);
	sink->kafka = kp;
	sink->path = spec->path;
	sink->ncolumns = KAFKA_SINK_COLUMNS;
	sink->columns = palloc0(sizeof(SinkColumn) * KAFKA_SINK_COLUMNS);
	sink->columns[KAFKA_COLUMN_KEY].name = "key";
	sink->columns[KAFKA_COLUMN_VALUE].name = "value";
	sink->columns[KAFKA_COLUMN_HEADERS].name = "headers";
	for (int c = 0; c < KAFKA_SINK_COLUMNS; c++)
	{
		sink->columns[c].type = BYTEAOID;
		sink->columns[c].typmod = -1;
		sink->columns[c].typlen = -1;
		sink->columns[c].slot = -1;
	}

	if (spec->value)
		kp->value = compile(plan, spec->value, as_bytes(expr_parse(spec->value, value_path), spec->format),
							value_path);
	else
		kp->value = compile(plan, "the output row as JSON",
							json_object_of(plan, scope->nvisible, scope->visible), value_path);

	if (spec->key)
		kp->key = compile(plan, spec->key, as_bytes(expr_parse(spec->key, key_path), spec->format),
						  key_path);
	else if (plan->aggregated)
	{
		/* key_by fields, then window_start: the first slots of the output */
		int			n = plan->nkeys + (plan->window ? 1 : 0);
		int		   *slots = palloc(sizeof(int) * n);

		for (int i = 0; i < n; i++)
			slots[i] = i;
		kp->key = compile(plan, "the key fields as JSON", json_object_of(plan, n, slots), key_path);
	}

	kp->nheaders = list_length(spec->headers);
	kp->header_names = palloc0(sizeof(char *) * Max(kp->nheaders, 1));
	kp->headers = palloc0(sizeof(CompiledExpr *) * Max(kp->nheaders, 1));
	foreach(lc, spec->headers)
	{
		NamedExprSpec *ne = lfirst(lc);

		kp->header_names[h] = ne->name;
		kp->headers[h++] = compile(plan, ne->expr,
								   as_bytes(expr_parse(ne->expr, ne->path), FORMAT_TEXT), ne->path);
	}
	return sink;
}

/* raw converted to the bytes format names (text or bytea), as a parse tree. */
static Node *
as_bytes(Node *raw, ValueFormat format)
{
	switch (format)
	{
		case FORMAT_JSON:
			raw = (Node *) makeFuncCall(SystemFuncName("to_jsonb"),
										list_make1(raw), COERCE_EXPLICIT_CALL, -1);
			/* fall through */
		case FORMAT_TEXT:
			return (Node *) cast_to(raw, "text");
		case FORMAT_BYTES:
			return (Node *) cast_to(raw, "bytea");
	}
	pg_unreachable();
}

/* jsonb_build_object('name', name, ...)::text over output slots, in calls joined by ||. */
static Node *
json_object_of(JobPlan *plan, int nslots, const int *slots)
{
	Node	   *result = NULL;

	for (int from = 0; from < nslots || result == NULL; from += PAIRS_PER_CALL)
	{
		List	   *args = NIL;
		Node	   *call;

		for (int i = from; i < nslots && i < from + PAIRS_PER_CALL; i++)
		{
			RecordField *field = &plan->out_schema->fields[slots[i]];
			ColumnRef  *ref = makeNode(ColumnRef);
			Node	   *arg = (Node *) ref;

			ref->fields = list_make1(makeString(pstrdup(field->name)));
			ref->location = -1;
			/* A time in UTC whatever the worker's TimeZone: the same key each time. */
			if (field->type == TIMESTAMPTZOID)
				arg = (Node *) makeFuncCall(SystemFuncName("to_char"),
											list_make2(makeFuncCall(SystemFuncName("timezone"),
																	list_make2(string_const("UTC"), arg),
																	COERCE_EXPLICIT_CALL, -1),
													   string_const(UTC_FORMAT)),
											COERCE_EXPLICIT_CALL, -1);
			args = lappend(args, string_const(field->name));
			args = lappend(args, arg);
		}
		call = (Node *) makeFuncCall(SystemFuncName("jsonb_build_object"),
									 args, COERCE_EXPLICIT_CALL, -1);
		result = result == NULL ? call :
			(Node *) makeA_Expr(AEXPR_OP, list_make2(makeString("pg_catalog"), makeString("||")),
								result, call, -1);
	}
	return (Node *) cast_to(result, "text");
}

static Node *
string_const(const char *s)
{
	A_Const    *c = makeNode(A_Const);

	c->val.sval.type = T_String;
	c->val.sval.sval = pstrdup(s);
	c->location = -1;
	return (Node *) c;
}

/* CAST(raw AS pg_catalog.type) */
static Node *
cast_to(Node *raw, char *type)
{
	TypeCast   *tc = makeNode(TypeCast);

	tc->arg = raw;
	tc->typeName = SystemTypeName(type);
	tc->location = -1;
	return (Node *) tc;
}

static CompiledExpr *
compile(JobPlan *plan, const char *text, Node *raw, const char *path)
{
	return expr_compile(text, raw, path, plan->out_scope, EXPR_SCALAR);
}
