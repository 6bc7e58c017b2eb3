/*
 * kafka_refill.c
 *		Wake librdkafka's fetchers when a full consumer queue has drained
 *		(kafka_refill.h).
 *
 * The wake is a request to each broker that leads one of the partitions:
 * rd_kafka_offsets_for_times asks every leader, in one request each, for
 * its partitions' latest offsets.  Queuing the request wakes the broker
 * thread, which then finds the queue under its bound and fetches.  The
 * answer is not needed, so the call does not wait for it (librdkafka drops
 * an answer that comes after its caller has gone).  A leader missing from
 * librdkafka's metadata cache gets no request: its fetcher looks again on
 * its own, up to a second later, as without this file.
 *
 * The queue is woken for once it has been near a bound: then the fetchers
 * have stopped, and one wake per filling suffices.  A queue that never
 * fills (a job that keeps up with its input) is never woken for.
 */
#include "postgres.h"

#include <stdlib.h>

#include "connectors/kafka_refill.h"

/* A wake does not wait for the leaders' answers: it does not need them. */
#define WAKE_TIMEOUT_MS 0

static double conf_number(const rd_kafka_conf_t *conf, const char *name);

void
kafka_refill_init(KafkaRefill *refill, rd_kafka_t *rk)
{
	const rd_kafka_conf_t *conf = rd_kafka_conf(rk);

	memset(refill, 0, sizeof(*refill));
	refill->enabled = rd_kafka_version() < 0x02020000;
	/* librdkafka's kilobytes are 1000 bytes. */
	refill->limit_bytes = conf_number(conf, "queued.max.messages.kbytes") * 1000;
	refill->limit_messages = conf_number(conf, "queued.min.messages");
	if (refill->limit_bytes <= 0 || refill->limit_messages <= 0)
		refill->enabled = false;
}

/* A numeric property of conf; 0 if it has none. */
static double
conf_number(const rd_kafka_conf_t *conf, const char *name)
{
	char		value[64];
	size_t		size = sizeof(value);

	if (rd_kafka_conf_get(conf, name, value, &size) != RD_KAFKA_CONF_OK)
		return 0;
	return strtod(value, NULL);
}

void
kafka_refill_check(KafkaRefill *refill, rd_kafka_t *rk, rd_kafka_queue_t *queue,
				   const rd_kafka_topic_partition_list_t *partitions,
				   int n, size_t bytes)
{
	double		left;
	double		before;
	rd_kafka_topic_partition_list_t *wake;

	if (!refill->enabled)
		return;

	/*
	 * librdkafka counts the queue's bytes as its messages' values.  The
	 * queue is first in, first out: the batch just taken stands for what
	 * follows it (a mean over the whole run would lag a topic whose
	 * messages grow).  The queue's fill before the batch counts the batch
	 * too: a batch may take all of it.
	 */
	if (n > 0)
		refill->message_bytes = (double) bytes / n;
	left = (double) rd_kafka_queue_length(queue);
	before = Max((left * refill->message_bytes + bytes) / refill->limit_bytes,
				 (left + n) / refill->limit_messages);
	if (before >= 0.75)
		refill->was_full = true;
	if (!refill->was_full ||
		Max(left * refill->message_bytes / refill->limit_bytes, left / refill->limit_messages) >= 0.5 ||
		partitions == NULL || partitions->cnt == 0)
		return;

	wake = rd_kafka_topic_partition_list_copy(partitions);
	for (int i = 0; i < wake->cnt; i++)
		wake->elems[i].offset = RD_KAFKA_OFFSET_END;	/* the latest offset */
	(void) rd_kafka_offsets_for_times(rk, wake, WAKE_TIMEOUT_MS);
	rd_kafka_topic_partition_list_destroy(wake);
	refill->was_full = false;
}
