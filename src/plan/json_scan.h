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

#include "lib/stringinfo.h"

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

	/*
	 * The value is also used whole: it is built from the text at its first
	 * such use (json_value_build), and invalid JSON fails with jsonb_in's
	 * own error, as when every message was built.
	 */
	bool		lazy_value;
	/* A sink column takes the value as it is, not through an expression. */
	bool		sink_reads_value;

	/* Kept from message to message: no allocation per record for these. */
	struct FieldSpan *spans;
	StringInfoData scratch;
} JsonFields;

/*
 * Validate the JSON text and fill the fields of rec; ERROR as jsonb_in
 * would.  With lazy_value, the value is left pending in rec: the text must
 * stay as it is while rec is used.
 */
extern void json_fields_extract(JsonFields *jf, const char *text, int len, Record *rec);

/* Build rec's pending value, in the memory context that holds rec. */
extern void json_value_build(Record *rec);

#endif							/* JSON_SCAN_H */
