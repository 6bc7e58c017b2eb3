/*
 * json_scan.h
 *		A JSON message's top-level fields, read straight from its text.
 *
 * One pass validates the whole message as jsonb_in would (invalid JSON is
 * the same error) and copies out only the wanted fields, as value->>'key'
 * and value->'key' would give them.  Which fields are wanted, and where
 * they go, json_fields.h decides from the plan.
 */
#ifndef JSON_SCAN_H
#define JSON_SCAN_H

#include "base/record.h"

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

/* Validate the JSON text and fill the fields of rec; ERROR as jsonb_in would. */
extern void json_fields_extract(JsonFields *jf, const char *text, int len, Record *rec);

#endif							/* JSON_SCAN_H */
