/*
 * kafka_publisher.h
 *		The Kafka sink's publisher: sends what the outbox holds of committed
 *		epochs to the topic, in one Kafka transaction per call, together
 *		with an epoch marker that says, atomically with the records, how far
 *		the topic holds the job's output.
 *
 * Design: docs/ARCHITECTURE.md, "The Kafka sink".
 */
#ifndef KAFKA_PUBLISHER_H
#define KAFKA_PUBLISHER_H

#include "connectors/sink.h"
#include "plan/spec.h"

typedef struct KafkaPublisher KafkaPublisher;

/* No connection yet: the producer is made at the first publish. */
extern KafkaPublisher *kafka_publisher_create(KafkaSinkSpec *spec, const SinkOwner *owner,
											  OnError on_error, bool *failing, MemoryContext parent);

/*
 * Outside any transaction: publish every outbox record past the published
 * epoch, then delete them.  false: the topic cannot be written now; *error
 * says why, and the records stay for the next call.  A record the broker
 * refuses as too large is dead-lettered (or fails the job, per on_error).
 */
extern bool kafka_publisher_publish(KafkaPublisher *pub, char **error);

/*
 * A record's headers as the outbox keeps them: the values of the spec's
 * headers, in order (kafka_sink_project encodes them, the publisher reads
 * them back).
 */
extern bytea *kafka_headers_encode(int n, Datum *values, bool *nulls);
/* The i-th value of encoded headers; false: it is null. */
extern bool kafka_headers_value(bytea *headers, int i, const char **data, int *len);

#endif							/* KAFKA_PUBLISHER_H */
