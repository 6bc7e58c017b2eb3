/*
 * bytea.h
 *		Building bytea values from raw bytes, and arrays of them.
 */
#ifndef MAILER_BYTEA_H
#define MAILER_BYTEA_H

/* A bytea holding a copy of len bytes, in the current memory context. */
extern bytea *mailer_bytea(const char *data, int len);

/* A one-dimensional bytea[] of n values; nulls may be NULL when none is. */
extern Datum mailer_bytea_array(Datum *items, bool *nulls, int n);

#endif							/* MAILER_BYTEA_H */
