/*
 * bytea.h
 *		Building bytea values from raw bytes.
 */
#ifndef MAILER_BYTEA_H
#define MAILER_BYTEA_H

/* A bytea holding a copy of len bytes, in the current memory context. */
extern bytea *mailer_bytea(const char *data, int len);

#endif							/* MAILER_BYTEA_H */
