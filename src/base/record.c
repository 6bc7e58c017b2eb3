/*
 * record.c
 *		Record schemas and field scopes (see record.h).
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "utils/json.h"
#include "utils/lsyscache.h"

#include "base/record.h"

RecordSchema *
record_schema_create_empty(void)
{
	RecordSchema *schema = palloc0(sizeof(RecordSchema));

	schema->capacity = 16;
	schema->fields = palloc0(sizeof(RecordField) * schema->capacity);
	return schema;
}

RecordSchema *
record_schema_create(Oid value_type)
{
	RecordSchema *schema = record_schema_create_empty();

	record_schema_add(schema, "key", TEXTOID, -1, DEFAULT_COLLATION_OID);
	record_schema_add(schema, "value", value_type, -1,
					  value_type == TEXTOID ? DEFAULT_COLLATION_OID : InvalidOid);
	record_schema_add(schema, "topic", TEXTOID, -1, DEFAULT_COLLATION_OID);
	record_schema_add(schema, "partition", INT4OID, -1, InvalidOid);
	record_schema_add(schema, "offset", INT8OID, -1, InvalidOid);
	record_schema_add(schema, "timestamp", TIMESTAMPTZOID, -1, InvalidOid);
	record_schema_add(schema, "headers", JSONBOID, -1, InvalidOid);
	Assert(schema->nfields == NUM_BASE_FIELDS);
	return schema;
}

int
record_schema_add(RecordSchema *schema, const char *name, Oid type, int32 typmod, Oid collation)
{
	RecordField *f;

	if (schema->nfields == schema->capacity)
	{
		schema->capacity *= 2;
		schema->fields = repalloc(schema->fields, sizeof(RecordField) * schema->capacity);
	}
	f = &schema->fields[schema->nfields];
	f->name = pstrdup(name);
	f->type = type;
	f->typmod = typmod;
	f->collation = collation;
	get_typlenbyval(type, &f->typlen, &f->typbyval);
	return schema->nfields++;
}

FieldScope *
field_scope_all(RecordSchema *schema)
{
	FieldScope *scope = palloc0(sizeof(FieldScope));

	scope->schema = schema;
	scope->visible = palloc(sizeof(int) * Max(schema->nfields, 1));
	for (int i = 0; i < schema->nfields; i++)
		scope->visible[scope->nvisible++] = i;
	return scope;
}

FieldScope *
field_scope_copy(FieldScope *scope)
{
	FieldScope *copy = palloc0(sizeof(FieldScope));

	copy->schema = scope->schema;
	copy->nvisible = scope->nvisible;
	copy->visible = palloc(sizeof(int) * (scope->nvisible + 1));
	memcpy(copy->visible, scope->visible, sizeof(int) * scope->nvisible);
	return copy;
}

void
field_scope_bind(FieldScope *scope, int slot)
{
	const char *name = scope->schema->fields[slot].name;

	for (int i = 0; i < scope->nvisible; i++)
	{
		if (strcmp(scope->schema->fields[scope->visible[i]].name, name) == 0)
		{
			scope->visible[i] = slot;
			return;
		}
	}
	scope->visible = repalloc(scope->visible, sizeof(int) * (scope->nvisible + 1));
	scope->visible[scope->nvisible++] = slot;
}

int
field_scope_lookup(FieldScope *scope, const char *name)
{
	for (int i = 0; i < scope->nvisible; i++)
	{
		if (strcmp(scope->schema->fields[scope->visible[i]].name, name) == 0)
			return scope->visible[i];
	}
	return -1;
}

Record *
record_alloc(RecordSchema *schema)
{
	Record	   *rec = palloc(sizeof(Record));

	rec->event_time = DT_NOBEGIN;
	rec->pending = NULL;
	rec->json = NULL;
	rec->values = palloc0(sizeof(Datum) * schema->nfields);
	rec->isnull = palloc(sizeof(bool) * schema->nfields);
	memset(rec->isnull, true, sizeof(bool) * schema->nfields);
	return rec;
}

Record *
record_copy(RecordSchema *schema, Record *src)
{
	Record	   *rec = palloc(sizeof(Record));

	*rec = *src;
	rec->values = palloc(sizeof(Datum) * schema->nfields);
	rec->isnull = palloc(sizeof(bool) * schema->nfields);
	memcpy(rec->values, src->values, sizeof(Datum) * schema->nfields);
	memcpy(rec->isnull, src->isnull, sizeof(bool) * schema->nfields);
	/*
	 * Each copy computes its pending fields into its own values; the value
	 * built whole is built once, in the JsonPending the copies share.
	 */
	if (src->pending)
	{
		rec->pending = palloc(sizeof(bool) * schema->nfields);
		memcpy(rec->pending, src->pending, sizeof(bool) * schema->nfields);
	}
	return rec;
}

char *
record_to_json(RecordSchema *schema, Record *rec)
{
	const char **names = palloc(sizeof(char *) * Max(schema->nfields, 1));
	Oid		   *types = palloc(sizeof(Oid) * Max(schema->nfields, 1));

	for (int i = 0; i < schema->nfields; i++)
	{
		names[i] = schema->fields[i].name;
		types[i] = schema->fields[i].type;
	}
	return values_to_json(schema->nfields, names, types, rec->values, rec->isnull);
}

char *
values_to_json(int n, const char *const *names, const Oid *types, const Datum *values,
			   const bool *nulls)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, names[i]);
		appendStringInfoString(&buf, ": ");
		if (nulls[i])
			appendStringInfoString(&buf, "null");
		else
		{
			Oid			out;
			bool		varlena;

			getTypeOutputInfo(types[i], &out, &varlena);
			escape_json(&buf, OidOutputFunctionCall(out, values[i]));
		}
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}
