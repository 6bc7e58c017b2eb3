/*
 * pulsar_admin.h
 *		GET requests to Pulsar's REST admin API, shared by the Pulsar source
 *		(partitions, lastMessageId, internalStats) and sink (partitions,
 *		deduplication).
 *
 * Design: docs/ARCHITECTURE.md, "Source poll".
 */
#ifndef PULSAR_ADMIN_H
#define PULSAR_ADMIN_H

#include <curl/curl.h>

#include "connectors/pulsar_ws.h"
#include "jobs/job_slots.h"
#include "nodes/pg_list.h"

/* The longest an admin call blocks, redirects included. */
#define BROKER_TIMEOUT_MS		2000

typedef struct PulsarAdmin
{
	const char *service_url;	/* http://host:port or https://host:port */
	PulsarWsSecurity sec;		/* the token and CA, for every call */
	struct curl_slist *headers; /* Authorization, or NULL */
	JobSlot    *slot;			/* a stop request of its job aborts a call; NULL: none */
	CURL	   *curl;
	char	   *body;			/* the last reply, whole (malloc'd: grown in libcurl's callback) */
	size_t		len;
	size_t		cap;
	bool		too_long;		/* the reply passed its bound: the call failed */
	bool		slow;			/* a call timed out: the caller's later calls of this round fail at once; the caller clears it */
	int			timeout_ms;		/* > 0: the calls' bound instead of BROKER_TIMEOUT_MS, and their timeout leaves
								 * slow alone (the source's lag polls, which back off on their own) */
} PulsarAdmin;

/*
 * How a Pulsar source's or sink's clients authenticate and check the
 * broker: service_url's scheme, the spec's options (plan/pulsar_options.h).
 * The strings are the options' own.
 */
extern PulsarWsSecurity pulsar_security_of(const char *service_url, List *options);

/* ERROR if libcurl cannot start.  sec: as pulsar_security_of gives it. */
extern PulsarAdmin *pulsar_admin_new(const char *service_url, const PulsarWsSecurity *sec, JobSlot *slot);

/*
 * GET service_url + path into a->body; false with why (naming the path and
 * the status's fixed meaning) unless the broker answered 200.
 */
extern bool pulsar_admin_get(PulsarAdmin *a, const char *path, char *why, size_t whysize);

/* The integer member name of a flat JSON object the broker sent. */
extern bool pulsar_json_number(const char *body, const char *name, int64 *v);

#endif							/* PULSAR_ADMIN_H */
