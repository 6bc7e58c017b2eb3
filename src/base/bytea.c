/*
 * bytea.c
 *		Building bytea values from raw bytes (bytea.h).
 */
#include "postgres.h"

#include "base/bytea.h"

bytea *
mailer_bytea(const char *data, int len)
{
	bytea	   *b = palloc(len + VARHDRSZ);

	SET_VARSIZE(b, len + VARHDRSZ);
	memcpy(VARDATA(b), data, len);
	return b;
}
