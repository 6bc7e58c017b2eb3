/*
 * sink_kafka.h
 *		The Kafka sink: records made from output rows, written into the
 *		outbox (mailer.kafka_outbox) in the checkpoint transaction, and
 *		published to the topic after the epoch commits
 *		(kafka_publisher.h).  Reached through sink.h.
 *
 * Design: docs/ARCHITECTURE.md, "The Kafka sink".
 */
#ifndef SINK_KAFKA_H
#define SINK_KAFKA_H

#include "connectors/dead_letter.h"
#include "connectors/sink.h"
#include "plan/plan.h"

typedef struct KafkaSink KafkaSink;

/* sink_plan and spec: the job's sink, or its changelog. */
extern KafkaSink *kafka_sink_create(JobPlan *plan, SinkPlan *sink_plan, KafkaSinkSpec *spec,
									const SinkOwner *owner, MemoryContext parent, bool *failing);
extern void kafka_sink_project(KafkaSink *sink, ExprRuntime *out_rt, Record *rec,
							   Datum *values, bool *nulls);
extern void kafka_sink_add(KafkaSink *sink, Datum *values, bool *nulls,
						   const char *topic, int32 partition, int64 offset);
/* The same key with a null value. */
extern void kafka_sink_tombstone(KafkaSink *sink, Datum *values, bool *nulls);
extern int	kafka_sink_rows(KafkaSink *sink);
extern bool kafka_sink_full(KafkaSink *sink);

/*
 * Insert the buffered records into the outbox as epoch's, in order.  A
 * record the producer could never send (over message.max.bytes) goes to
 * dlq, or raises per on_error.
 */
extern int64 kafka_sink_flush(KafkaSink *sink, DeadLetterBuffer *dlq, OnError on_error,
							  int64 epoch, int64 *rejected);
extern bool kafka_sink_publish(KafkaSink *sink, char **error);

#endif							/* SINK_KAFKA_H */
