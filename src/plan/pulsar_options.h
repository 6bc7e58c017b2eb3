/*
 * pulsar_options.h
 *		The options of a Pulsar source or sink (source.options,
 *		sink.options): a token to authenticate with and the CA that signs
 *		an https:// broker's certificate, and which of them a job's owner
 *		may give.
 *
 * Design: docs/ARCHITECTURE.md, "Pulsar security".
 */
#ifndef PULSAR_OPTIONS_H
#define PULSAR_OPTIONS_H

#include "nodes/pg_list.h"

/* The names: a secret's contains "token", so the spec masks its value. */
#define PULSAR_OPTION_TOKEN		"auth.token"
#define PULSAR_OPTION_CA_PEM	"tls.ca.pem"
#define PULSAR_OPTION_CA_FILE	"tls.ca.location"

/*
 * ERROR (naming <path>.options.<name>) for an option that is unknown, has
 * a bad value, does not fit service_url's scheme, or that owner may not
 * give.  create_job and describe_job judge a spec so, and so does the
 * worker, with the owner's privileges of the time; needs a transaction.
 */
extern void pulsar_check_options(const char *path, const char *service_url, List *options, Oid owner);

/* The value of option name in options (DefElem, string values), or NULL. */
extern const char *pulsar_option(List *options, const char *name);

#endif							/* PULSAR_OPTIONS_H */
