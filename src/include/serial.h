/*
 * serial.h
 *		Bytes for state: values written into a StringInfo and read back in
 *		the same process family.  Not a portable format: state stays on the
 *		server that wrote it.
 */
#ifndef SERIAL_H
#define SERIAL_H

#include "lib/stringinfo.h"

static inline void
serial_put(StringInfo buf, const void *p, int n)
{
	appendBinaryStringInfo(buf, (const char *) p, n);
}

static inline void
serial_get(const char *data, int *pos, void *p, int n)
{
	memcpy(p, data + *pos, n);
	*pos += n;
}

/* A datum: by value as a Datum, fixed length as is, varlena untoasted with its length. */
extern void serial_put_datum(StringInfo buf, Datum d, int16 typlen, bool typbyval);

/* The datum back, allocated in ctx. */
extern Datum serial_get_datum(const char *data, int *pos, int16 typlen, bool typbyval,
							  MemoryContext ctx);

#endif							/* SERIAL_H */
