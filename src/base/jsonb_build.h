/*
 * jsonb_build.h
 *		Strings for pushJsonbValue, the one way mailer builds jsonb documents
 *		(positions, counters, watermarks, headers, the pinned spec).
 */
#ifndef JSONB_BUILD_H
#define JSONB_BUILD_H

#include "utils/jsonb.h"

/* A string value of len bytes, not copied: str must last until the jsonb is made. */
static inline JsonbValue *
jsonb_string_value(JsonbValue *v, const char *str, int len)
{
	v->type = jbvString;
	v->val.string.val = (char *) str;
	v->val.string.len = len;
	return v;
}

/* An object's key, a C string, likewise not copied. */
static inline void
jsonb_push_key(JsonbParseState **state, const char *key)
{
	JsonbValue	k;

	(void) pushJsonbValue(state, WJB_KEY, jsonb_string_value(&k, key, strlen(key)));
}

#endif							/* JSONB_BUILD_H */
