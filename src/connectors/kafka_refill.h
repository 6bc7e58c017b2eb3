/*
 * kafka_refill.h
 *		Wake librdkafka's fetchers when a consumer queue that was full has
 *		drained (librdkafka before 2.2 only).
 *
 * librdkafka 2.0 stops fetching while the consumer queue holds more than
 * queued.max.messages.kbytes (or queued.min.messages), and looks again only
 * when its broker thread wakes: on a request or a response, or after a
 * second.  A worker slower than the broker drains the queue in a fraction
 * of that and then waits out the rest.  librdkafka 2.2 looks again after
 * fetch.queue.backoff.ms instead, and needs none of this.
 *
 * Design: docs/ARCHITECTURE.md, "Source poll".
 */
#ifndef KAFKA_REFILL_H
#define KAFKA_REFILL_H

#include <librdkafka/rdkafka.h>

typedef struct KafkaRefill
{
	bool		enabled;		/* librdkafka before 2.2 */
	double		limit_bytes;	/* queued.max.messages.kbytes, in bytes */
	double		limit_messages; /* queued.min.messages */
	double		message_bytes;	/* mean value size of the last batch taken */
	bool		was_full;		/* the queue came near a limit since the last wake */
} KafkaRefill;

/* Read the handle's queue limits; disabled where librdkafka looks again itself. */
extern void kafka_refill_init(KafkaRefill *refill, rd_kafka_t *rk);

/*
 * After a batch of n messages (their values' total size bytes, error events
 * left out) was taken from queue: wake the fetchers of the partitions if the queue was near a
 * limit and is now under half of it.
 */
extern void kafka_refill_check(KafkaRefill *refill, rd_kafka_t *rk, rd_kafka_queue_t *queue,
							   const rd_kafka_topic_partition_list_t *partitions,
							   int n, size_t bytes);

#endif							/* KAFKA_REFILL_H */
