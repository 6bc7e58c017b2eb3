/*
 * aggregate_call.h
 *		Any aggregate PostgreSQL knows, as an "aggregate" step compiles it:
 *		the functions pg_aggregate names for it, its arguments, FILTER,
 *		DISTINCT and ORDER BY, and the form its running state is kept in.
 *		Running it is operators/agg_general.h's business.
 *
 * docs/ARCHITECTURE.md, "Any aggregate", gives the reasons for the forms.
 */
#ifndef AGGREGATE_CALL_H
#define AGGREGATE_CALL_H

#include "fmgr.h"
#include "nodes/primnodes.h"

#include "plan/expr.h"

/*
 * How a key's running state is kept, and stored in the state backend.  The
 * values are recorded in each checkpoint's state layout: append new ones,
 * never renumber.
 */
typedef enum AggStateForm
{
	AGG_FORM_VALUE,				/* the transition value, stored through its type's send/receive */
	AGG_FORM_SERIAL,			/* internal, kept and stored as serialfn's bytes */
	AGG_FORM_INPUTS				/* the inputs themselves, replayed when the result is made */
} AggStateForm;

/* One sort key of the inputs (DISTINCT, ORDER BY): an input column and its ordering. */
typedef struct AggSortKey
{
	int			input;			/* index into GeneralAggDef.inputs */
	Oid			sort_op;
	Oid			collation;
	bool		nulls_first;
} AggSortKey;

typedef struct GeneralAggDef
{
	Aggref	   *aggref;			/* as parse analysis made it (AggGetAggref gives it to the functions) */
	Oid			aggfnoid;
	AggStateForm form;

	/*
	 * The values a record gives: the transition function's arguments first
	 * (ntransargs of them), then ORDER BY expressions that are not
	 * arguments.  They travel packed in one bytea (agg_general.h).
	 */
	int			ninputs;
	int			ntransargs;
	CompiledExpr **inputs;
	int16	   *input_typlen;
	bool	   *input_typbyval;
	CompiledExpr *filter;		/* FILTER (WHERE ...), or NULL */

	/* AGG_FORM_INPUTS: the order the inputs are replayed in; DISTINCT keeps one of equal ones */
	int			nsortkeys;
	AggSortKey *sortkeys;
	bool		distinct;

	Oid			transtype;
	int16		transtyplen;
	bool		transtypbyval;
	char	   *initval_text;	/* pg_aggregate.agginitval, NULL when null */
	Oid			inputcollid;
	bool		finalextra;		/* the final function takes the arguments too (as nulls) */

	/* fn_oid InvalidOid where the aggregate has none */
	FmgrInfo	transfn;
	FmgrInfo	combinefn;
	FmgrInfo	serialfn;
	FmgrInfo	deserialfn;
	FmgrInfo	finalfn;
	/* AGG_FORM_VALUE: the transition type's binary I/O */
	FmgrInfo	sendfn;
	FmgrInfo	recvfn;
	Oid			recv_ioparam;
} GeneralAggDef;

/*
 * Compile the call (raw: its parse tree) as any aggregate: ERROR naming
 * path where PostgreSQL would refuse it, or where a job cannot keep its
 * state (an ordered-set aggregate), or the job's owner may not EXECUTE it.
 * *result_type is the aggregate's result type.
 */
extern GeneralAggDef *aggregate_call_compile(const char *text, Node *raw, const char *path,
											 FieldScope *scope, Oid *result_type);

/* Whether two partial states can be combined (session windows need it). */
static inline bool
aggregate_call_combines(const GeneralAggDef *g)
{
	return g->form == AGG_FORM_INPUTS || OidIsValid(g->combinefn.fn_oid);
}

/* "transition x, combine y, final z; state: ..." for describe_job */
extern char *aggregate_call_describe(const GeneralAggDef *g);

#endif							/* AGGREGATE_CALL_H */
