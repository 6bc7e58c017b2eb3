/*
 * serial.h
 *		Bytes for state: values written into a StringInfo and read back in
 *		the same process family.  Not a portable format: state stays on the
 *		server that wrote it.
 *
 * Every read is checked against the length of the bytes it reads from: a
 * value that ends early or claims more than it holds is an ERROR
 * (ERRCODE_DATA_CORRUPTED), never a read past the buffer.  What the bytes
 * mean (the key fields' and aggregates' types) is checked once per
 * restore, against the layout the checkpoint recorded
 * (operators/keyed_state.h builds it).
 */
#ifndef SERIAL_H
#define SERIAL_H

#include "lib/stringinfo.h"

/* ERROR: a read of n bytes at pos of a len-byte value */
extern void serial_corrupted(int len, int pos, int n) pg_attribute_noreturn();

static inline void
serial_put(StringInfo buf, const void *p, int n)
{
	appendBinaryStringInfo(buf, (const char *) p, n);
}

/* n bytes at *pos of data, a value of len bytes */
static inline void
serial_get(const char *data, int len, int *pos, void *p, int n)
{
	if (n < 0 || *pos < 0 || *pos > len || n > len - *pos)
		serial_corrupted(len, *pos, n);
	memcpy(p, data + *pos, n);
	*pos += n;
}

/* ERROR unless the whole value was read */
static inline void
serial_check_end(int len, int pos)
{
	if (pos != len)
		serial_corrupted(len, pos, 0);
}

/* A datum: by value as a Datum, fixed length as is, varlena untoasted with its length. */
extern void serial_put_datum(StringInfo buf, Datum d, int16 typlen, bool typbyval);

/* The datum back, allocated in ctx. */
extern Datum serial_get_datum(const char *data, int len, int *pos, int16 typlen, bool typbyval,
							  MemoryContext ctx);

/*
 * ERROR (ERRCODE_DATA_CORRUPTED) unless state written with layout stored
 * can be read with the plan's layout now: lines "fingerprint<TAB>what<TAB>
 * type", of which the fingerprints are compared.
 */
extern void serial_check_state_layout(const char *job_name, const char *stored, const char *now);

#endif							/* SERIAL_H */
