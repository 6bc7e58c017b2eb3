/*
 * serial.c
 *		Datums as bytes for keyed state (serial.h).
 */
#include "postgres.h"

#include "fmgr.h"

#include "serial.h"

void
serial_put_datum(StringInfo buf, Datum d, int16 typlen, bool typbyval)
{
	if (typbyval)
		serial_put(buf, &d, sizeof(Datum));
	else if (typlen > 0)
		serial_put(buf, DatumGetPointer(d), typlen);
	else if (typlen != -1)
	{
		/* plan.c refuses such types: a cstring read as a varlena crashes the server */
		elog(ERROR, "mailer cannot store a value of type length %d", typlen);
	}
	else
	{
		struct varlena *v = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(d));
		int32		len = VARSIZE_ANY_EXHDR(v);

		serial_put(buf, &len, sizeof(int32));
		serial_put(buf, VARDATA_ANY(v), len);
	}
}

Datum
serial_get_datum(const char *data, int *pos, int16 typlen, bool typbyval, MemoryContext ctx)
{
	Datum		d;

	if (typbyval)
		serial_get(data, pos, &d, sizeof(Datum));
	else if (typlen > 0)
	{
		char	   *p = MemoryContextAlloc(ctx, typlen);

		serial_get(data, pos, p, typlen);
		d = PointerGetDatum(p);
	}
	else if (typlen != -1)
		elog(ERROR, "mailer cannot read back a value of type length %d", typlen);
	else
	{
		int32		len;
		struct varlena *v;

		serial_get(data, pos, &len, sizeof(int32));
		v = MemoryContextAlloc(ctx, len + VARHDRSZ);
		SET_VARSIZE(v, len + VARHDRSZ);
		serial_get(data, pos, VARDATA(v), len);
		d = PointerGetDatum(v);
	}
	return d;
}
