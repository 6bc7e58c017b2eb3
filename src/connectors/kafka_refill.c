/*
 * kafka_refill.c
 *		Wake librdkafka's fetchers when a full consumer queue has drained
 *		(kafka_refill.h).
 *
 * The wake is a request to each broker that leads one of the partitions:
 * rd_kafka_offsets_for_times asks every leader, in one request each, for
 * its partitions' latest offsets.  The request wakes the broker thread,
 * which then finds the queue under its limit and fetches.  The answer is
 * not needed, so the call waits only briefly for it.
 *
 * The queue is woken for once it has been near a limit: then the fetchers
 * have stopped, and one wake per filling suffices.  A queue that never
 * fills (a job that keeps up with its input) is never woken, so a fetch
 * waiting at the end of the log is not queued behind.
 */
#include "postgres.h"

#include <stdlib.h>

#include "connectors/kafka_refill.h"

/* How long a wake waits for the leaders' answers it does not need. */
#define WAKE_TIMEOUT_MS 10

static double conf_number(const rd_kafka_conf_t *conf, const char *name);

void
kafka_refill_init(KafkaRefill *refill, rd_kafka_t *rk)
{
	const rd_kafka_conf_t *conf = rd_kafka_conf(rk);

	memset(refill, 0, sizeof(*refill));
	refill->enabled = rd_kafka_version() < 0x02020000;
	refill->limit_bytes = conf_number(conf, "queued.max.messages.kbytes") * 1024;
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
	double		mean;
	double		left;
	double		before;
	rd_kafka_topic_partition_list_t *wake;

	if (!refill->enabled)
		return;
	refill->read_messages += n;
	refill->read_bytes += bytes;
	if (refill->read_messages == 0)
		return;

	/*
	 * librdkafka counts the queue's bytes as its messages' values; the
	 * mean value read so far stands for the values still queued.  The
	 * queue's fill before the batch counts the batch too: a batch may
	 * take all of it.
	 */
	mean = (double) refill->read_bytes / refill->read_messages;
	left = (double) rd_kafka_queue_length(queue);
	before = Max((left * mean + bytes) / refill->limit_bytes,
				 (left + n) / refill->limit_messages);
	if (before >= 0.75)
		refill->was_full = true;
	if (!refill->was_full ||
		Max(left * mean / refill->limit_bytes, left / refill->limit_messages) >= 0.5 ||
		partitions == NULL || partitions->cnt == 0)
		return;

	wake = rd_kafka_topic_partition_list_copy(partitions);
	for (int i = 0; i < wake->cnt; i++)
		wake->elems[i].offset = RD_KAFKA_OFFSET_END;	/* the latest offset */
	(void) rd_kafka_offsets_for_times(rk, wake, WAKE_TIMEOUT_MS);
	rd_kafka_topic_partition_list_destroy(wake);
	refill->was_full = false;
}
