/*
 * bytea.c
 *		Building bytea values from raw bytes (bytea.h).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"

#include "base/bytea.h"

bytea *
mailer_bytea(const char *data, int len)
{
	bytea	   *b = palloc(len + VARHDRSZ);

	SET_VARSIZE(b, len + VARHDRSZ);
	memcpy(VARDATA(b), data, len);
	return b;
}

Datum
mailer_bytea_array(Datum *items, bool *nulls, int n)
{
	int			dims[1] = {n};
	int			lbs[1] = {1};

	return PointerGetDatum(construct_md_array(items, nulls, 1, dims, lbs, BYTEAOID, -1, false, TYPALIGN_INT));
}
