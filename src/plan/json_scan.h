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

#include "fmgr.h"
#include "lib/stringinfo.h"

#include "base/record.h"

typedef struct JsonField
{
	char	   *key;
	int			key_len;
	int			text_slot;		/* value->>'key' goes here, -1 if unused */
	int			jsonb_slot;		/* value->'key' goes here, -1 if unused */
} JsonField;

/*
 * (value->>'key')::type where type's input function is strict and not
 * volatile: the input function is called on the field's text straight from
 * the message, at the cast's first use in the record (so where and when it
 * fails is where the cast would), without making a text value first.
 */
typedef struct JsonTypedField
{
	int			field;			/* index into JsonFields.fields */
	int			slot;
	Oid			type;
	Oid			input;			/* type's input function */
	Oid			ioparam;
	FmgrInfo   *finfo;			/* looked up at the first use */
} JsonTypedField;

typedef struct JsonFields
{
	int			nfields;
	JsonField  *fields;
	int			ntyped;
	JsonTypedField *typed;
	int			nslots;			/* the record's slots when planned */

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

/*
 * Compute rec's pending slot (the value, or a cast field) in the memory
 * context that holds rec; ERROR as the cast would.
 */
extern void json_field_build(Record *rec, int slot);

#endif							/* JSON_SCAN_H */
