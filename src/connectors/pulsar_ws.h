/*
 * pulsar_ws.h
 *		Pulsar readers and producers over Pulsar's WebSocket API, on
 *		libwebsockets: the transport the Pulsar source and sink build on.
 *
 * A PulsarWs holds any number of sessions (one per partition read, one per
 * producer). It moves frames only: what a frame says is pulsar_frame.h's.
 * Everything runs on the thread that calls these functions (see
 * pulsar_ws.c); nothing here calls PostgreSQL, so a test program links it
 * as it is. Design: docs/ARCHITECTURE.md, "Threads and signals".
 */
#ifndef PULSAR_WS_H
#define PULSAR_WS_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct PulsarWs PulsarWs;
typedef struct PulsarWsConn PulsarWsConn;

typedef enum PulsarWsState
{
	PULSAR_WS_CONNECTING,		/* handshake not answered yet */
	PULSAR_WS_OPEN,
	PULSAR_WS_CLOSED			/* failed or closed: see the reason */
} PulsarWsState;

/*
 * How every session of a PulsarWs authenticates and checks the broker
 * (docs/ARCHITECTURE.md, "Pulsar security"). All NULL: no token, and the
 * system's CA certificates for an https:// service URL.
 */
typedef struct PulsarWsSecurity
{
	bool		tls;			/* an https:// service URL: set up OpenSSL */
	const char *token;			/* sent as "Authorization: Bearer <token>" */
	const char *ca_pem;			/* the CA certificate that signs the broker's, PEM */
	const char *ca_file;		/* or a file holding it (the test tool's: a worker reads the file itself) */
} PulsarWsSecurity;

/*
 * NULL with the reason in err when libwebsockets cannot start (a CA it
 * cannot load, say). sec (NULL: none) is copied.
 */
extern PulsarWs *pulsar_ws_new(const PulsarWsSecurity *sec, char *err, size_t errsize);

/* Close every session and free everything, sessions included. */
extern void pulsar_ws_free(PulsarWs *ws);

/*
 * A reader of one topic or partition ("tenant/ns/topic" or
 * "tenant/ns/topic-partition-N": a partitioned topic is read one partition
 * at a time), starting after the message start names (a base64 message id)
 * or at "earliest" or "latest". At most receiver_queue messages arrive
 * before the caller acknowledges some (pulsar_frame_ack). service_url is
 * http://host:port, or https://host:port for TLS (the broker's certificate
 * and host name verified). NULL with err if the arguments are bad; a session that
 * cannot connect turns PULSAR_WS_CLOSED later, with its reason.
 */
extern PulsarWsConn *pulsar_ws_reader(PulsarWs *ws, const char *service_url,
									  const char *topic, const char *start,
									  int receiver_queue,
									  char *err, size_t errsize);

/*
 * A producer with a fixed name whose messages take the sequence ids
 * initial_sequence_id + 1, + 2, ... in the order sent: with deduplication
 * on, the broker drops (and acknowledges with id -1:-1) a message whose
 * sequence id it has already stored for this name.
 */
extern PulsarWsConn *pulsar_ws_producer(PulsarWs *ws, const char *service_url,
										const char *topic, const char *producer_name,
										int64_t initial_sequence_id,
										char *err, size_t errsize);

/* The session's state; *why (if not NULL) gets the reason it closed. */
extern PulsarWsState pulsar_ws_state(PulsarWsConn *conn, const char **why);

/*
 * The next frame received, NUL-terminated (*len bytes before the NUL), or
 * NULL when none is waiting. The caller owns it: pulsar_ws_frame_free.
 */
extern char *pulsar_ws_take(PulsarWsConn *conn, size_t *len);
extern void pulsar_ws_frame_free(char *frame);

/*
 * Queue a text frame for sending (copied); false if out of memory or the
 * session is closed. Frames go out in order, while the caller services.
 */
extern bool pulsar_ws_send(PulsarWsConn *conn, const char *text, size_t len);

/* Frames queued and not yet handed to the socket. */
extern size_t pulsar_ws_unsent(PulsarWsConn *conn);

/* Close the session and free it (now or once libwebsockets lets go of it). */
extern void pulsar_ws_close(PulsarWsConn *conn);

/*
 * Do all the network work that is ready: connect, send, receive into the
 * sessions' queues, ping, time out. Waits up to timeout_ms (0: not at all)
 * for something to do. Returns -1 only if libwebsockets fails as a whole.
 */
extern int	pulsar_ws_service(PulsarWs *ws, int timeout_ms);

/*
 * The sockets to wait on, and for what, so that a caller with a wait loop
 * of its own (a worker's latch) waits on them too and then calls
 * pulsar_ws_service(ws, 0). Returns how many were written (up to max).
 * *max_wait_ms gets how long the caller may wait at most: 0 when
 * libwebsockets holds data no socket will signal, a few ms while a session
 * is being set up, a second otherwise (pings and timeouts run only when
 * serviced).
 */
extern int	pulsar_ws_poll_set(PulsarWs *ws, struct pollfd *fds, int max, int *max_wait_ms);

#endif							/* PULSAR_WS_H */
