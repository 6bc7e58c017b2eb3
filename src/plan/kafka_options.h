/*
 * kafka_options.h
 *		Which librdkafka properties (source.options) a job's owner may set.
 *
 * librdkafka acts on some properties as the server's OS user: it runs
 * programs, reads files and loads libraries.  A role gets from
 * source.options only what PostgreSQL itself would give it.
 */
#ifndef KAFKA_OPTIONS_H
#define KAFKA_OPTIONS_H

#include "nodes/pg_list.h"

/*
 * Raise ERRCODE_INSUFFICIENT_PRIVILEGE at the first property of options (a
 * list of DefElem with string values) that owner may not set.  Runs before
 * librdkafka sees any of them; needs a transaction (role membership).
 */
extern void kafka_options_check(List *options, Oid owner);

/*
 * Whether librdkafka loads code for a property (a plugin, an OpenSSL engine
 * or provider): validation outside the worker never hands it over.
 */
extern bool kafka_option_loads_code(const char *name);

#endif							/* KAFKA_OPTIONS_H */
