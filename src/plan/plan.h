/*
 * plan.h
 *		A job spec compiled against the database: the record's fields, the
 *		expressions of every step, the keyed stage and the sink table.
 *
 * create_job and describe_job compile a plan to validate a spec; a job
 * worker compiles the same plan once, at start, and runs it.
 */
#ifndef PLAN_H
#define PLAN_H

#include "plan/aggregate_def.h"
#include "plan/expr.h"
#include "plan/spec.h"
#include "storage/lockdefs.h"

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

/* A sink column that receives an output field. */
typedef struct SinkColumn
{
	char	   *name;
	Oid			type;
	int32		typmod;
	int			slot;			/* output field slot */
	CompiledExpr *cast;			/* NULL when the field has the column's type */
	bool		is_key;			/* a conflict column of an upsert */
	/* is_key: the conflict index's equality, a hash that agrees with it (or InvalidOid), its collation */
	Oid			key_eq_op;
	Oid			key_eq_proc;
	Oid			key_hash_proc;
	Oid			key_collation;
	int16		typlen;
	bool		typbyval;
	char		typalign;
} SinkColumn;

typedef struct SinkPlan
{
	Oid			relid;
	char	   *relname;		/* schema-qualified, quoted */
	bool		upsert;
	int			ncolumns;
	SinkColumn *columns;
	int			nkeys;			/* upsert: conflict columns among columns */
	bool		key_nulls_distinct;	/* the conflict index never matches a null key */
	Oid			key_index;		/* upsert: the conflict index the keys are compared by */
	char	   *insert_sql;		/* $n are arrays, one per column */
	char	   *delete_sql;		/* upsert: delete the rows of keys given as the insert's $n */
	Oid		   *param_types;
} SinkPlan;

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
 * The sink's part of the plan compiled again against the table its name
 * names now (the sink table may have been dropped and made again).
 */
extern SinkPlan *plan_sink_again(JobPlan *plan);

/*
 * The sink table the spec names, locked in lockmode, or InvalidOid when no
 * table has that name now.
 */
extern Oid	plan_sink_relid(SinkSpec *spec, LOCKMODE lockmode);

/*
 * The unique index an upsert into table relid (locked) arbitrates on now,
 * or InvalidOid when it has none.
 */
extern Oid	plan_sink_key_index(SinkSpec *spec, Oid relid);

/*
 * The spec as create_job stores it: sink.table schema-qualified as it
 * resolved, and sink.mode as it resolved when the spec left it out.
 */
extern Jsonb *plan_pin_sink(Jsonb *doc, JobPlan *plan);

/* The plan as a person reads it (describe_job). */
extern char *plan_describe(JobPlan *plan);

#endif							/* PLAN_H */
