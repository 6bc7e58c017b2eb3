/*
 * json_fields.h
 *		Reading a JSON message's top-level fields without building jsonb.
 *
 * When a job uses its jsonb value only as value->>'key' and value->'key',
 * those expressions are replaced by fields filled straight from the JSON
 * text: one pass that validates the whole message (so invalid JSON is still
 * a decode error) and copies out only the fields the job reads.  Results
 * are those of the jsonb operators.
 */
#ifndef JSON_FIELDS_H
#define JSON_FIELDS_H

#include "plan/plan.h"

typedef struct JsonField
{
	char	   *key;
	int			key_len;
	int			text_slot;		/* value->>'key' goes here, -1 if unused */
	int			jsonb_slot;		/* value->'key' goes here, -1 if unused */
} JsonField;

typedef struct JsonFields
{
	int			nfields;
	JsonField  *fields;
} JsonFields;

/*
 * If every use of the jsonb value in the plan is a field access by a
 * constant key, rewrite them into fields and return what to extract;
 * otherwise NULL and the plan is unchanged.
 */
extern JsonFields *json_fields_plan(JobPlan *plan);

/* Validate the JSON text and fill the fields of rec; ERROR as jsonb_in would. */
extern void json_fields_extract(JsonFields *jf, const char *text, int len, Record *rec);

#endif							/* JSON_FIELDS_H */
