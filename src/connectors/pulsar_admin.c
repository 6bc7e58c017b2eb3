/*
 * pulsar_admin.c
 *		GET requests to Pulsar's REST admin API (pulsar_admin.h), for the
 *		Pulsar source and sink: fixed paths, bounded time, redirects only to
 *		the same request on another broker, and errors told by status,
 *		never by the reply's body.
 *
 * libcurl may start a thread (a resolver), so its calls run with signals
 * blocked.
 *
 * Security (docs/ARCHITECTURE.md, "Pulsar security"): the token goes in an
 * Authorization header of every call; over https:// the broker's
 * certificate and host name are verified (libcurl's defaults, set anyway),
 * against the spec's CA or the system's, and a redirect is followed only to
 * https:// again, so that the token never travels in the clear after it.
 *
 * Design: docs/ARCHITECTURE.md, "Source poll" (who may name a service_url,
 * and what is asked of it).
 */
#include "postgres.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "utils/timestamp.h"

#include "base/signals.h"
#include "connectors/pulsar_admin.h"
#include "plan/pulsar_options.h"

#define MAX_REDIRECTS			3		/* an admin call's 307/308s followed */
#define HTTP_BODY_MAX			(16 * 1024 * 1024)	/* internalStats of ~190000 ledgers */

/*
 * The CA file's certificates, read here once rather than by libcurl and
 * libwebsockets at each call: they would open it with every signal
 * blocked, where a FIFO or a device that never ends holds the worker past
 * stop_job, pg_terminate_backend and a fast shutdown.  So only a regular
 * file is read, opened without blocking, and within CA_FILE_MAX_BYTES.
 */
#define CA_FILE_MAX_BYTES		(1024 * 1024)

static char *
read_ca_file(const char *path)
{
	int			fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	char	   *pem;
	off_t		done = 0;

	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open the Pulsar CA file \"%s\" (options.tls.ca.location): %m", path),
				 errhint("Give a PEM file the server's operating system user can read, or the CA inline as tls.ca.pem.")));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > CA_FILE_MAX_BYTES)
	{
		close(fd);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the Pulsar CA file \"%s\" (options.tls.ca.location) is not a regular file of at most 1 MB", path),
				 errhint("Give a PEM file, or the CA inline as tls.ca.pem.")));
	}
	pem = palloc(st.st_size + 1);
	while (done < st.st_size)
	{
		ssize_t		n = read(fd, pem + done, st.st_size - done);

		CHECK_FOR_INTERRUPTS();
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;				/* a file that shrank: what was read */
		done += n;
	}
	close(fd);
	pem[done] = '\0';
	return pem;
}

PulsarWsSecurity
pulsar_security_of(const char *service_url, List *options)
{
	PulsarWsSecurity sec = {0};
	const char *ca_file = pulsar_option(options, PULSAR_OPTION_CA_FILE);

	sec.tls = strncmp(service_url, "https://", 8) == 0;
	sec.token = pulsar_option(options, PULSAR_OPTION_TOKEN);
	sec.ca_pem = pulsar_option(options, PULSAR_OPTION_CA_PEM);
	if (ca_file && sec.tls)
		sec.ca_pem = read_ca_file(ca_file);
	return sec;
}

PulsarAdmin *
pulsar_admin_new(const char *service_url, const PulsarWsSecurity *sec, JobSlot *slot)
{
	PulsarAdmin *a = palloc0(sizeof(PulsarAdmin));
	sigset_t	saved;

	a->service_url = pstrdup(service_url);
	a->sec = *sec;
	a->slot = slot;
	if (sec->token)
	{
		char	   *header = psprintf("Authorization: Bearer %s", sec->token);

		a->headers = curl_slist_append(NULL, header);
		/* The header's copy is libcurl's; this one is not left behind. */
		explicit_bzero(header, strlen(header));
		pfree(header);
		if (a->headers == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory")));
	}
	mailer_block_signals(&saved);
	a->curl = curl_easy_init();
	mailer_restore_signals(&saved);
	if (a->curl == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not start libcurl for Pulsar's admin API")));
	a->cap = 8192;
	if ((a->body = malloc(a->cap)) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	a->body[0] = '\0';
	return a;
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
	PulsarAdmin *a = (PulsarAdmin *) arg;
	size_t		n = size * nmemb;

	if (n > HTTP_BODY_MAX - a->len)
	{
		a->too_long = true;
		return 0;
	}
	if (a->len + n + 1 > a->cap)
	{
		size_t		cap = a->cap;
		char	   *grown;

		while (cap < a->len + n + 1)
			cap *= 2;
		if ((grown = realloc(a->body, cap)) == NULL)
			return 0;
		a->body = grown;
		a->cap = cap;
	}
	memcpy(a->body + a->len, data, n);
	a->len += n;
	a->body[a->len] = '\0';
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
			return "not authenticated: the broker wants a valid token (check the options' \"auth.token\")";
		case 403:
			return "not authorized: the token's role may not do this on the topic or its namespace";
		case 404:
			return "not found (the topic or its namespace does not exist, or this is not a Pulsar admin API)";
		case 301:
		case 302:
		case 303:
			return "redirected, which is not followed (only a 307 or 308 to the same path on another broker is)";
		case 307:
		case 308:
			return "redirected elsewhere than the same path on another broker by the same scheme (another scheme, path or query, a user name), which is not followed";
		default:
			return status >= 500 ? "the broker failed" : "not an answer of Pulsar's admin API";
	}
}

/* libcurl's progress callback: a stop request aborts the call (about once a second). */
static int
http_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	JobSlot    *slot = ((PulsarAdmin *) arg)->slot;

	return slot != NULL && job_stop_requested(slot) ? 1 : 0;
}

/*
 * The URL to follow a 307/308 of GET path to, or NULL: only the same
 * request on another broker (docs/ARCHITECTURE.md, "Source poll").  A
 * broker answers the topic-level admin calls for a partition another
 * broker owns with a redirect to the owner, which adds only
 * "authoritative=true|false" to the query; since any role may name any
 * host:port as service_url, a redirect that keeps the scheme, the path and
 * the query but moves to another host:port asks nothing more of the
 * network than a job could ask already.  The scheme is the service URL's
 * (want_scheme): a token sent over https never goes on in the clear.  The URL followed is built
 * from the checked parts, never the Location as sent.
 */
static char *
same_request_elsewhere(const char *location, const char *path, const char *want_scheme)
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
			strcmp(scheme, want_scheme) == 0 &&
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
		next = psprintf("%s://%s:%s%s%s%s", want_scheme, host, port, upath, query ? "?" : "", query ? query : "");
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
 * GET service_url + path from the REST admin API into a->body; false
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
bool
pulsar_admin_get(PulsarAdmin *a, const char *path, char *why, size_t whysize)
{
	char	   *url = psprintf("%s%s", a->service_url, path);
	long		status = 0;
	CURLcode	rc = CURLE_OK;
	sigset_t	saved;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   a->timeout_ms > 0 ? a->timeout_ms : BROKER_TIMEOUT_MS);
	int			hops;
	bool		refused = false;
	const char *scheme = a->sec.tls ? "https" : "http";
	char		tls_error[CURL_ERROR_SIZE] = "";

	CHECK_FOR_INTERRUPTS();
	if (a->slow || (a->slot != NULL && job_stop_requested(a->slot)))
	{
		snprintf(why, whysize, "GET %s: %s", path,
				 a->slow ? "not asked yet: the broker did not answer another admin request within "
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
		a->len = 0;
		a->body[0] = '\0';
		a->too_long = false;
		status = 0;
		curl_easy_reset(a->curl);
		curl_easy_setopt(a->curl, CURLOPT_URL, url);
		curl_easy_setopt(a->curl, CURLOPT_TIMEOUT_MS, remaining);
		curl_easy_setopt(a->curl, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(a->curl, CURLOPT_PROTOCOLS_STR, scheme);
		if (a->headers)
			curl_easy_setopt(a->curl, CURLOPT_HTTPHEADER, a->headers);
		if (a->sec.tls)
		{
			curl_easy_setopt(a->curl, CURLOPT_SSL_VERIFYPEER, 1L);
			curl_easy_setopt(a->curl, CURLOPT_SSL_VERIFYHOST, 2L);
			curl_easy_setopt(a->curl, CURLOPT_ERRORBUFFER, tls_error);
			if (a->sec.ca_pem)
			{
				struct curl_blob ca = {(void *) a->sec.ca_pem, strlen(a->sec.ca_pem), CURL_BLOB_COPY};

				/* The given certificates alone: not the system's directory too. */
				curl_easy_setopt(a->curl, CURLOPT_CAINFO_BLOB, &ca);
				curl_easy_setopt(a->curl, CURLOPT_CAINFO, NULL);
				curl_easy_setopt(a->curl, CURLOPT_CAPATH, NULL);
			}
		}
		/* The path as built, never normalized into another (README, "Security"). */
		curl_easy_setopt(a->curl, CURLOPT_PATH_AS_IS, 1L);
		curl_easy_setopt(a->curl, CURLOPT_WRITEFUNCTION, http_write);
		curl_easy_setopt(a->curl, CURLOPT_WRITEDATA, a);
		curl_easy_setopt(a->curl, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(a->curl, CURLOPT_XFERINFOFUNCTION, http_progress);
		curl_easy_setopt(a->curl, CURLOPT_XFERINFODATA, a);
		mailer_block_signals(&saved);
		rc = curl_easy_perform(a->curl);
		mailer_restore_signals(&saved);
		if (rc != CURLE_OK)
			break;
		curl_easy_getinfo(a->curl, CURLINFO_RESPONSE_CODE, &status);
		if (status != 307 && status != 308)
			break;
		if (hops == MAX_REDIRECTS)
		{
			snprintf(why, whysize, "GET %s: HTTP %ld: redirected more than %d times, not followed further",
					 path, status, MAX_REDIRECTS);
			refused = true;
			break;
		}
		curl_easy_getinfo(a->curl, CURLINFO_REDIRECT_URL, &location);
		if ((next = same_request_elsewhere(location, path, scheme)) == NULL)
			break;				/* said by http_status_text */
		pfree(url);
		url = next;
	}
	/* The buffer is this call's. */
	curl_easy_setopt(a->curl, CURLOPT_ERRORBUFFER, NULL);
	if (rc == CURLE_OPERATION_TIMEDOUT && a->timeout_ms <= 0)
		a->slow = true;
	if (!refused && rc == CURLE_ABORTED_BY_CALLBACK)
		snprintf(why, whysize, "GET %s: given up: the job is stopping", path);
	else if (!refused)
	{
		/* After a redirect, the broker asked: its host:port, never the path (ours). */
		char		at[300] = "";

		if (hops > 0)
			snprintf(at, sizeof(at), " (redirected to the broker at %.*s)",
					 (int) strcspn(url + strlen(scheme) + 3, "/"), url + strlen(scheme) + 3);
		if (rc == CURLE_WRITE_ERROR)
			snprintf(why, whysize, "GET %s%s: %s", path, at, a->too_long ?
					 "the reply is longer than 16 MB, more than any reply asked for here should be"
					 : "out of memory for the reply");
		else if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
				 rc == CURLE_SSL_CONNECT_ERROR)
			/* libcurl's own words on the certificate: which check failed. */
			snprintf(why, whysize, "GET %s%s: TLS: %s (the broker's certificate must be signed by the CA given in the options, or the system's, and name the host)",
					 path, at, tls_error[0] ? tls_error : curl_easy_strerror(rc));
		else if (rc != CURLE_OK)
			snprintf(why, whysize, "GET %s%s: %s", path, at, curl_easy_strerror(rc));
		else if (status != 200)
			snprintf(why, whysize, "GET %s%s: HTTP %ld: %s", path, at, status, http_status_text(status));
	}
	pfree(url);
	return rc == CURLE_OK && status == 200;
}

/* The integer member name of a flat JSON object the broker sent. */
bool
pulsar_json_number(const char *body, const char *name, int64 *v)
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

