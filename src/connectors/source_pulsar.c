/*
 * source_pulsar.c
 *		The Pulsar source: every partition of one persistent topic, each
 *		read by a reader of Pulsar's WebSocket API (connectors/pulsar_ws.c).
 *
 * Positions are mailer's own, as for Kafka: a reader has no subscription,
 * and starts after the message id the last checkpoint stored for its
 * partition (base64, as the broker gives it), so a restart reads on just
 * after the last message handed out, whatever the broker acknowledged.  A
 * partition no checkpoint has seen starts at "earliest", or at "latest"
 * resolved at once to the partition's last message id (REST admin API,
 * lastMessageId), so that a checkpoint taken before any message arrives
 * still pins where it resumes.  The partitions are those the REST admin
 * API's partition metadata names (a topic that is not partitioned is read
 * as partition 0); they are read again every few seconds, and partitions
 * added later start at their beginning.
 *
 * The record's offset is the partition's message ordinal, counted from the
 * job's start on the partition and kept with the checkpoint (records_in),
 * so a replay gives each message the same offset.  Its timestamp is the
 * message's event time when the producer set one, else its publish time;
 * its headers are the message's properties.
 *
 * libwebsockets starts no thread; libcurl may (a resolver), so its calls
 * run with signals blocked.  The worker waits on one descriptor: an epoll
 * set that holds every reader's socket, for reading, and for writing while
 * a session has frames to send (acknowledgements), kept in step with
 * pulsar_ws_poll_set before each wait.
 *
 * Design: docs/ARCHITECTURE.md, "Source poll".
 */
#include "postgres.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <curl/curl.h>

#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "base/iso_time.h"
#include "base/jsonb_build.h"
#include "base/signals.h"
#include "connectors/kafka_client.h"
#include "connectors/pulsar_frame.h"
#include "connectors/pulsar_ws.h"
#include "connectors/source.h"
#include "jobs/job_slots.h"

#define METADATA_INTERVAL_MS	5000
#define METADATA_RETRY_MS		1000
#define REOPEN_MS				1000	/* a closed reader's first reopen ... */
#define REOPEN_MAX_MS			8000	/* ... doubled while it fails, up to this */
#define BROKER_TIMEOUT_MS		2000
#define MAX_REDIRECTS			3		/* an admin call's 307/308s followed (http_get) */
#define RECEIVER_QUEUE			1000
#define ID_LEN					128		/* a base64 message id, with room */
#define MAX_FDS					1024
#define HTTP_BODY_MAX			(16 * 1024 * 1024)	/* internalStats of ~190000 ledgers */

typedef struct PulsarPartition
{
	int32		partition;
	char	   *reader_topic;	/* tenant/ns/topic, or its -partition-N */
	char		start[ID_LEN];	/* where the reader starts: an id (after it) or "earliest" */
	PulsarMessageId last;		/* the last message handed out, or the one start names; ledger -1: none */
	bool		handed;			/* last is a message this run handed out (else: start) */
	PulsarWsConn *conn;			/* NULL: not open, reopened at reopen_at */
	TimestampTz reopen_at;
	int			reopen_ms;		/* the wait before the next reopen, 0: REOPEN_MS */
	int64		count;			/* messages handed out: the next one's offset */
	int			metrics;		/* index in the slot's partition metrics, -1 none */
	PulsarMessageId mark;		/* wait_job's target; ledger -2: none taken */
	char		why[600];		/* why the reader closed, while it is not open again */
	/* Retention (check_switch, check_retention): what the reader may have skipped. */
	int64		count_at_refresh;	/* count at the last metadata refresh */
	PulsarMessageId checked;	/* the position a stalled reader was checked at; ledger -1 none */
	char	   *held;			/* a new ledger's first message, until the switch is checked */
	size_t		held_len;
	TimestampTz held_retry_at;
	int64		fits_ledger;	/* a ledger of last the broker was seen to hold, -1 none */
	int64		asked_ledger;	/* the last ledger whose length internalStats was read for, -1 none */
	int64		closed_ledger;	/* the ledger of last when its reader last closed, -1 none */
	int64		end_ledger;		/* a ledger whose entry count is known, -1 none ... */
	int64		end_entries;	/* ... and that count */
	int64		reported_ledger;	/* the last ledger reported as deleted, -1 none */
} PulsarPartition;

/* A handed-out message's properties: pointers into its frame. */
typedef struct MessageProperties
{
	int			n;
	char	  **names;
	char	  **values;
} MessageProperties;

typedef struct PulsarSource
{
	Source		base;
	PulsarSourceSpec *spec;
	int			subtask;
	int			parallelism;
	PulsarWs   *ws;
	CURL	   *curl;
	int			epfd;
	int			registered[MAX_FDS];	/* the sockets in the epoll set */
	int			nregistered;
	PulsarPartition *parts;
	int			nparts;
	bool		partitioned;	/* read as <topic>-partition-N */
	bool		topic_known;	/* metadata read once: partitions added since start at their beginning */
	Jsonb	   *restored;		/* positions of the last checkpoint, or NULL */
	Jsonb	   *restored_records_in;
	char	  **frames;			/* handed out by the last poll, freed at the next */
	MessageProperties *props;	/* their properties, for headers() */
	MemoryContext batch_ctx;	/* the properties' arrays, reset at each poll */
	int			nframes;
	int			capacity;
	int			next_part;		/* where the next poll starts: every partition gets its turn */
	TimestampTz next_refresh;
	bool		mark_pending;	/* wait_job asked; marks not taken yet */
	char		error[512];		/* what the source waits on, "" none */
	char	   *http_body;		/* the last admin reply, whole (malloc'd: grown in libcurl's callback) */
	size_t		http_len;
	size_t		http_cap;
	bool		http_too_long;	/* the reply passed HTTP_BODY_MAX: the call failed */
	bool		broker_slow;	/* an admin call timed out in this round: no more of them in it */
} PulsarSource;

static const SourceOps pulsar_ops;

static void refresh_partitions(PulsarSource *ps);
static bool http_get(PulsarSource *ps, const char *path, char *why, size_t whysize);
static bool json_number(const char *body, const char *name, int64 *v);
static bool last_message_id(PulsarSource *ps, PulsarPartition *pp, PulsarMessageId *id,
							char *why, size_t whysize);
static const char *restored_string(PulsarSource *ps, int32 partition);
static int64 restored_count(PulsarSource *ps, int32 partition);
static JsonbValue *restored_value(PulsarSource *ps, Jsonb *obj, int32 partition);
static void open_reader(PulsarSource *ps, PulsarPartition *pp);
static void check_retention(PulsarSource *ps, PulsarPartition *pp);
static bool check_switch(PulsarSource *ps, PulsarPartition *pp, const PulsarMessageId *id,
						 char *why, size_t whysize);
static void position_not_in_topic(PulsarSource *ps, PulsarPartition *pp, const char *end);
static void note_length(PulsarSource *ps, PulsarPartition *pp, int64 ledger);
static bool hand_out(PulsarSource *ps, PulsarPartition *pp, char *frame, size_t len, SourceMessage *out);
static TimestampTz message_time(const char *text);
static void take_marks(PulsarSource *ps);
static void update_metrics(PulsarSource *ps);
static void push_restored_not_open(PulsarSource *ps, Jsonb *obj, JsonbParseState **state);

Source *
pulsar_source_open(PulsarSourceSpec *spec, Jsonb *positions, Jsonb *records_in,
				   JobSlot *slot, int subtask, int parallelism)
{
	PulsarSource *ps = palloc0(sizeof(PulsarSource));
	char		err[512];
	sigset_t	saved;

	ps->base.ops = &pulsar_ops;
	ps->base.slot = slot;
	ps->base.ntopics = 1;
	ps->base.topic_names = palloc(sizeof(char *));
	ps->base.topic_names[0] = psprintf("persistent://%s", spec->topic);
	ps->spec = spec;
	ps->subtask = subtask;
	ps->parallelism = parallelism;
	ps->restored = positions;
	ps->restored_records_in = records_in;

	ps->ws = pulsar_ws_new(err, sizeof(err));
	if (ps->ws == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not start a Pulsar client: %s", err)));
	mailer_block_signals(&saved);
	ps->curl = curl_easy_init();
	mailer_restore_signals(&saved);
	if (ps->curl == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not start libcurl for Pulsar's admin API")));
	ps->http_cap = 8192;
	if ((ps->http_body = malloc(ps->http_cap)) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	ps->batch_ctx = AllocSetContextCreate(TopMemoryContext, "pulsar batch", ALLOCSET_SMALL_SIZES);
	ps->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (ps->epfd < 0)
		ereport(ERROR,
				(errcode_for_socket_access(),
				 errmsg("could not create an epoll set for Pulsar: %m")));
	refresh_partitions(ps);
	return &ps->base;
}

/*
 * Keep the whole reply: internalStats lists every ledger of the partition
 * (~85 bytes each), and a busy topic has hundreds.  Grown with realloc, as
 * libcurl's callback must not throw; a reply past HTTP_BODY_MAX fails the
 * call (returning less than given aborts the transfer).
 */
static size_t
http_write(char *data, size_t size, size_t nmemb, void *arg)
{
	PulsarSource *ps = (PulsarSource *) arg;
	size_t		n = size * nmemb;

	if (n > HTTP_BODY_MAX - ps->http_len)
	{
		ps->http_too_long = true;
		return 0;
	}
	if (ps->http_len + n + 1 > ps->http_cap)
	{
		size_t		cap = ps->http_cap;
		char	   *grown;

		while (cap < ps->http_len + n + 1)
			cap *= 2;
		if ((grown = realloc(ps->http_body, cap)) == NULL)
			return 0;
		ps->http_body = grown;
		ps->http_cap = cap;
	}
	memcpy(ps->http_body + ps->http_len, data, n);
	ps->http_len += n;
	ps->http_body[ps->http_len] = '\0';
	return n;
}

/*
 * What an HTTP status of the admin API means.  Never the reply's body:
 * any role that may create a job names the service URL, so the server
 * may be anything the database server reaches (README, "Security"), and
 * what it answered is not for the job's owner to read in last_error.
 */
static const char *
http_status_text(long status)
{
	switch (status)
	{
		case 401:
		case 403:
			return "not authorized";
		case 404:
			return "not found (the topic or its namespace does not exist, or this is not a Pulsar admin API)";
		case 301:
		case 302:
		case 303:
			return "redirected, which is not followed (only a 307 or 308 to the same path on another broker is)";
		case 307:
		case 308:
			return "redirected elsewhere than the same path on another broker over http (another scheme, path or query, a user name), which is not followed";
		default:
			return status >= 500 ? "the broker failed" : "not an answer of Pulsar's admin API";
	}
}

/* libcurl's progress callback: a stop request aborts the call (about once a second). */
static int
http_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	return job_stop_requested(((PulsarSource *) arg)->base.slot) ? 1 : 0;
}

/*
 * The URL to follow a 307/308 of GET path to, or NULL: only the same
 * request on another broker (docs/ARCHITECTURE.md, "Source poll").  A
 * broker answers the topic-level admin calls for a partition another
 * broker owns with a redirect to the owner, which adds only
 * "authoritative=true|false" to the query; since any role may name any
 * host:port as service_url, a redirect that keeps the scheme (http), the
 * path and the query but moves to another host:port asks nothing more of
 * the network than a job could ask already.  The URL followed is built
 * from the checked parts, never the Location as sent.
 */
static char *
same_request_elsewhere(const char *location, const char *path)
{
	CURLU	   *u = curl_url();
	char	   *scheme = NULL,
			   *user = NULL,
			   *password = NULL,
			   *host = NULL,
			   *port = NULL,
			   *zone = NULL,
			   *upath = NULL,
			   *query = NULL,
			   *fragment = NULL;
	const char *want_query = strchr(path, '?');
	size_t		want_path_len = want_query ? (size_t) (want_query - path) : strlen(path);
	char	   *next = NULL;
	bool		ok;

	if (u == NULL || location == NULL)
	{
		curl_url_cleanup(u);
		return NULL;
	}
	ok = curl_url_set(u, CURLUPART_URL, location, CURLU_PATH_AS_IS) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_NO_USER &&
		curl_url_get(u, CURLUPART_PASSWORD, &password, 0) == CURLUE_NO_PASSWORD &&
		curl_url_get(u, CURLUPART_ZONEID, &zone, 0) == CURLUE_NO_ZONEID &&
		curl_url_get(u, CURLUPART_FRAGMENT, &fragment, 0) == CURLUE_NO_FRAGMENT &&
		curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_PATH, &upath, 0) == CURLUE_OK;
	if (ok)
	{
		CURLUcode	qrc = curl_url_get(u, CURLUPART_QUERY, &query, 0);

		ok = (qrc == CURLUE_NO_QUERY || qrc == CURLUE_OK) &&
			strcmp(scheme, "http") == 0 &&
			strlen(upath) == want_path_len && strncmp(upath, path, want_path_len) == 0 &&
			(query == NULL ? want_query == NULL :
			 ((want_query != NULL && strcmp(query, want_query + 1) == 0) ||
			  (want_query == NULL &&
			   (strcmp(query, "authoritative=false") == 0 || strcmp(query, "authoritative=true") == 0))));
	}
	/* A host name or IPv4 address, or a bracketed IPv6 one; a port of 1 to 65535. */
	if (ok)
	{
		size_t		hostlen = strlen(host);

		if (host[0] == '[')
			ok = hostlen > 2 && host[hostlen - 1] == ']' &&
				strspn(host + 1, "0123456789abcdefABCDEF:.") == hostlen - 2;
		else
			ok = hostlen > 0 &&
				strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") == hostlen;
		ok = ok && strspn(port, "0123456789") == strlen(port) && strlen(port) <= 5 &&
			atoi(port) >= 1 && atoi(port) <= 65535;
	}
	if (ok)
		next = psprintf("http://%s:%s%s%s%s", host, port, upath, query ? "?" : "", query ? query : "");
	curl_free(scheme);
	curl_free(user);
	curl_free(password);
	curl_free(zone);
	curl_free(fragment);
	curl_free(host);
	curl_free(port);
	curl_free(upath);
	curl_free(query);
	curl_url_cleanup(u);
	return next;
}

/*
 * GET service_url + path from the REST admin API into ps->http_body; false
 * with why when the broker does not answer 200.  A 307 or 308 to the same
 * request on another broker (same_request_elsewhere) is followed, up to
 * MAX_REDIRECTS times; any other redirect fails with its status.  Blocks
 * for up to BROKER_TIMEOUT_MS in all, redirects included, less if stop_job
 * asks meanwhile: interrupts are answered before it.  A broker that stops
 * answering blocks a round of calls (a poll, the source's open, wait_job's
 * marks) once, not once per partition: after a timeout, the round's other
 * calls fail at once, and are made in a later round, so that the worker
 * gets back to its loop (stop, checkpoints) within about BROKER_TIMEOUT_MS
 * whatever the partition count.  One that answers each call just within
 * the timeout still takes a call's time per partition: a deadline per round
 * would starve wait_job's marks, taken all in one round, on a topic with
 * many partitions (docs/ARCHITECTURE.md, "Source poll").
 */
static bool
http_get(PulsarSource *ps, const char *path, char *why, size_t whysize)
{
	char	   *url = psprintf("%s%s", ps->spec->service_url, path);
	long		status = 0;
	CURLcode	rc = CURLE_OK;
	sigset_t	saved;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), BROKER_TIMEOUT_MS);
	int			hops;
	bool		refused = false;

	CHECK_FOR_INTERRUPTS();
	if (ps->broker_slow || job_stop_requested(ps->base.slot))
	{
		snprintf(why, whysize, "GET %s: %s", path,
				 ps->broker_slow ? "not asked yet: the broker did not answer another admin request within "
				 CppAsString2(BROKER_TIMEOUT_MS) " ms" : "not asked: the job is stopping");
		pfree(url);
		return false;
	}
	for (hops = 0;; hops++)
	{
		long		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		char	   *location = NULL;
		char	   *next;

		if (remaining <= 0)
		{
			rc = CURLE_OPERATION_TIMEDOUT;
			break;
		}
		ps->http_len = 0;
		ps->http_body[0] = '\0';
		ps->http_too_long = false;
		status = 0;
		curl_easy_reset(ps->curl);
		curl_easy_setopt(ps->curl, CURLOPT_URL, url);
		curl_easy_setopt(ps->curl, CURLOPT_TIMEOUT_MS, remaining);
		curl_easy_setopt(ps->curl, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(ps->curl, CURLOPT_PROTOCOLS_STR, "http");
		/* The path as built, never normalized into another (README, "Security"). */
		curl_easy_setopt(ps->curl, CURLOPT_PATH_AS_IS, 1L);
		curl_easy_setopt(ps->curl, CURLOPT_WRITEFUNCTION, http_write);
		curl_easy_setopt(ps->curl, CURLOPT_WRITEDATA, ps);
		curl_easy_setopt(ps->curl, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(ps->curl, CURLOPT_XFERINFOFUNCTION, http_progress);
		curl_easy_setopt(ps->curl, CURLOPT_XFERINFODATA, ps);
		mailer_block_signals(&saved);
		rc = curl_easy_perform(ps->curl);
		mailer_restore_signals(&saved);
		if (rc != CURLE_OK)
			break;
		curl_easy_getinfo(ps->curl, CURLINFO_RESPONSE_CODE, &status);
		if (status != 307 && status != 308)
			break;
		if (hops == MAX_REDIRECTS)
		{
			snprintf(why, whysize, "GET %s: HTTP %ld: redirected more than %d times, not followed further",
					 path, status, MAX_REDIRECTS);
			refused = true;
			break;
		}
		curl_easy_getinfo(ps->curl, CURLINFO_REDIRECT_URL, &location);
		if ((next = same_request_elsewhere(location, path)) == NULL)
			break;				/* said by http_status_text */
		pfree(url);
		url = next;
	}
	if (rc == CURLE_OPERATION_TIMEDOUT)
		ps->broker_slow = true;
	if (!refused && rc == CURLE_ABORTED_BY_CALLBACK)
		snprintf(why, whysize, "GET %s: given up: the job is stopping", path);
	else if (!refused)
	{
		/* After a redirect, the broker asked: its host:port, never the path (ours). */
		char		at[300] = "";

		if (hops > 0)
			snprintf(at, sizeof(at), " (redirected to the broker at %.*s)",
					 (int) strcspn(url + 7, "/"), url + 7);
		if (rc == CURLE_WRITE_ERROR)
			snprintf(why, whysize, "GET %s%s: %s", path, at, ps->http_too_long ?
					 "the reply is longer than 16 MB, more than any this source asks for"
					 : "out of memory for the reply");
		else if (rc != CURLE_OK)
			snprintf(why, whysize, "GET %s%s: %s", path, at, curl_easy_strerror(rc));
		else if (status != 200)
			snprintf(why, whysize, "GET %s%s: HTTP %ld: %s", path, at, status, http_status_text(status));
	}
	pfree(url);
	return rc == CURLE_OK && status == 200;
}

/* The integer member name of a flat JSON object the broker sent. */
static bool
json_number(const char *body, const char *name, int64 *v)
{
	char		quoted[64];
	const char *p;
	char	   *end;

	snprintf(quoted, sizeof(quoted), "\"%s\"", name);
	if ((p = strstr(body, quoted)) == NULL)
		return false;
	p += strlen(quoted);
	while (*p == ' ' || *p == ':')
		p++;
	errno = 0;
	*v = strtoll(p, &end, 10);
	return end != p && errno == 0;
}

/*
 * Learn the topic's partitions and start a reader on each new one this
 * subtask owns.  A broker that does not answer is noted in ps->error and
 * asked again soon; the readers already open go on.  New partitions are
 * positioned all together or not at all, so that the topic is either
 * unpositioned (it starts per the spec) or every partition of it has a
 * position that checkpoints keep.
 */
static void
refresh_partitions(PulsarSource *ps)
{
	char		why[400] = "";
	char	   *path = psprintf("/admin/v2/persistent/%s/partitions", ps->spec->topic);
	int64		n;
	TimestampTz now = GetCurrentTimestamp();
	int			first_new = ps->nparts;
	/*
	 * The topic starts per the spec only at this subtask's first answer of
	 * the metadata, as for Kafka: after it, even with no partition of its
	 * own (parallelism above the partition count), every partition is new
	 * and read from its beginning, however late this subtask learns of it.
	 */
	bool		positioned = ps->topic_known || ps->nparts > 0 ||
		(ps->restored != NULL &&
		 getKeyJsonValueFromContainer(&ps->restored->root, ps->base.topic_names[0],
									  strlen(ps->base.topic_names[0]), NULL) != NULL);

	if (!http_get(ps, path, why, sizeof(why)) || !json_number(ps->http_body, "partitions", &n) ||
		n < 0 || n > 100000)
	{
		if (why[0] == '\0')
			snprintf(why, sizeof(why), "GET %s: not an answer of Pulsar's admin API (no \"partitions\" count)", path);
		goto failed;
	}
	/* Not partitioned (0): the topic itself is partition 0. */
	ps->partitioned = n > 0;
	for (int32 p = 0; p < Max(n, 1); p++)
	{
		PulsarPartition *pp;
		const char *start;
		bool		found = false;

		if (!source_owns(0, p, ps->subtask, ps->parallelism))
			continue;
		for (int i = 0; i < ps->nparts && !found; i++)
			found = ps->parts[i].partition == p;
		if (found)
			continue;
		if (ps->parts == NULL)
			ps->parts = MemoryContextAllocZero(TopMemoryContext, sizeof(PulsarPartition) * 8);
		else if (ps->nparts % 8 == 0)
			ps->parts = repalloc(ps->parts, sizeof(PulsarPartition) * (ps->nparts + 8));
		pp = &ps->parts[ps->nparts];
		memset(pp, 0, sizeof(*pp));
		pp->partition = p;
		pp->reader_topic = MemoryContextStrdup(TopMemoryContext,
											   ps->partitioned ? psprintf("%s-partition-%d", ps->spec->topic, p)
											   : ps->spec->topic);
		pp->last.ledger = -1;
		pp->mark.ledger = -2;
		pp->checked.ledger = -1;
		pp->end_ledger = pp->reported_ledger = pp->fits_ledger = pp->asked_ledger =
			pp->closed_ledger = -1;
		pp->count = Max(restored_count(ps, p), 0);
		start = restored_string(ps, p);
		if (start == NULL && !positioned && ps->spec->start_latest)
		{
			PulsarMessageId last;

			/* Resolved now, so that a checkpoint before any message pins it. */
			if (!last_message_id(ps, pp, &last, why, sizeof(why)))
				goto failed;
			/* An entry of -1: nothing written yet, so everything to come is after "latest". */
			if (last.entry < 0 || !pulsar_message_id_encode(&last, pp->start, sizeof(pp->start)))
				strlcpy(pp->start, "earliest", sizeof(pp->start));
			ps->base.unpinned = true;
		}
		else
			/* A partition added after the topic was positioned, or a start from the beginning. */
			strlcpy(pp->start, start ? start : "earliest", sizeof(pp->start));
		/* Messages up to the start are behind the partition's position (wait_job, repeats). */
		if (strcmp(pp->start, "earliest") != 0 && !pulsar_message_id_decode(pp->start, &pp->last))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("the checkpoint's position of partition %d of Pulsar topic \"%s\" is not a message id: \"%s\"",
							p, ps->base.topic_names[0], pp->start),
					 errhint("Restore an earlier checkpoint with mailer.restore_job, or create the job again.")));
		pp->metrics = ps->nparts < JOB_SLOT_MAX_PARTITIONS ? ps->nparts : -1;
		if (pp->metrics >= 0)
			ps->base.slot->partitions[pp->metrics].records_in = pp->count;
		ps->nparts++;
	}
	ps->topic_known = true;
	for (int i = first_new; i < ps->nparts; i++)
		open_reader(ps, &ps->parts[i]);
	for (int i = 0; i < first_new; i++)
		check_retention(ps, &ps->parts[i]);
	ps->error[0] = '\0';
	ps->next_refresh = TimestampTzPlusMilliseconds(now, METADATA_INTERVAL_MS);
	update_metrics(ps);
	if (ps->mark_pending)
		take_marks(ps);
	return;

failed:
	/* Nothing of this refresh: the next one tries all of it again. */
	for (int i = first_new; i < ps->nparts; i++)
		pfree(ps->parts[i].reader_topic);
	ps->nparts = first_new;
	snprintf(ps->error, sizeof(ps->error), "waiting for Pulsar: topic \"%s\": %s",
			 ps->base.topic_names[0], why);
	ps->next_refresh = TimestampTzPlusMilliseconds(now, METADATA_RETRY_MS);
}

static bool
last_message_id(PulsarSource *ps, PulsarPartition *pp, PulsarMessageId *id, char *why, size_t whysize)
{
	char	   *path = psprintf("/admin/v2/persistent/%s/lastMessageId", pp->reader_topic);
	int64		ledger,
				entry,
				batch_index;
	bool		ok = http_get(ps, path, why, whysize);

	if (ok && (!json_number(ps->http_body, "ledgerId", &ledger) || !json_number(ps->http_body, "entryId", &entry)))
	{
		snprintf(why, whysize, "GET %s: not an answer of Pulsar's admin API (no \"ledgerId\" and \"entryId\")", path);
		ok = false;
	}
	pfree(path);
	if (!ok)
		return false;
	id->ledger = ledger;
	id->entry = entry;
	id->partition = ps->partitioned ? pp->partition : -1;
	/*
	 * The last message of a batched entry (any Java, Go or C++ producer's
	 * default): a poll may hand out part of an entry, so the target of
	 * wait_job, and a "latest" start, is that message, not the entry.
	 */
	if (!json_number(ps->http_body, "batchIndex", &batch_index) || batch_index < -1 || batch_index > PG_INT32_MAX)
		batch_index = -1;
	id->batch_index = (int32) batch_index;
	return true;
}

/* A partition's value in a {"topic": {"partition": value}} object of a checkpoint, or NULL. */
static JsonbValue *
restored_value(PulsarSource *ps, Jsonb *obj, int32 partition)
{
	JsonbValue *topic;
	char		key[16];

	if (obj == NULL)
		return NULL;
	topic = getKeyJsonValueFromContainer(&obj->root, ps->base.topic_names[0],
										 strlen(ps->base.topic_names[0]), NULL);
	if (topic == NULL || topic->type != jbvBinary)
		return NULL;
	snprintf(key, sizeof(key), "%d", partition);
	return getKeyJsonValueFromContainer(topic->val.binary.data, key, strlen(key), NULL);
}

/* The checkpoint's position of a partition (a string), or NULL. */
static const char *
restored_string(PulsarSource *ps, int32 partition)
{
	JsonbValue *v = restored_value(ps, ps->restored, partition);

	if (v == NULL)
		return NULL;
	if (v->type != jbvString || v->val.string.len >= ID_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the checkpoint's position of partition %d of Pulsar topic \"%s\" is not a message id",
						partition, ps->base.topic_names[0]),
				 errhint("Restore an earlier checkpoint with mailer.restore_job, or create the job again.")));
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* The checkpoint's records_in of a partition, or -1. */
static int64
restored_count(PulsarSource *ps, int32 partition)
{
	JsonbValue *v = restored_value(ps, ps->restored_records_in, partition);

	if (v == NULL || v->type != jbvNumeric)
		return -1;
	return DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v->val.numeric)));
}

/*
 * What an internalStats answer's "ledgers" (listed in ascending order, the
 * current ledger last) says of ledger: 1 listed (*entries; -1 for the
 * current ledger, still growing), 0 not listed (deleted, or never the
 * topic's), -1 when the answer does not say.  *oldest and *newest: the
 * first and the last listed, -1 when none is.
 */
static int
stats_ledger(const char *body, int64 ledger, int64 *entries, int64 *oldest, int64 *newest)
{
	const char *p = strstr(body, "\"ledgers\"");
	const char *end = p ? strchr(p, ']') : NULL;
	int			found = 0;

	*oldest = *newest = -1;
	if (p == NULL || end == NULL)
		return -1;
	while ((p = strstr(p, "\"ledgerId\"")) != NULL && p < end)
	{
		int64		id,
					n;

		if (!json_number(p, "ledgerId", &id) || !json_number(p, "entries", &n))
			return -1;
		if (*oldest < 0)
			*oldest = id;
		*newest = id;
		if (id == ledger)
		{
			*entries = n;
			found = 1;
		}
		p += 10;
	}
	if (found && *newest == ledger)
		*entries = -1;
	return found;
}

/* GET pp's internalStats into ps->http_body, with its ledger list; false with why. */
static bool
get_stats(PulsarSource *ps, PulsarPartition *pp, int64 ledger, int64 *entries, int64 *oldest,
		  int64 *newest, int *found, char *why, size_t whysize)
{
	char	   *path = psprintf("/admin/v2/persistent/%s/internalStats", pp->reader_topic);
	bool		ok = http_get(ps, path, why, whysize);

	if (ok && (*found = stats_ledger(ps->http_body, ledger, entries, oldest, newest)) < 0)
	{
		snprintf(why, whysize, "GET %s: not an answer of Pulsar's admin API (no \"ledgers\" list)", path);
		ok = false;
	}
	pfree(path);
	return ok;
}

/*
 * Report that the ledger of from, the job's position, was deleted before
 * the reader read on (up to ledger upto): a WARNING and the job's last
 * error, once per ledger, and the job goes on, as it does for Kafka.  When
 * the ledger's length was noted while it was listed, the entries after the
 * position are known, and counted in offsets_skipped (a lower bound: a
 * batched entry holds several messages, and ledgers of the topic between
 * it and upto, deleted too, were never seen); none after it is no loss.
 * Else how many is not known, and the message says so.
 */
static void
report_deleted(PulsarSource *ps, PulsarPartition *pp, PulsarMessageId from, int64 upto)
{
	bool		known = pp->end_ledger == from.ledger && pp->end_entries >= 0;
	int64		lost = known ? pp->end_entries - 1 - from.entry : -1;
	char	   *msg;

	if (known && lost <= 0)
		return;					/* read to its end */
	pp->reported_ledger = from.ledger;
	msg = psprintf("partition %d of Pulsar topic \"%s\": ledger " INT64_FORMAT
				   " of the job's position " INT64_FORMAT ":" INT64_FORMAT
				   " was deleted (retention) before the job read on; messages after it, up to ledger "
				   INT64_FORMAT ", %s; it goes on from the oldest message left",
				   pp->partition, ps->base.topic_names[0], from.ledger, from.ledger, from.entry, upto,
				   known ? psprintf("were deleted unread: at least " INT64_FORMAT
									" entries (counted in offsets_skipped; a batched entry holds several messages)", lost)
				   : "may have been deleted unread: how many is not known (the ledger was deleted before its length was learnt)");
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("%s", msg),
			 errhint("Give the namespace a retention longer than a job may stop or fall behind for.")));
	job_slot_set_error(ps->base.slot, msg);
	if (known && pp->metrics >= 0)
		ps->base.slot->partitions[pp->metrics].offsets_skipped += lost;
}

/*
 * The job's position of pp is not one of the partition's: its ledger is
 * past the partition's end.  Ledger ids are those of the BookKeeper
 * cluster behind the service URL, so this is another cluster (rebuilt, or
 * a failover), and every message would be taken for one already handed
 * out, for ever: the job fails, as for a Kafka position past the log's end.
 */
static void
position_not_in_topic(PulsarSource *ps, PulsarPartition *pp, const char *end)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("partition %d of Pulsar topic \"%s\" ends at %s, before the job's position "
					INT64_FORMAT ":" INT64_FORMAT,
					pp->partition, ps->base.topic_names[0], end, pp->last.ledger, pp->last.entry),
			 errdetail("Ledger ids are those of the cluster behind the service URL: it was rebuilt, or is "
					   "another cluster, so the job's positions no longer fit the topic, and every message "
					   "would be taken for one already read. To go on, restore a checkpoint whose positions "
					   "the topic holds with mailer.restore_job, or drop the job and create it again to read "
					   "the topic anew."),
			 errhint("Retrying cannot help: the job stays failed until one of these.")));
}

/*
 * The reader's first message in a new ledger, id: the rest of the last
 * one may have been deleted under it.  A reader holds nothing back: the
 * broker deletes a ledger whatever a reader has read of it, and the
 * reader, which cannot read on there, goes on from the next ledger without
 * a word.  Checked here, before the message is handed out, so that no
 * checkpoint holds a position past the switch unchecked: a stop, a kill or
 * a server restart right after the switch cannot lose the report (the next
 * run meets the same switch).  The old ledger still listed was read to its
 * end; deleted, it is reported.  The new ledger's length is noted when it
 * is closed, should it be deleted under the reader in turn.  False, with
 * why, when the broker could not be asked: the message waits.  The same
 * covers a restart after a deleted position: the first message comes from
 * a later ledger.
 */
static bool
check_switch(PulsarSource *ps, PulsarPartition *pp, const PulsarMessageId *id, char *why, size_t whysize)
{
	int64		entries = -1,
				oldest,
				newest;
	int			found;

	if (pp->last.ledger == pp->reported_ledger)
		return true;
	if (!get_stats(ps, pp, pp->last.ledger, &entries, &oldest, &newest, &found, why, whysize))
		return false;
	if (found == 0)
		report_deleted(ps, pp, pp->last, id->ledger);
	note_length(ps, pp, id->ledger);
	return true;
}

/*
 * Note the length of ledger, the reader's now, from the internalStats
 * answer in ps->http_body, when it is closed: should it be deleted under
 * the reader, the loss is then known (report_deleted).
 */
static void
note_length(PulsarSource *ps, PulsarPartition *pp, int64 ledger)
{
	int64		entries = -1,
				oldest,
				newest;

	pp->asked_ledger = ledger;
	if (stats_ledger(ps->http_body, ledger, &entries, &oldest, &newest) == 1 && entries >= 0)
	{
		pp->end_ledger = ledger;
		pp->end_entries = entries;
	}
}

/*
 * A reader that handed out nothing since the last metadata refresh
 * (stalled: once per position) has its ledger looked up in internalStats,
 * at the refresh: deleted, it is reported now, not when a message comes
 * (check_switch then says nothing more of it); past the partition's newest
 * ledger, the position is not the topic's, and the job fails.  Still
 * listed, a caught-up reader's ledger's length is its last confirmed
 * entry, noted so that the ledger deleted after is no loss.
 */
static void
check_retention(PulsarSource *ps, PulsarPartition *pp)
{
	bool		stalled = pp->count == pp->count_at_refresh && pp->last.ledger >= 0 &&
		(pp->checked.ledger != pp->last.ledger || pp->checked.entry != pp->last.entry ||
		 pp->checked.batch_index != pp->last.batch_index);
	PulsarMessageId from = pp->last;
	char		why[400];
	int64		entries = -1,
				oldest = -1,
				newest = -1;
	int			found;

	pp->count_at_refresh = pp->count;
	if (!stalled || pp->held != NULL || from.ledger == pp->reported_ledger)
		return;
	if (!get_stats(ps, pp, from.ledger, &entries, &oldest, &newest, &found, why, sizeof(why)))
		return;					/* asked again at the next refresh */
	pp->checked = pp->last;
	if (found == 1)
	{
		/* hand_out forgets the length once the ledger grows. */
		const char *lac = strstr(ps->http_body, "\"lastConfirmedEntry\":\"");	/* 22 bytes */
		int64		lac_ledger,
					lac_entry;

		pp->fits_ledger = from.ledger;
		if (entries < 0 && lac != NULL &&
			sscanf(lac + 22, INT64_FORMAT ":" INT64_FORMAT, &lac_ledger, &lac_entry) == 2 &&
			lac_ledger == from.ledger && lac_entry == from.entry)
			entries = lac_entry + 1;
		pp->end_ledger = entries >= 0 ? from.ledger : -1;
		pp->end_entries = entries;
		return;
	}
	if (newest >= 0 && from.ledger > newest)
		position_not_in_topic(ps, pp, psprintf("ledger " INT64_FORMAT " (its newest)", newest));
	if (oldest >= 0 && from.ledger < oldest)
		report_deleted(ps, pp, from, oldest);
}

/*
 * Start the partition's reader just after the last message handed out
 * (or at its start).  Whether that position is still there is learnt from
 * where the reader goes on (check_switch), not asked before each open:
 * a reader reopened every second through an outage would ask the broker's
 * heaviest admin call as often.
 */
static void
open_reader(PulsarSource *ps, PulsarPartition *pp)
{
	char		err[512];
	char		from[ID_LEN];

	if (!pp->handed)
		strlcpy(from, pp->start, sizeof(from));
	else if (!pulsar_message_id_encode(&pp->last, from, sizeof(from)))
		elog(ERROR, "could not encode a Pulsar message id");
	pp->conn = pulsar_ws_reader(ps->ws, ps->spec->service_url, pp->reader_topic, from,
								RECEIVER_QUEUE, err, sizeof(err));
	if (pp->conn == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not start a Pulsar reader of \"%s\": %s", pp->reader_topic, err)));
}

static int
pulsar_poll(Source *src, SourceMessage *out, int max)
{
	PulsarSource *ps = (PulsarSource *) src;
	TimestampTz now = GetCurrentTimestamp();
	int			n = 0;

	for (int i = 0; i < ps->nframes; i++)
		pulsar_ws_frame_free(ps->frames[i]);
	ps->nframes = 0;
	MemoryContextReset(ps->batch_ctx);
	if (ps->capacity < max)
	{
		ps->frames = ps->frames ? repalloc(ps->frames, sizeof(char *) * max)
			: MemoryContextAlloc(TopMemoryContext, sizeof(char *) * max);
		ps->props = ps->props ? repalloc(ps->props, sizeof(MessageProperties) * max)
			: MemoryContextAlloc(TopMemoryContext, sizeof(MessageProperties) * max);
		ps->capacity = max;
	}
	ps->broker_slow = false;
	if (now >= ps->next_refresh)
		refresh_partitions(ps);
	if (pulsar_ws_service(ps->ws, 0) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("libwebsockets failed while reading Pulsar")));

	for (int k = 0; k < ps->nparts && n < max; k++)
	{
		PulsarPartition *pp = &ps->parts[(ps->next_part + k) % ps->nparts];
		char	   *frame;
		size_t		len;
		const char *why;

		if (pp->conn == NULL)
		{
			if (now >= pp->reopen_at)
				open_reader(ps, pp);
			continue;
		}
		/* A held message first: nothing of the partition goes before it. */
		if (pp->held != NULL)
		{
			char	   *held = pp->held;

			if (now < pp->held_retry_at)
				continue;
			pp->held = NULL;
			if (hand_out(ps, pp, held, pp->held_len, &out[n]))
				n++;
		}
		while (n < max && pp->held == NULL && (frame = pulsar_ws_take(pp->conn, &len)) != NULL)
			if (hand_out(ps, pp, frame, len, &out[n]))
				n++;
		if (pulsar_ws_state(pp->conn, NULL) == PULSAR_WS_OPEN)
			pp->reopen_ms = 0;
		/* Closed, and every frame it received handed out: open again after the last. */
		if (n < max && pp->held == NULL && pulsar_ws_state(pp->conn, &why) == PULSAR_WS_CLOSED)
		{
			snprintf(pp->why, sizeof(pp->why), "waiting for Pulsar: reader of \"%s\": %s",
					 pp->reader_topic, why ? why : "closed");
			pulsar_ws_close(pp->conn);
			pp->conn = NULL;
			/*
			 * A reader closes when its topic is unloaded (a bundle move, a
			 * broker restart), which closes the ledger it reads: its
			 * length is listed now, and may be deleted before the reader's
			 * next message (retention may trim at once), so a
			 * caught-up reader would be reported at the switch.  Asked
			 * once per ledger, not per reopen, and only by a reader that
			 * read: an outage's reopens cost the broker nothing more.
			 */
			if (pp->handed && pp->end_ledger != pp->last.ledger && pp->closed_ledger != pp->last.ledger)
			{
				int64		entries,
							oldest,
							newest;
				int			found;
				char		err[400];

				pp->closed_ledger = pp->last.ledger;
				if (get_stats(ps, pp, pp->last.ledger, &entries, &oldest, &newest, &found, err, sizeof(err)))
					note_length(ps, pp, pp->last.ledger);
			}
			/* A broker that keeps refusing is asked less often, down to every REOPEN_MAX_MS. */
			pp->reopen_ms = pp->reopen_ms == 0 ? REOPEN_MS : Min(pp->reopen_ms * 2, REOPEN_MAX_MS);
			pp->reopen_at = TimestampTzPlusMilliseconds(now, pp->reopen_ms);
		}
	}
	if (ps->nparts > 0)
		ps->next_part = (ps->next_part + 1) % ps->nparts;
	/* The acknowledgements go out now, not after the wait. */
	if (n > 0)
		(void) pulsar_ws_service(ps->ws, 0);
	update_metrics(ps);
	/* What the source waits on: the metadata, else a reader that is not open. */
	ps->base.error = ps->error[0] ? ps->error : NULL;
	for (int i = 0; i < ps->nparts && ps->base.error == NULL; i++)
	{
		PulsarPartition *pp = &ps->parts[i];

		if ((pp->held != NULL || pp->conn == NULL || pulsar_ws_state(pp->conn, NULL) == PULSAR_WS_CLOSED) &&
			pp->why[0])
			ps->base.error = pp->why;
		else if (pulsar_ws_state(pp->conn, NULL) == PULSAR_WS_OPEN)
			pp->why[0] = '\0';
	}
	return n;
}

/*
 * Parse one frame of pp's reader into out; false (the frame freed) when it
 * repeats a message already handed out.  A frame without a message id is
 * the broker's fault: the job fails, and goes on from its checkpoint.  A
 * message this source cannot read (a Pulsar message may have any number
 * of properties, and a NUL in its key or a property, which the parser
 * does not hold) is handed out all the same, unreadable: its record fails
 * at decode, a dead letter naming its message id, and the job reads on,
 * rather than meet it again at every restart.
 */
static bool
hand_out(PulsarSource *ps, PulsarPartition *pp, char *frame, size_t len, SourceMessage *out)
{
	PulsarMessage msg_parsed;
	PulsarMessage *msg = &msg_parsed;
	MessageProperties *props = &ps->props[ps->nframes];
	PulsarMessageId id;
	char		err[256];
	char	   *ack;
	size_t		ack_len;

	bool		parsed = pulsar_parse_message(frame, len, msg, err, sizeof(err));
	char		why[400];
	int64		entries,
				oldest,
				newest;
	int			found;

	if (msg->message_id == NULL || !pulsar_message_id_decode(msg->message_id, &id))
	{
		pulsar_ws_frame_free(frame);
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("the Pulsar reader of \"%s\" received a frame that is not a message: %s",
						pp->reader_topic, parsed ? "its messageId is not one" : err),
				 errhint("The job starts again from its last checkpoint.")));
	}
	/*
	 * A reader starts after last, so a message of an earlier ledger says
	 * that last is not a position of this partition (position_not_in_topic)
	 * when the broker's last message is before it too; asked once per
	 * ledger of last, and again at the next such message if the broker did
	 * not answer.
	 */
	if (pp->last.ledger >= 0 && id.ledger < pp->last.ledger && pp->fits_ledger != pp->last.ledger)
	{
		PulsarMessageId end;

		if (last_message_id(ps, pp, &end, why, sizeof(why)))
		{
			if (end.ledger < pp->last.ledger)
			{
				pulsar_ws_frame_free(frame);
				position_not_in_topic(ps, pp, psprintf("message " INT64_FORMAT ":" INT64_FORMAT,
													   end.ledger, end.entry));
			}
			pp->fits_ledger = pp->last.ledger;
		}
	}
	/* A new ledger: checked before its first message is handed out (check_switch). */
	if (pp->last.ledger >= 0 && id.ledger > pp->last.ledger && !check_switch(ps, pp, &id, why, sizeof(why)))
	{
		snprintf(pp->why, sizeof(pp->why),
				 "waiting for Pulsar: reader of \"%s\": its switch to ledger " INT64_FORMAT
				 " is checked for deleted messages before it reads on: %s",
				 pp->reader_topic, id.ledger, why);
		pp->held = frame;
		pp->held_len = len;
		pp->held_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), METADATA_RETRY_MS);
		return false;
	}
	/*
	 * The first ledger a run reads in (no switch to it seen): its length,
	 * once, for the same reason; a broker that does not answer holds
	 * nothing back, the loss is then reported without its size.
	 */
	else if (id.ledger != pp->asked_ledger && id.ledger != pp->end_ledger &&
			 (pp->last.ledger < 0 || id.ledger == pp->last.ledger))
	{
		pp->asked_ledger = id.ledger;
		if (get_stats(ps, pp, id.ledger, &entries, &oldest, &newest, &found, why, sizeof(why)))
			note_length(ps, pp, id.ledger);
	}
	/* Flow control only: a reader's acknowledgement moves no position. */
	if ((ack = pulsar_frame_ack(msg->message_id, &ack_len)) != NULL)
	{
		(void) pulsar_ws_send(pp->conn, ack, ack_len);
		free(ack);
	}
	if (pp->last.ledger >= 0 &&
		(id.ledger < pp->last.ledger ||
		 (id.ledger == pp->last.ledger && (id.entry < pp->last.entry ||
										   (id.entry == pp->last.entry && id.batch_index <= pp->last.batch_index)))))
	{
		/* Already handed out: never twice. */
		pulsar_ws_frame_free(frame);
		return false;
	}
	if (id.ledger == pp->end_ledger && id.entry >= pp->end_entries)
		pp->end_ledger = -1;		/* it grew: its length is not known any more */
	pp->last = id;
	pp->handed = true;
	ps->frames[ps->nframes++] = frame;
	out->unreadable = NULL;
	if (!parsed)
	{
		out->unreadable = MemoryContextStrdup(ps->batch_ctx,
											  psprintf("the Pulsar message %s (ledger " INT64_FORMAT ", entry " INT64_FORMAT
													   ", batch index %d) of \"%s\" could not be read: %s",
													   msg->message_id, id.ledger, id.entry, id.batch_index,
													   pp->reader_topic, err));
		msg->key = NULL;
		msg->payload = NULL;
		msg->payload_len = 0;
		msg->nproperties = 0;
		msg->event_time[0] = msg->publish_time[0] = '\0';
	}
	/* Only the pointers: a message's parse is 1 kB, a batch holds thousands. */
	props->n = msg->nproperties;
	if (props->n > 0)
	{
		props->names = MemoryContextAlloc(ps->batch_ctx, sizeof(char *) * props->n);
		props->values = MemoryContextAlloc(ps->batch_ctx, sizeof(char *) * props->n);
		memcpy(props->names, msg->property_names, sizeof(char *) * props->n);
		memcpy(props->values, msg->property_values, sizeof(char *) * props->n);
	}
	out->key = msg->key;
	out->key_len = msg->key ? (int) strlen(msg->key) : 0;
	out->value = (const char *) msg->payload;
	out->value_len = (int) msg->payload_len;
	out->topic = 0;
	out->partition = pp->partition;
	out->offset = pp->count++;
	out->timestamp = message_time(msg->event_time[0] ? msg->event_time : msg->publish_time);
	out->opaque = props;
	if (pp->metrics >= 0)
		ps->base.slot->partitions[pp->metrics].records_in++;
	return true;
}

/*
 * A time the broker sends: ISO 8601 with an offset, or milliseconds since
 * the epoch; DT_NOBEGIN when absent or not understood, as a Kafka message
 * without a timestamp.
 */
static TimestampTz
message_time(const char *text)
{
	TimestampTz t;
	int64		ms;
	char	   *end;

	if (text[0] == '\0')
		return DT_NOBEGIN;
	if (iso_time_parse(text, strlen(text), &t))
		return t;
	errno = 0;
	ms = strtoll(text, &end, 10);
	return *end == '\0' && errno == 0 ? kafka_timestamp(ms) : DT_NOBEGIN;
}

/* The message's properties as a jsonb object, or NULL when it has none. */
static Jsonb *
pulsar_headers(Source *src, SourceMessage *m)
{
	MessageProperties *props = (MessageProperties *) m->opaque;
	JsonbParseState *state = NULL;

	if (props->n == 0)
		return NULL;
	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int i = 0; i < props->n; i++)
	{
		const char *name = props->names[i];
		const char *value = props->values[i];
		JsonbValue	v;

		/* As for Kafka's headers: a bad name fails the record, a bad value shows as null. */
		if (!pg_verify_mbstr(GetDatabaseEncoding(), name, strlen(name), true))
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("a property name is not valid text in the database encoding"),
					 errdetail("Property %d of the message.", i + 1)));
		jsonb_push_key(&state, name);
		if (value != NULL && pg_verify_mbstr(GetDatabaseEncoding(), value, strlen(value), true))
			jsonb_string_value(&v, value, strlen(value));
		else
			v.type = jbvNull;
		pushJsonbValue(&state, WJB_VALUE, &v);
	}
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

/*
 * Bring the epoll set in step with the sockets libwebsockets wants watched,
 * and say how long the worker may wait.
 */
static long
pulsar_wait_ms(Source *src)
{
	PulsarSource *ps = (PulsarSource *) src;
	struct pollfd fds[MAX_FDS];
	int			max_wait;
	int			n = pulsar_ws_poll_set(ps->ws, fds, MAX_FDS, &max_wait);
	TimestampTz now = GetCurrentTimestamp();
	long		wait = Min(max_wait, TimestampDifferenceMilliseconds(now, ps->next_refresh));

	for (int i = 0; i < ps->nregistered; i++)
	{
		bool		kept = false;

		for (int j = 0; j < n && !kept; j++)
			kept = fds[j].fd == ps->registered[i];
		/* A socket closed since left the set by itself: an error here is no matter. */
		if (!kept)
			(void) epoll_ctl(ps->epfd, EPOLL_CTL_DEL, ps->registered[i], NULL);
	}
	for (int j = 0; j < n; j++)
	{
		struct epoll_event ev = {0};

		ev.events = ((fds[j].events & POLLIN) ? EPOLLIN : 0) | ((fds[j].events & POLLOUT) ? EPOLLOUT : 0);
		ev.data.fd = fds[j].fd;
		if (epoll_ctl(ps->epfd, EPOLL_CTL_MOD, fds[j].fd, &ev) != 0 &&
			epoll_ctl(ps->epfd, EPOLL_CTL_ADD, fds[j].fd, &ev) != 0)
			wait = 0;			/* cannot be watched: look again at once */
		ps->registered[j] = fds[j].fd;
	}
	ps->nregistered = n;
	for (int i = 0; i < ps->nparts; i++)
	{
		if (ps->parts[i].conn == NULL)
			wait = Min(wait, TimestampDifferenceMilliseconds(now, ps->parts[i].reopen_at));
		if (ps->parts[i].held != NULL)
			wait = Min(wait, TimestampDifferenceMilliseconds(now, ps->parts[i].held_retry_at));
	}
	return Max(wait, 0);
}

static pgsocket
pulsar_event_fd(Source *src)
{
	return ((PulsarSource *) src)->epfd;
}

/* {"persistent://t/ns/topic": {"partition": "last message id" | "earliest" | start id}}. */
static Jsonb *
pulsar_positions(Source *src)
{
	PulsarSource *ps = (PulsarSource *) src;
	JsonbParseState *state = NULL;
	JsonbValue *restored = NULL;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	if (ps->restored != NULL)
		restored = getKeyJsonValueFromContainer(&ps->restored->root, ps->base.topic_names[0],
												strlen(ps->base.topic_names[0]), NULL);
	/* A topic never positioned is left out, so that the next start still starts it per the spec. */
	if (ps->nparts > 0 || (restored != NULL && restored->type == jbvBinary))
	{
		jsonb_push_key(&state, ps->base.topic_names[0]);
		pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
		for (int i = 0; i < ps->nparts; i++)
		{
			PulsarPartition *pp = &ps->parts[i];
			char		id[ID_LEN];
			JsonbValue	v;

			if (!pp->handed)
				strlcpy(id, pp->start, sizeof(id));
			else if (!pulsar_message_id_encode(&pp->last, id, sizeof(id)))
				elog(ERROR, "could not encode a Pulsar message id");
			jsonb_push_key(&state, psprintf("%d", pp->partition));
			/* The value points to its text until the object is built: a copy per partition. */
			pushJsonbValue(&state, WJB_VALUE, jsonb_string_value(&v, pstrdup(id), strlen(id)));
		}
		/* An owned partition restored and not open yet (the broker was away) keeps its position. */
		push_restored_not_open(ps, ps->restored, &state);
		pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	}
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

/*
 * Push, into the topic's object being built, the values obj (restored
 * positions or records_in) holds for partitions this subtask owns and has
 * not open: the broker was away since the start, and what the checkpoint
 * had must survive the next one.
 */
static void
push_restored_not_open(PulsarSource *ps, Jsonb *obj, JsonbParseState **state)
{
	JsonbValue *topic = NULL;
	JsonbIterator *it;
	JsonbValue	k,
				v;
	JsonbIteratorToken tok;

	if (obj != NULL)
		topic = getKeyJsonValueFromContainer(&obj->root, ps->base.topic_names[0],
											 strlen(ps->base.topic_names[0]), NULL);
	if (topic == NULL || topic->type != jbvBinary)
		return;
	it = JsonbIteratorInit(topic->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		char	   *key;
		int32		p;
		bool		open = false;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(k.val.string.val, k.val.string.len);
		(void) JsonbIteratorNext(&it, &v, true);
		p = atoi(key);
		for (int i = 0; i < ps->nparts && !open; i++)
			open = ps->parts[i].partition == p;
		if (open || !source_owns(0, p, ps->subtask, ps->parallelism))
			continue;
		jsonb_push_key(state, key);
		pushJsonbValue(state, WJB_VALUE, &v);
	}
}

/*
 * {"topic": {"partition": messages handed out}}: the offsets go on after a
 * restart, also through a run that never reached the broker.
 */
static Jsonb *
pulsar_records_in(Source *src)
{
	PulsarSource *ps = (PulsarSource *) src;
	JsonbParseState *state = NULL;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	jsonb_push_key(&state, ps->base.topic_names[0]);
	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int i = 0; i < ps->nparts; i++)
	{
		JsonbValue	v;

		jsonb_push_key(&state, psprintf("%d", ps->parts[i].partition));
		v.type = jbvNumeric;
		v.val.numeric = int64_to_numeric(ps->parts[i].count);
		pushJsonbValue(&state, WJB_VALUE, &v);
	}
	push_restored_not_open(ps, ps->restored_records_in, &state);
	pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}

static void
pulsar_committed(Source *src)
{
	/* The positions a "latest" start took are in the checkpoint now. */
	src->unpinned = false;
}

static bool
pulsar_finished(Source *src)
{
	return false;				/* a topic has no end */
}

static int
pulsar_partition_count(Source *src)
{
	return ((PulsarSource *) src)->nparts;
}

static void
pulsar_partition_at(Source *src, int i, int *topic, int32 *partition)
{
	*topic = 0;
	*partition = ((PulsarSource *) src)->parts[i].partition;
}

/* Note the input available now: partitions added since count too, so refresh first. */
static void
pulsar_mark_end(Source *src)
{
	PulsarSource *ps = (PulsarSource *) src;

	ps->mark_pending = true;
	ps->broker_slow = false;
	refresh_partitions(ps);
}

/*
 * Each partition's last message id now; until the broker answers, no mark,
 * and why goes to last_error, where wait_job's timeout points (the
 * metadata's own failure is there already, as ps->error).
 */
static void
take_marks(PulsarSource *ps)
{
	char		why[400];

	if (ps->error[0] != '\0')
		return;
	for (int i = 0; i < ps->nparts; i++)
	{
		PulsarPartition *pp = &ps->parts[i];

		if (!last_message_id(ps, pp, &pp->mark, why, sizeof(why)))
		{
			char		msg[600];

			snprintf(msg, sizeof(msg), "waiting for Pulsar: topic \"%s\": wait_job's mark of partition %d: %s",
					 ps->base.topic_names[0], pp->partition, why);
			job_slot_set_error(ps->base.slot, msg);
			return;				/* asked again at the next refresh */
		}
		/* A position past the partition's last message would make wait_job's target one already reached. */
		if (pp->mark.entry >= 0 && pp->last.ledger > pp->mark.ledger)
			position_not_in_topic(ps, pp, psprintf("message " INT64_FORMAT ":" INT64_FORMAT,
												   pp->mark.ledger, pp->mark.entry));
	}
	ps->mark_pending = false;
}

/*
 * Every partition has handed out its mark's message, or had none (entry
 * -1).  Within a batched entry, the batch index counts: a poll may stop
 * mid-entry (its max, or the bytes a read brought).  A mark without one
 * (-1, an entry not batched) is reached at its entry.
 */
static bool
pulsar_reached_end(Source *src)
{
	PulsarSource *ps = (PulsarSource *) src;

	if (ps->mark_pending)
		return false;
	for (int i = 0; i < ps->nparts; i++)
	{
		PulsarPartition *pp = &ps->parts[i];

		if (pp->mark.ledger == -2 || pp->mark.entry < 0)
			continue;
		if (pp->last.ledger < pp->mark.ledger ||
			(pp->last.ledger == pp->mark.ledger &&
			 (pp->last.entry < pp->mark.entry ||
			  (pp->last.entry == pp->mark.entry && pp->last.batch_index < pp->mark.batch_index))))
			return false;
	}
	return true;
}

static void
update_metrics(PulsarSource *ps)
{
	JobSlot    *slot = ps->base.slot;

	for (int i = 0; i < ps->nparts; i++)
	{
		PulsarPartition *pp = &ps->parts[i];

		if (pp->metrics < 0)
			continue;
		strlcpy(slot->partitions[pp->metrics].topic, ps->base.topic_names[0], JOB_SLOT_TOPIC_LEN);
		slot->partitions[pp->metrics].partition = pp->partition;
		slot->partitions[pp->metrics].position = pp->count;
		slot->partitions[pp->metrics].end_offset = -1;	/* lag from lastMessageId: not yet */
	}
	slot->npartitions = Min(ps->nparts, JOB_SLOT_MAX_PARTITIONS);
}

static const SourceOps pulsar_ops = {
	.poll = pulsar_poll,
	.headers = pulsar_headers,
	.wait_ms = pulsar_wait_ms,
	.event_fd = pulsar_event_fd,
	.positions = pulsar_positions,
	.records_in = pulsar_records_in,
	.committed = pulsar_committed,
	.finished = pulsar_finished,
	.partition_count = pulsar_partition_count,
	.partition_at = pulsar_partition_at,
	.mark_end = pulsar_mark_end,
	.reached_end = pulsar_reached_end,
};
