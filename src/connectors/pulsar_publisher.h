/*
 * pulsar_publisher.h
 *		The Pulsar sink's publisher: sends what the outbox
 *		(mailer.kafka_outbox, the Kafka sink's) holds of committed epochs to
 *		a Pulsar topic through a deduplicating producer whose name is fixed
 *		per job, subtask and generation, and whose sequence ids follow the
 *		outbox's durable (epoch, seq) order, so that whatever a crash makes
 *		it send again the broker drops.
 *
 * Design: docs/ARCHITECTURE.md, "The Pulsar sink".
 */
#ifndef PULSAR_PUBLISHER_H
#define PULSAR_PUBLISHER_H

#include "connectors/sink.h"
#include "plan/spec.h"

/*
 * The largest frame the sink sends: the WebSocket service takes text frames
 * of at most 1 MB by default (webSocketMaxTextFrameSize), less a margin.
 * A record whose frame would be larger never enters the outbox: it
 * follows on_error.
 */
#define PULSAR_SINK_MAX_FRAME_BYTES (1024 * 1024 - 1024)

typedef struct PulsarPublisher PulsarPublisher;

/* No connection yet: the producer is opened at the first publish. */
extern PulsarPublisher *pulsar_publisher_create(KafkaSinkSpec *spec, const SinkOwner *owner,
												MemoryContext parent);

/*
 * Outside any transaction: publish every outbox record past the published
 * epoch, wait for every acknowledgement, then note it and delete them.
 * false: not now; *error says why (the broker, the topic, a send error),
 * and the records stay for the next call, which sends them again with the
 * same sequence ids.
 */
extern bool pulsar_publisher_publish(PulsarPublisher *pub, char **error);

/*
 * Why the record (its outbox columns) can never be sent: a key or property
 * that is not a string (a zero byte, not UTF-8), or a frame too large; with
 * *hint.  NULL when it can.  The outbox must never lose a record later, so
 * this is asked before a record enters it.
 */
extern char *pulsar_record_refusal(const KafkaSinkSpec *spec, bytea *key, bytea *value,
								   bytea *headers, const char **hint);

#endif							/* PULSAR_PUBLISHER_H */
