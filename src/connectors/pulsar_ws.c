/*
 * pulsar_ws.c
 *		Pulsar readers and producers over the WebSocket API, on
 *		libwebsockets (pulsar_ws.h).
 *
 * Threads: libwebsockets as Debian 12 builds it (4.1.6: no thread pool, no
 * asynchronous DNS, one service thread) starts no thread of its own. Every
 * callback below runs inside a libwebsockets call made by the thread that
 * calls this file's functions (pulsar_ws_service, the session openers,
 * pulsar_ws_close, pulsar_ws_free): in a job worker, its main thread. Even
 * so the callbacks stay out of PostgreSQL (no elog, no palloc): an error
 * raised inside one would longjmp across libwebsockets' frames and leave
 * it inconsistent. They only move bytes between sockets and malloc'd
 * queues; the worker reads the queues after pulsar_ws_service returns.
 * Signals are blocked while the context is created, as for every library
 * (docs/ARCHITECTURE.md, "Threads and signals"), so that a library that
 * does start a thread one day starts it with every signal blocked.
 *
 * Waiting: libwebsockets 4.1 ignores lws_service's timeout (it sleeps until
 * its next scheduled event, which may be minutes away) except that a
 * negative one means "do not wait". So the wait is ours: poll() on the
 * sessions' sockets, bounded, then lws_service(context, -1) does whatever
 * became ready. A caller with its own wait loop uses pulsar_ws_poll_set.
 */
#include <libwebsockets.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/signals.h"
#include "connectors/pulsar_ws.h"

/*
 * The largest frame received: a Pulsar message is at most 5 MB by default
 * (maxMessageSize), which base64 makes 6.7 MB, plus its JSON. A larger
 * frame closes the session with a reason rather than growing a buffer
 * without bound.
 */
#define MAX_FRAME (16 * 1024 * 1024)

/* Most sessions one context holds: libwebsockets sizes its tables by it. */
#define MAX_SESSIONS 1024

/*
 * Pulsar's WebSocket sessions time out after 300 s idle, with pings off on
 * its side; libwebsockets pings after 30 s without traffic and gives up on
 * a peer silent for 90 s.
 */
static const lws_retry_bo_t keepalive = {
	.secs_since_valid_ping = 30,
	.secs_since_valid_hangup = 90,
};

/* A frame in a queue; sent frames keep LWS_PRE bytes of room before data. */
typedef struct Frame
{
	struct Frame *next;
	size_t		len;
	size_t		cap;
	char		data[];
} Frame;

struct PulsarWsConn
{
	PulsarWs   *ws;
	PulsarWsConn *prev;
	PulsarWsConn *next;
	struct lws *wsi;			/* NULL once libwebsockets has let it go */
	PulsarWsState state;
	bool		close_requested;	/* free it when libwebsockets lets go */
	bool		handshake_sent;	/* connected, the upgrade request written */
	bool		established;	/* the broker accepted the upgrade */
	bool		tls;			/* https:// */
	char		why[512];		/* why it closed */
	Frame	   *rx;				/* the frame being received */
	Frame	   *in_head;		/* received, not yet taken */
	Frame	   *in_tail;
	Frame	   *out_head;		/* to send */
	Frame	   *out_tail;
	size_t		out_count;
};

struct PulsarWs
{
	struct lws_context *context;
	PulsarWsConn *conns;
	char	   *authorization;	/* "Bearer <token>", or NULL */
	bool		tls;			/* OpenSSL set up: https:// sessions may open */
};

/*
 * The token in the upgrade request: libwebsockets builds the request in a
 * buffer of this size, and the spec bounds a token well below it
 * (plan/pulsar_options.c).
 */
#define HANDSHAKE_BUFFER 16384

/*
 * libwebsockets' log is process-wide; its lines would go to stderr. Keep
 * the last error instead: a failed connection's reason names it when
 * libwebsockets gives none itself.
 */
static char last_log[256];

static void
keep_log_line(int level, const char *line)
{
	size_t		n;

	snprintf(last_log, sizeof(last_log), "%s", line);
	n = strlen(last_log);
	while (n > 0 && (last_log[n - 1] == '\n' || last_log[n - 1] == '\r'))
		last_log[--n] = '\0';
}

/*
 * The CA certificates given inline, while pulsar_ws_new creates a context:
 * libwebsockets 4.1 takes only the first certificate of client_ssl_ca_mem,
 * and asks for any others through LOAD_EXTRA_CLIENT_VERIFY_CERTS, called
 * inside lws_create_context on this thread (a whole bundle, as libcurl
 * reads it, must be trusted by both).
 */
static const char *loading_ca_pem;

/* Add every certificate of loading_ca_pem after the first to ctx's store. */
static void
load_more_ca(SSL_CTX *ctx)
{
	BIO		   *bio;
	X509	   *cert;
	bool		first = true;

	if (loading_ca_pem == NULL || ctx == NULL ||
		(bio = BIO_new_mem_buf(loading_ca_pem, -1)) == NULL)
		return;
	while ((cert = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL)
	{
		/* A certificate that does not go in is not trusted: verification fails. */
		if (!first)
			(void) X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), cert);
		first = false;
		X509_free(cert);
	}
	ERR_clear_error();
	BIO_free(bio);
}

static void
set_closed(PulsarWsConn *conn, const char *why)
{
	/* The first reason is the cause; what follows is its consequence. */
	if (conn->state != PULSAR_WS_CLOSED && conn->why[0] == '\0')
		snprintf(conn->why, sizeof(conn->why), "%s", why);
	conn->state = PULSAR_WS_CLOSED;
}

static void
free_frames(Frame *f)
{
	while (f)
	{
		Frame	   *next = f->next;

		free(f);
		f = next;
	}
}

static void
conn_free(PulsarWsConn *conn)
{
	if (conn->prev)
		conn->prev->next = conn->next;
	else
		conn->ws->conns = conn->next;
	if (conn->next)
		conn->next->prev = conn->prev;
	free(conn->rx);
	free_frames(conn->in_head);
	free_frames(conn->out_head);
	free(conn);
}

/* A received chunk: append it to the frame being received; queue a whole one. */
static int
receive(PulsarWsConn *conn, struct lws *wsi, const char *in, size_t len)
{
	Frame	   *f = conn->rx;
	size_t		have = f ? f->len : 0;

	if (have + len > MAX_FRAME)
	{
		set_closed(conn, "the broker sent a frame larger than 16 MB");
		return -1;
	}
	if (f == NULL || have + len + 1 > f->cap)
	{
		size_t		cap = f ? f->cap * 2 : 4096;
		Frame	   *grown;

		while (cap < have + len + 1)
			cap *= 2;
		if ((grown = realloc(f, offsetof(Frame, data) + cap)) == NULL)
		{
			set_closed(conn, "out of memory receiving a frame");
			return -1;
		}
		if (f == NULL)
			grown->len = 0;
		grown->cap = cap;
		grown->next = NULL;
		f = conn->rx = grown;
	}
	memcpy(f->data + f->len, in, len);
	f->len += len;
	if (lws_is_final_fragment(wsi) && lws_remaining_packet_payload(wsi) == 0)
	{
		f->data[f->len] = '\0';
		if (conn->in_tail)
			conn->in_tail->next = f;
		else
			conn->in_head = f;
		conn->in_tail = f;
		conn->rx = NULL;
	}
	return 0;
}

/* One queued frame onto the socket; ask again while more are queued. */
static int
write_one(PulsarWsConn *conn, struct lws *wsi)
{
	Frame	   *f = conn->out_head;

	if (conn->close_requested)
	{
		lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
		return -1;
	}
	if (f == NULL)
		return 0;
	/* A short write is buffered by libwebsockets; less than len is failure. */
	if (lws_write(wsi, (unsigned char *) f->data + LWS_PRE, f->len, LWS_WRITE_TEXT) < (int) f->len)
	{
		set_closed(conn, "could not send a frame to the broker");
		return -1;
	}
	conn->out_head = f->next;
	if (conn->out_head == NULL)
		conn->out_tail = NULL;
	conn->out_count--;
	free(f);
	if (conn->out_head)
		lws_callback_on_writable(wsi);
	return 0;
}

static int
callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
		 void *in, size_t len)
{
	PulsarWsConn *conn;
	char		why[sizeof(((PulsarWsConn *) 0)->why)];

	/* From lws_create_context, with the client's SSL_CTX and no session. */
	if (reason == LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS)
	{
		load_more_ca((SSL_CTX *) user);
		return 0;
	}
	conn = wsi ? lws_get_opaque_user_data(wsi) : NULL;
	if (conn == NULL)
		return 0;
	switch (reason)
	{
		case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
			{
				unsigned char **p = (unsigned char **) in;

				conn->handshake_sent = true;
				if (conn->ws->authorization &&
					lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
												 (unsigned char *) conn->ws->authorization,
												 (int) strlen(conn->ws->authorization),
												 p, *p + len) != 0)
				{
					set_closed(conn, "cannot open the WebSocket session: the token does not fit in the upgrade request");
					return -1;
				}
				break;
			}
		case LWS_CALLBACK_CLIENT_ESTABLISHED:
			conn->state = PULSAR_WS_OPEN;
			conn->established = true;
			if (conn->out_head || conn->close_requested)
				lws_callback_on_writable(wsi);
			break;
		case LWS_CALLBACK_CLIENT_RECEIVE:
			return receive(conn, wsi, in, len);
		case LWS_CALLBACK_CLIENT_WRITEABLE:
			return write_one(conn, wsi);
		case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
			{
				/*
				 * A refused upgrade (HTTP 500 for a message id the topic
				 * cannot have, 404 for a path the broker does not serve)
				 * ends here too, with its status but not its body.
				 */
				int			status = lws_http_client_http_response(wsi);
				char		status_text[32] = "";

				/*
				 * A redirect is never followed (open_session): said as
				 * such, without its Location, which is the server's.
				 */
				if (status == 301 || status == 302 || status == 303 || status == 307 || status == 308)
					snprintf(why, sizeof(why), "cannot open the WebSocket session: the WebSocket upgrade was redirected (HTTP %d); "
							 "mailer does not follow redirects: give service_url a broker that serves the WebSocket API or a Pulsar proxy",
							 status);
				else if (status == 401 || status == 403)
					snprintf(why, sizeof(why), "cannot open the WebSocket session: the broker refused the upgrade (HTTP %d: %s)",
							 status, status == 401 ? "not authenticated: the broker wants a valid token (check the options' \"auth.token\")"
							 : "not authorized: the token's role may not use the topic so");
				else if (conn->tls && !conn->handshake_sent && status <= 0)
					/*
					 * OpenSSL's own words here say little ("SSL err 1"), and
					 * libwebsockets 4.1 tells no refused connection from a
					 * failed handshake: say both, and what is checked.
					 */
					snprintf(why, sizeof(why), "cannot open the WebSocket session over TLS (%s): the broker could not be reached, or its certificate failed a check "
							 "(it must be valid, signed by the CA given in the options, else one the system trusts, and name the service URL's host)",
							 in ? (const char *) in : (last_log[0] ? last_log : "no reason given"));
				else
				{
					if (status > 0)
						snprintf(status_text, sizeof(status_text), " (HTTP status %d)", status);
					snprintf(why, sizeof(why), "cannot open the WebSocket session: %s%s",
							 in ? (const char *) in : (last_log[0] ? last_log : "no reason given"),
							 status_text);
				}
				set_closed(conn, why);
				break;
			}
		case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
			{
				/*
				 * The payload: a 2-byte status code, then the reason's text.
				 * Only the code is kept: the text is the server's, and what a
				 * server says never reaches the job's owner (README,
				 * "Security"), since service_url may name any WebSocket
				 * service.
				 */
				const unsigned char *p = in;
				int			code = len >= 2 ? (p[0] << 8) | p[1] : 0;

				if (len < 2)
					snprintf(why, sizeof(why), "the broker closed the session, giving no reason (shutting down?)");
				else
					snprintf(why, sizeof(why), "the broker closed the session (WebSocket close code %d%s)",
							 code, code == 1001 ? ": going away" : code == 1009 ? ": a frame too large" :
									 code == 1011 ? ": a server error" : "");
				set_closed(conn, why);
				break;
			}
		case LWS_CALLBACK_CLIENT_CLOSED:
			set_closed(conn, "the connection to the broker closed");
			break;
		case LWS_CALLBACK_WSI_DESTROY:
			conn->wsi = NULL;
			/* Without an error callback: libwebsockets' own timeout, say. */
			set_closed(conn, conn->established ? "the connection to the broker is gone"
					   : conn->handshake_sent ? "the broker did not answer the WebSocket upgrade in time"
					   : "could not connect to the broker in time");
			if (conn->close_requested)
				conn_free(conn);
			break;
		default:
			break;
	}
	return 0;
}

static const struct lws_protocols protocols[] = {
	/* rx_buffer_size: how much one read hands to RECEIVE; frames may be larger. */
	{"mailer-pulsar", callback, 0, 65536, 0, NULL, 0},
	{NULL, NULL, 0, 0, 0, NULL, 0}
};

PulsarWs *
pulsar_ws_new(const PulsarWsSecurity *sec, char *err, size_t errsize)
{
	struct lws_context_creation_info info;
	PulsarWs   *ws;
	sigset_t	saved;

	if ((ws = calloc(1, sizeof(*ws))) == NULL)
	{
		snprintf(err, errsize, "out of memory");
		return NULL;
	}
	if (sec && sec->token)
	{
		size_t		n = strlen("Bearer ") + strlen(sec->token) + 1;

		if ((ws->authorization = malloc(n)) == NULL)
		{
			free(ws);
			snprintf(err, errsize, "out of memory");
			return NULL;
		}
		snprintf(ws->authorization, n, "Bearer %s", sec->token);
	}
	lws_set_log_level(LLL_ERR | LLL_WARN, keep_log_line);
	memset(&info, 0, sizeof(info));
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = protocols;
	info.gid = -1;
	info.uid = -1;
	/* Otherwise libwebsockets sizes its tables by the open-file limit. */
	info.fd_limit_per_thread = MAX_SESSIONS + 16;
	info.pt_serv_buf_size = HANDSHAKE_BUFFER;

	/*
	 * TLS: OpenSSL's client context, which verifies the broker's
	 * certificate against the CA given, else the system's (libwebsockets
	 * reads both now, once); each https:// session checks the host name
	 * too (open_session). Set up only when asked, so that a plain-http job
	 * never depends on the system's certificates.
	 */
	if (sec && sec->tls)
	{
		ws->tls = true;
		info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		info.client_ssl_ca_filepath = sec->ca_file;
		if (sec->ca_pem)
		{
			info.client_ssl_ca_mem = sec->ca_pem;
			info.client_ssl_ca_mem_len = (unsigned int) strlen(sec->ca_pem);
		}
	}
	/*
	 * libwebsockets sets SIGPIPE to be ignored here; a PostgreSQL backend
	 * ignores it already.
	 */
	mailer_block_signals(&saved);
	loading_ca_pem = sec && sec->tls ? sec->ca_pem : NULL;
	ws->context = lws_create_context(&info);
	loading_ca_pem = NULL;
	mailer_restore_signals(&saved);
	if (ws->context == NULL)
	{
		snprintf(err, errsize, "libwebsockets could not create its context%s%s%s",
				 ws->tls ? " (with TLS: is the CA certificate readable PEM?)" : "",
				 last_log[0] ? ": " : "", last_log);
		free(ws->authorization);
		free(ws);
		return NULL;
	}
	return ws;
}

void
pulsar_ws_free(PulsarWs *ws)
{
	PulsarWsConn *conn;
	PulsarWsConn *next;

	if (ws == NULL)
		return;
	/* Sessions libwebsockets holds are freed as it destroys them. */
	for (conn = ws->conns; conn; conn = next)
	{
		next = conn->next;
		if (conn->wsi)
			conn->close_requested = true;
		else
			conn_free(conn);
	}
	lws_context_destroy(ws->context);
	while (ws->conns)
		conn_free(ws->conns);
	free(ws->authorization);
	free(ws);
}

/* Percent-encode src into dst (size bytes); '/' kept when keep_slash. */
static bool
url_encode(char *dst, size_t size, const char *src, bool keep_slash)
{
	size_t		n = 0;

	for (; *src; src++)
	{
		unsigned char ch = (unsigned char) *src;

		if (n + 4 > size)
			return false;
		if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
			(ch >= '0' && ch <= '9') || strchr("-_.~", ch) || (keep_slash && ch == '/'))
			dst[n++] = (char) ch;
		else
			n += snprintf(dst + n, size - n, "%%%02X", ch);
	}
	dst[n] = '\0';
	return true;
}

/*
 * Open a session on service_url's host at /ws/v2/KIND/persistent/TOPIC?QUERY.
 * The query's values are already encoded.
 */
static PulsarWsConn *
open_session(PulsarWs *ws, const char *service_url, const char *kind,
			 const char *topic, const char *query, char *err, size_t errsize)
{
	struct lws_client_connect_info i;
	PulsarWsConn *conn;
	char		url[1024];
	char		topic_enc[1024];
	char		path[2048];
	const char *scheme;
	const char *address;
	const char *prefix;
	size_t		prefix_len;
	int			port;
	bool		tls;

	/* lws_parse_uri cuts its argument into pieces: a copy. */
	snprintf(url, sizeof(url), "%s", service_url);
	if (strlen(service_url) >= sizeof(url) ||
		lws_parse_uri(url, &scheme, &address, &port, &prefix) != 0 || address[0] == '\0')
	{
		snprintf(err, errsize, "\"%s\" is not a service URL (http://host:port or https://host:port)", service_url);
		return NULL;
	}
	tls = strcmp(scheme, "https") == 0 || strcmp(scheme, "wss") == 0;
	if (!tls && strcmp(scheme, "http") != 0 && strcmp(scheme, "ws") != 0)
	{
		snprintf(err, errsize, "service URL \"%s\": only http://, https://, ws:// and wss:// are supported", service_url);
		return NULL;
	}
	if (tls && !ws->tls)
	{
		snprintf(err, errsize, "service URL \"%s\": the client was started without TLS", service_url);
		return NULL;
	}
	/* A path before /ws (a proxy's), without its slashes: "" or "/" gives "/". */
	while (*prefix == '/')
		prefix++;
	prefix_len = strlen(prefix);
	while (prefix_len > 0 && prefix[prefix_len - 1] == '/')
		prefix_len--;
	if (strncmp(topic, "persistent://", 13) == 0)
		topic += 13;
	if (!url_encode(topic_enc, sizeof(topic_enc), topic, true) ||
		snprintf(path, sizeof(path), "/%.*s%sws/v2/%s/persistent/%s?%s",
				 (int) prefix_len, prefix, prefix_len > 0 ? "/" : "",
				 kind, topic_enc, query) >= (int) sizeof(path))
	{
		snprintf(err, errsize, "topic \"%s\": the name is too long", topic);
		return NULL;
	}
	if ((conn = calloc(1, sizeof(*conn))) == NULL)
	{
		snprintf(err, errsize, "out of memory");
		return NULL;
	}
	conn->ws = ws;
	conn->tls = tls;
	conn->state = PULSAR_WS_CONNECTING;
	conn->next = ws->conns;
	if (ws->conns)
		ws->conns->prev = conn;
	ws->conns = conn;

	/*
	 * libwebsockets copies these strings. No subprotocol: Pulsar names
	 * none, and one the server does not echo fails the handshake; the
	 * session is bound to our callback by name instead. The host name is
	 * resolved here, synchronously (this build has no asynchronous DNS).
	 */
	memset(&i, 0, sizeof(i));
	i.context = ws->context;
	i.address = address;
	i.port = port;
	i.path = path;
	i.host = address;
	i.origin = address;
	i.local_protocol_name = protocols[0].name;
	i.opaque_user_data = conn;
	i.retry_and_idle_policy = &keepalive;
	i.pwsi = &conn->wsi;

	/*
	 * No redirect followed: libwebsockets follows 301/302/303/307/308 of an
	 * upgrade by default, to any host, port and path the server names, so
	 * a job would make the database server GET a URL of the server's
	 * choosing; only the fixed paths are ever asked (docs/ARCHITECTURE.md,
	 * "Source poll"). TLS: none of the LCCSCF_ALLOW_* flags and not
	 * LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK, so the certificate must be
	 * valid, signed by the CA, and name the host (OpenSSL checks the
	 * name, i.host, which is also what SNI sends).
	 */
	i.ssl_connection = LCCSCF_HTTP_NO_FOLLOW_REDIRECT | (tls ? LCCSCF_USE_SSL : 0);
	last_log[0] = '\0';
	if (lws_client_connect_via_info(&i) == NULL)
	{
		/* It may have failed through the callback, with a reason, already. */
		conn->wsi = NULL;
		set_closed(conn, last_log[0] ? last_log : "cannot open the WebSocket session");
	}
	return conn;
}

PulsarWsConn *
pulsar_ws_reader(PulsarWs *ws, const char *service_url, const char *topic,
				 const char *start, int receiver_queue, char *err, size_t errsize)
{
	char		query[512];
	char		id[256];

	/* A base64 id's '+', '/' and '=' would be read as other characters. */
	if (!url_encode(id, sizeof(id), start, false))
	{
		snprintf(err, errsize, "message id \"%s\" is too long", start);
		return NULL;
	}
	snprintf(query, sizeof(query), "messageId=%s&receiverQueueSize=%d",
			 id, receiver_queue > 0 ? receiver_queue : 1);
	return open_session(ws, service_url, "reader", topic, query, err, errsize);
}

PulsarWsConn *
pulsar_ws_producer(PulsarWs *ws, const char *service_url, const char *topic,
				   const char *producer_name, int64_t initial_sequence_id,
				   char *err, size_t errsize)
{
	char		query[512];
	char		name[300];

	if (!url_encode(name, sizeof(name), producer_name, false))
	{
		snprintf(err, errsize, "producer name \"%s\" is too long", producer_name);
		return NULL;
	}
	/* No batching: one frame is one message, so one sequence id. */
	snprintf(query, sizeof(query),
			 "producerName=%s&initialSequenceId=%lld&batchingEnabled=false",
			 name, (long long) initial_sequence_id);
	return open_session(ws, service_url, "producer", topic, query, err, errsize);
}

PulsarWsState
pulsar_ws_state(PulsarWsConn *conn, const char **why)
{
	if (why)
		*why = conn->why;
	return conn->state;
}

char *
pulsar_ws_take(PulsarWsConn *conn, size_t *len)
{
	Frame	   *f = conn->in_head;

	if (f == NULL)
		return NULL;
	conn->in_head = f->next;
	if (conn->in_head == NULL)
		conn->in_tail = NULL;
	*len = f->len;
	return f->data;
}

void
pulsar_ws_frame_free(char *frame)
{
	if (frame)
		free(frame - offsetof(Frame, data));
}

bool
pulsar_ws_send(PulsarWsConn *conn, const char *text, size_t len)
{
	Frame	   *f;

	if (conn->state == PULSAR_WS_CLOSED || conn->close_requested)
		return false;
	if ((f = malloc(offsetof(Frame, data) + LWS_PRE + len)) == NULL)
		return false;
	f->next = NULL;
	f->len = len;
	f->cap = len;
	memcpy(f->data + LWS_PRE, text, len);
	if (conn->out_tail)
		conn->out_tail->next = f;
	else
		conn->out_head = f;
	conn->out_tail = f;
	conn->out_count++;
	if (conn->state == PULSAR_WS_OPEN && conn->wsi)
		lws_callback_on_writable(conn->wsi);
	return true;
}

size_t
pulsar_ws_unsent(PulsarWsConn *conn)
{
	return conn->out_count;
}

void
pulsar_ws_close(PulsarWsConn *conn)
{
	if (conn->wsi == NULL)
	{
		conn_free(conn);
		return;
	}
	conn->close_requested = true;
	/* Open: a close frame from WRITEABLE. Not yet: drop it at the next service. */
	if (conn->state == PULSAR_WS_OPEN)
		lws_callback_on_writable(conn->wsi);
	else
		lws_set_timeout(conn->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
}

int
pulsar_ws_poll_set(PulsarWs *ws, struct pollfd *fds, int max, int *max_wait_ms)
{
	int			n = 0;

	/* Timers (pings, timeouts) run only in lws_service: at least each second. */
	*max_wait_ms = 1000;
	for (PulsarWsConn *conn = ws->conns; conn; conn = conn->next)
	{
		int			fd;

		if (conn->wsi == NULL)
			continue;
		fd = lws_get_socket_fd(conn->wsi);
		/* No socket yet: look again soon. */
		if (fd < 0)
			*max_wait_ms = 10;
		if (fd < 0 || n == max)
			continue;
		fds[n].fd = fd;
		fds[n].events = POLLIN;
		/*
		 * Writability says the TCP connection is up, until the upgrade
		 * request is written; after it (a connected socket is always
		 * writable) only the broker's answer counts, and a broker that
		 * never answers costs a wake-up a second (the timers), not a
		 * hundred.
		 */
		if ((conn->state == PULSAR_WS_OPEN && (conn->out_head || conn->close_requested)) ||
			(conn->state == PULSAR_WS_CONNECTING && !conn->handshake_sent))
			fds[n].events |= POLLOUT;
		fds[n].revents = 0;
		n++;
	}
	/* Data libwebsockets has read already, which no socket will signal. */
	if (lws_service_adjust_timeout(ws->context, 1, 0) == 0)
		*max_wait_ms = 0;
	return n;
}

int
pulsar_ws_service(PulsarWs *ws, int timeout_ms)
{
	struct pollfd fds[MAX_SESSIONS];
	int			max_wait;
	int			n = pulsar_ws_poll_set(ws, fds, MAX_SESSIONS, &max_wait);

	if (timeout_ms > max_wait)
		timeout_ms = max_wait;
	if (timeout_ms > 0)
		(void) poll(fds, n, timeout_ms);
	return lws_service(ws->context, -1) < 0 ? -1 : 0;
}
