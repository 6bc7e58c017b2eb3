/*
 * expr.h
 *		SQL expressions over a record's fields, compiled once and evaluated
 *		per record by the executor, with no SPI round trip.
 *
 * A field name in an expression becomes an external Param whose value is
 * fetched from the current record, so the planner and executor do all the
 * work: operators, casts, functions (user-defined ones too), permissions.
 */
#ifndef EXPR_H
#define EXPR_H

#include "executor/executor.h"
#include "nodes/params.h"

#include "base/record.h"

typedef enum ExprUse
{
	EXPR_SCALAR,				/* any type; an unknown literal becomes text */
	EXPR_BOOLEAN,				/* filter */
	EXPR_TIMESTAMPTZ,			/* event_time */
	EXPR_SET					/* flat_map: a set-returning function call */
} ExprUse;

typedef struct CompiledExpr
{
	const char *text;			/* as written */
	const char *path;			/* JSON path, for errors */
	Expr	   *expr;			/* planned expression */
	Oid			type;
	int32		typmod;
	Oid			collation;
	ExprState  *state;			/* scalar uses */
	SetExprState *set_state;	/* EXPR_SET */
} CompiledExpr;

/* What evaluation needs: an expression context and the current record. */
typedef struct ExprRuntime
{
	ExprContext *econtext;
	ParamListInfo params;
	RecordSchema *schema;
	Record	   *current;
} ExprRuntime;

/*
 * Parse text as one SQL expression and return its raw parse tree.  Anything
 * but a single expression (a FROM, a second statement, ...) is an error
 * naming path.
 */
extern Node *expr_parse(const char *text, const char *path);

/* Compile an expression (text, or raw when not NULL) against scope. */
extern CompiledExpr *expr_compile(const char *text, Node *raw, const char *path,
								  FieldScope *scope, ExprUse use);

/*
 * Parse analysis of an aggregate call (raw, the text's parse tree) against
 * scope: the Aggref, its arguments and FILTER resolved as in a SELECT list.
 * ERROR naming path when it is not one aggregate call, or uses a subquery
 * or a set-returning function.
 */
extern Node *expr_transform_aggregate(const char *text, Node *raw, const char *path,
									  FieldScope *scope);

/* Compile a part of a transformed aggregate call (an argument, its FILTER). */
extern CompiledExpr *expr_compile_part(const char *text, const char *path, Node *node,
									   FieldScope *scope);

/*
 * Compile a cast of slot's field to (type, typmod), as CAST(field AS type)
 * would; NULL when no conversion is needed.  ERROR naming path when no cast
 * exists.
 */
extern CompiledExpr *expr_compile_cast(int slot, FieldScope *scope, Oid type, int32 typmod,
									   const char *path, const char *target_desc);

/* Build executor state for compiled expressions (the worker does this once). */
extern void expr_prepare(CompiledExpr *cexpr, ExprRuntime *rt);

extern ExprRuntime *expr_runtime_create(RecordSchema *schema);

/* Evaluate a scalar expression for rec, in the current memory context. */
static inline Datum
expr_eval(CompiledExpr *cexpr, ExprRuntime *rt, Record *rec, bool *isnull)
{
	rt->current = rec;
	return ExecEvalExpr(cexpr->state, rt->econtext, isnull);
}

/*
 * Evaluate a set-returning expression for rec: call repeatedly; *done is
 * set when the set is exhausted (the returned value is then meaningless).
 */
extern Datum expr_eval_set(CompiledExpr *cexpr, ExprRuntime *rt, Record *rec,
						   bool *isnull, bool *done);

#endif							/* EXPR_H */
