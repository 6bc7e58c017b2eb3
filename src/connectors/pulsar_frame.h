/*
 * pulsar_frame.h
 *		The JSON text of Pulsar's WebSocket API frames: a reader's message
 *		and a producer's acknowledgement parsed, a message to send and a
 *		reader's acknowledgement written, and a message id decoded.
 *
 * Plain C with no PostgreSQL calls, so that the same code runs in a job
 * worker and in test/pulsar_tool. Parsing is in place and bounded: strings
 * are unescaped and the payload base64-decoded inside the frame's own
 * buffer (both only shrink), nesting is limited, and nothing is allocated.
 */
#ifndef PULSAR_FRAME_H
#define PULSAR_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* More properties than this on one message is an error, not a truncation. */
#define PULSAR_MAX_PROPERTIES 64

/* Room for a time the broker sends as text (ISO 8601) or a number. */
#define PULSAR_TIME_TEXT 48

/*
 * One message of a reader's frame. Every pointer points into the frame's
 * text, so it lives as long as the frame; strings are NUL-terminated.
 */
typedef struct PulsarMessage
{
	char	   *message_id;		/* base64, as the broker sent it */
	unsigned char *payload;		/* decoded bytes */
	size_t		payload_len;
	char	   *key;			/* NULL when the message has none */
	char		publish_time[PULSAR_TIME_TEXT]; /* "" when absent */
	char		event_time[PULSAR_TIME_TEXT];	/* "" when absent (never set) */
	int			nproperties;
	char	   *property_names[PULSAR_MAX_PROPERTIES];
	char	   *property_values[PULSAR_MAX_PROPERTIES];
} PulsarMessage;

/* A producer's acknowledgement of one sent message. */
typedef struct PulsarAck
{
	char	   *result;			/* "ok", or "send-error:...", ... */
	char	   *message_id;		/* base64; NULL on an error */
	char	   *context;		/* the context the message was sent with */
	char	   *error;			/* errorMsg, NULL when absent */
} PulsarAck;

/* A message id: ledger, entry, partition and batch index (-1: none). */
typedef struct PulsarMessageId
{
	int64_t		ledger;
	int64_t		entry;
	int32_t		partition;
	int32_t		batch_index;
} PulsarMessageId;

/*
 * Parse a reader's frame (text, len bytes, NUL-terminated at len) in place.
 * False, with the reason in err, when it is not a message frame, or one
 * this parser cannot hold (more than PULSAR_MAX_PROPERTIES properties, a
 * \u0000 in a string); msg->message_id is then the message's id if the
 * frame gave it before the fault (the broker sends it first), else NULL.
 */
extern bool pulsar_parse_message(char *text, size_t len, PulsarMessage *msg,
								 char *err, size_t errsize);

/* Parse a producer's acknowledgement in place; false with err if malformed. */
extern bool pulsar_parse_ack(char *text, size_t len, PulsarAck *ack,
							 char *err, size_t errsize);

/* Decode a base64 message id; false if it is not one. */
extern bool pulsar_message_id_decode(const char *base64, PulsarMessageId *id);

/*
 * Encode an id (ledger and entry >= 0) as the base64 a reader's messageId
 * takes, NUL-terminated; false if out (outsize bytes) is too small.
 */
extern bool pulsar_message_id_encode(const PulsarMessageId *id, char *out, size_t outsize);

/*
 * The id the broker gives a re-sent message it dropped as a duplicate:
 * ledger and entry -1.
 */
extern bool pulsar_message_id_is_duplicate(const PulsarMessageId *id);

/*
 * The frame a producer sends: the payload base64-encoded, the key and the
 * properties (any may be absent: NULL, 0) as JSON strings, and the context
 * the broker echoes in its acknowledgement. malloc'd, NUL-terminated; NULL
 * if out of memory. *len gets its length.
 */
extern char *pulsar_frame_send(const unsigned char *payload, size_t payload_len,
							   const char *key, int nproperties,
							   const char *const *names, const char *const *values,
							   const char *context, size_t *len);

/*
 * The frame a reader sends to acknowledge a message: the broker sends a
 * reader only receiverQueueSize messages that are not acknowledged, so
 * this is its flow control (a reader has no durable subscription: the
 * acknowledgement moves no position). NULL if out of memory or the id is
 * not base64.
 */
extern char *pulsar_frame_ack(const char *message_id, size_t *len);

#endif							/* PULSAR_FRAME_H */
