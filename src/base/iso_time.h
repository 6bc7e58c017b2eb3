/*
 * iso_time.h
 *		The fast ISO 8601 reading of iso_time.c, for event times in SQL and
 *		for the times a broker sends as text (the Pulsar source).
 */
#ifndef ISO_TIME_H
#define ISO_TIME_H

#include "datatype/timestamp.h"

/*
 * YYYY-MM-DD{T| }HH:MI:SS[.f{1,6}]{Z|{+|-}HH[[:]MI]} (len bytes, no NUL
 * needed) into *result; false for anything else, never an error.
 */
extern bool iso_time_parse(const char *s, int len, TimestampTz *result);

#endif							/* ISO_TIME_H */
