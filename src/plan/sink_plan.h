/*
 * sink_plan.h
 *		The sink table's part of a plan: which columns receive which output
 *		fields, the conflict key of an upsert and its equality, and the SQL
 *		that writes a batch.
 *
 * The table is judged as the job's owner sees it: it must exist, take
 * every aggregate output, and let the owner insert (and update) the
 * columns the job writes.
 */
#ifndef SINK_PLAN_H
#define SINK_PLAN_H

#include "storage/lockdefs.h"
#include "utils/jsonb.h"

#include "plan/expr.h"
#include "plan/spec.h"

struct JobPlan;

/* A sink column that receives an output field. */
typedef struct SinkColumn
{
	char	   *name;
	Oid			type;
	int32		typmod;
	Oid			collation;		/* the column's, when planned */
	int			slot;			/* output field slot */
	CompiledExpr *cast;			/* NULL when the field has the column's type */
	bool		is_key;			/* a conflict column of an upsert */
	/* is_key: the conflict index's equality, a hash that agrees with it (or InvalidOid), its collation */
	Oid			key_eq_op;
	Oid			key_eq_proc;
	Oid			key_hash_proc;
	Oid			key_collation;
	bool		key_hash_image; /* the equality is the image's (btree's equalimage): hash the bytes */
	int16		typlen;
	bool		typbyval;
	char		typalign;
	bool		via_text;		/* passed as text (an array column: there are no arrays of arrays) */
} SinkColumn;

/*
 * A Kafka sink's record, made by expressions over the output record: key
 * and value are text or bytea (their bytes are the message's), headers text.
 */
typedef struct KafkaSinkPlan
{
	CompiledExpr *key;			/* NULL: records have no key */
	CompiledExpr *value;
	int			nheaders;
	char	  **header_names;
	CompiledExpr **headers;
} KafkaSinkPlan;

/* A Kafka sink's "columns": what sink_project makes of an output record. */
typedef enum KafkaSinkColumn
{
	KAFKA_COLUMN_KEY,			/* bytea or text, null: no key */
	KAFKA_COLUMN_VALUE,			/* bytea or text, null: a tombstone */
	KAFKA_COLUMN_HEADERS,		/* bytea (kafka_headers_encode), null: none */
	KAFKA_SINK_COLUMNS
} KafkaSinkColumn;

typedef struct SinkPlan
{
	KafkaSinkPlan *kafka;		/* a Kafka sink: the table fields below are unset */
	const char *path;			/* the spec's "sink" or "sinks[i]", for errors */
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

/*
 * Plan the sink of a plan whose output (out_schema, out_scope, out_paths)
 * is built.  refuse_unhashable_keys: refuse a conflict key type without a
 * hash function, as create_job and describe_job do; a worker of an older
 * job accepts one.
 */
extern SinkPlan *plan_sink(struct JobPlan *plan, bool refuse_unhashable_keys);

/* plan_sink of a Kafka sink, or of a changelog's (kafka_sink_plan.c). */
extern SinkPlan *plan_kafka_sink(struct JobPlan *plan, KafkaSinkSpec *spec);

/*
 * The sink's part of the plan compiled again against the table its name
 * names now (the sink table may have been dropped and made again).
 */
extern SinkPlan *plan_sink_again(struct JobPlan *plan);

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
extern Jsonb *plan_pin_sink(Jsonb *doc, struct JobPlan *plan);

#endif							/* SINK_PLAN_H */
