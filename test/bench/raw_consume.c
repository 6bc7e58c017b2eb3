/*
 * raw_consume.c
 *		The limit mailer is measured against: read every message of a topic
 *		with librdkafka's batch consume, do nothing with them, and report
 *		messages per second and CPU seconds.  Same consumer settings as
 *		mailer's Kafka source, but for the prefetch bound, 32 MB as before
 *		issue 16: with a 4 MB bound and the source's wakes
 *		(connectors/kafka_refill.c), a scratch copy of this loop read 2.33M
 *		records/s against 2.27M, so the bound does not change the limit.
 *
 *		raw_consume <brokers> <topic> <expected messages>
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include <librdkafka/rdkafka.h>

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double
cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
		ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void
set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
	char		err[512];

	if (rd_kafka_conf_set(conf, name, value, err, sizeof(err)) != RD_KAFKA_CONF_OK)
	{
		fprintf(stderr, "raw_consume: %s: %s\n", name, err);
		exit(1);
	}
}

int
main(int argc, char **argv)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	rd_kafka_queue_t *queue;
	const struct rd_kafka_metadata *md;
	rd_kafka_topic_partition_list_t *parts;
	rd_kafka_topic_t *rkt;
	rd_kafka_message_t *batch[10000];
	char		err[512];
	long		expected,
				got = 0;
	size_t		bytes = 0;
	double		t0,
				c0;

	if (argc != 4)
	{
		fprintf(stderr, "usage: raw_consume <brokers> <topic> <expected messages>\n");
		return 2;
	}
	expected = atol(argv[3]);
	set(conf, "bootstrap.servers", argv[1]);
	set(conf, "group.id", "raw_consume");
	set(conf, "isolation.level", "read_committed");
	set(conf, "enable.auto.commit", "false");
	set(conf, "fetch.wait.max.ms", "100");
	set(conf, "queued.min.messages", "10000000");
	set(conf, "queued.max.messages.kbytes", "32768");
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
	if (rk == NULL)
	{
		fprintf(stderr, "raw_consume: %s\n", err);
		return 1;
	}
	rkt = rd_kafka_topic_new(rk, argv[2], NULL);
	if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR || md->topic_cnt != 1)
	{
		fprintf(stderr, "raw_consume: no metadata for %s\n", argv[2]);
		return 1;
	}
	parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
	for (int p = 0; p < md->topics[0].partition_cnt; p++)
		rd_kafka_topic_partition_list_add(parts, argv[2], md->topics[0].partitions[p].id)->offset =
			RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_metadata_destroy(md);

	t0 = now();
	c0 = cpu_seconds();
	rd_kafka_assign(rk, parts);
	queue = rd_kafka_queue_get_consumer(rk);
	while (got < expected)
	{
		ssize_t		n = rd_kafka_consume_batch_queue(queue, 1000, batch, 10000);

		for (ssize_t i = 0; i < n; i++)
		{
			if (!batch[i]->err)
			{
				got++;
				bytes += batch[i]->len;
			}
			rd_kafka_message_destroy(batch[i]);
		}
		if (now() - t0 > 600)
			break;
	}
	{
		double		secs = now() - t0;
		double		cpu = cpu_seconds() - c0;

		printf("messages %ld bytes %zu seconds %.3f rate %.0f cpu_seconds %.3f\n",
			   got, bytes, secs, got / secs, cpu);
	}
	rd_kafka_queue_destroy(queue);
	rd_kafka_destroy(rk);
	return got == expected ? 0 : 1;
}
