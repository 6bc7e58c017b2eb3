/*
 * record.h
 *		The record that flows through a job, and the schema of its fields.
 *
 * A record is an array of Datums, one per field slot.  Every source fills
 * the same base fields (key, value, topic, partition, "offset", timestamp,
 * headers); a map, flat_map or key_by step adds a slot for each field it
 * makes.  A step that replaces a field gets a new slot under the same name,
 * so each slot keeps one type for the whole job.
 */
#ifndef RECORD_H
#define RECORD_H

#include "utils/timestamp.h"

/* The base fields, in slot order. */
typedef enum BaseField
{
	FIELD_KEY = 0,
	FIELD_VALUE,
	FIELD_TOPIC,
	FIELD_PARTITION,
	FIELD_OFFSET,
	FIELD_TIMESTAMP,
	FIELD_HEADERS,
	NUM_BASE_FIELDS
} BaseField;

typedef struct RecordField
{
	char	   *name;
	Oid			type;
	int32		typmod;
	Oid			collation;
	int16		typlen;
	bool		typbyval;
	bool		referenced;		/* named by an expression or a sink column */
} RecordField;

typedef struct RecordSchema
{
	int			nfields;
	int			capacity;
	RecordField *fields;
} RecordSchema;

/*
 * The fields visible at a point of the pipeline: slot numbers, later ones
 * hiding earlier ones of the same name.
 */
typedef struct FieldScope
{
	RecordSchema *schema;
	int			nvisible;
	int		   *visible;
} FieldScope;

typedef struct Record
{
	TimestampTz event_time;
	Datum	   *values;
	bool	   *isnull;

	/*
	 * Fields computed at their first use, from the message they were read
	 * from (json_scan.h: the JSON value built, a field cast): pending[slot]
	 * until then.  NULL when no field is.
	 */
	bool	   *pending;
	struct JsonPending *json;
} Record;

/* A schema with the base fields; value_type depends on source.format. */
extern RecordSchema *record_schema_create(Oid value_type);

/* A schema with no fields (the output of an aggregate). */
extern RecordSchema *record_schema_create_empty(void);

/* Add a field slot; returns its number. */
extern int	record_schema_add(RecordSchema *schema, const char *name, Oid type,
							  int32 typmod, Oid collation);

/* A scope where every field the schema has now is visible. */
extern FieldScope *field_scope_all(RecordSchema *schema);
extern FieldScope *field_scope_copy(FieldScope *scope);

/* Make slot visible in scope, hiding an older field of the same name. */
extern void field_scope_bind(FieldScope *scope, int slot);

/* The slot a name resolves to in scope, or -1. */
extern int	field_scope_lookup(FieldScope *scope, const char *name);

/* Allocate a record with every field NULL, in the current memory context. */
extern Record *record_alloc(RecordSchema *schema);

/* A record's fields as a JSON object of their text forms (for dead letters). */
extern char *record_to_json(RecordSchema *schema, Record *rec);

/*
 * A JSON object of n values' text forms: names[i] to the text of values[i],
 * of type types[i], or to null when nulls[i].  How a dead letter shows a
 * record or a sink row.
 */
extern char *values_to_json(int n, const char *const *names, const Oid *types,
							const Datum *values, const bool *nulls);

/* Copy a record's arrays (not the values they point to). */
extern Record *record_copy(RecordSchema *schema, Record *src);

#endif							/* RECORD_H */
