/*
 * raw_consume_produce.c
 *		The limit mailer's Kafka sink is measured against: read every message
 *		of a topic (read_committed, batch consume, the consumer settings of
 *		raw_consume.c) and produce each one, key and value unchanged, to an
 *		output topic inside Kafka transactions.  A transaction is committed
 *		every <records per transaction> messages or every <ms> milliseconds,
 *		whichever comes first, as a checkpoint would.  The input offsets are
 *		not sent to the transaction: like mailer and Flink, an engine would
 *		keep them in its own checkpoint.
 *
 *		Reports messages per second and CPU seconds (the whole process:
 *		consumer, producer and their librdkafka threads), and checks that
 *		every produced message was delivered.
 *
 *		raw_consume_produce <brokers> <topic> <output topic> <expected messages>
 *							<records per transaction> <ms per transaction>
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>

#include <librdkafka/rdkafka.h>

static long delivered;
static long failed;

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
		fprintf(stderr, "raw_consume_produce: %s: %s\n", name, err);
		exit(1);
	}
}

/* A transactional call that failed: print librdkafka's reason and stop. */
static void
check(const char *what, rd_kafka_error_t *error)
{
	if (error == NULL)
		return;
	fprintf(stderr, "raw_consume_produce: %s: %s\n", what, rd_kafka_error_string(error));
	rd_kafka_error_destroy(error);
	exit(1);
}

static void
on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
	if (msg->err)
	{
		if (failed++ == 0)
			fprintf(stderr, "raw_consume_produce: delivery: %s\n", rd_kafka_err2str(msg->err));
	}
	else
		delivered++;
}

int
main(int argc, char **argv)
{
	rd_kafka_conf_t *cconf = rd_kafka_conf_new();
	rd_kafka_conf_t *pconf = rd_kafka_conf_new();
	rd_kafka_t *consumer;
	rd_kafka_t *producer;
	rd_kafka_queue_t *queue;
	const struct rd_kafka_metadata *md;
	rd_kafka_topic_partition_list_t *parts;
	rd_kafka_topic_t *rkt;
	rd_kafka_topic_t *out;
	static rd_kafka_message_t *batch[10000];
	char		err[512];
	char		txid[64];
	long		expected,
				per_txn,
				got = 0,
				in_txn = 0,
				txns = 0;
	double		txn_secs,
				txn_start;
	size_t		bytes = 0;
	double		t0,
				c0;

	if (argc != 7)
	{
		fprintf(stderr, "usage: raw_consume_produce <brokers> <topic> <output topic> <expected messages> <records per transaction> <ms per transaction>\n");
		return 2;
	}
	expected = atol(argv[4]);
	per_txn = atol(argv[5]);
	txn_secs = atol(argv[6]) / 1000.0;

	set(cconf, "bootstrap.servers", argv[1]);
	set(cconf, "group.id", "raw_consume_produce");
	set(cconf, "isolation.level", "read_committed");
	set(cconf, "enable.auto.commit", "false");
	set(cconf, "fetch.wait.max.ms", "100");
	set(cconf, "queued.min.messages", "10000000");
	set(cconf, "queued.max.messages.kbytes", "32768");
	consumer = rd_kafka_new(RD_KAFKA_CONSUMER, cconf, err, sizeof(err));
	if (consumer == NULL)
	{
		fprintf(stderr, "raw_consume_produce: %s\n", err);
		return 1;
	}

	/* librdkafka's producer defaults otherwise (linger.ms 5, no compression). */
	snprintf(txid, sizeof(txid), "raw_consume_produce-%d", (int) getpid());
	set(pconf, "bootstrap.servers", argv[1]);
	set(pconf, "transactional.id", txid);
	set(pconf, "queue.buffering.max.messages", "1000000");
	rd_kafka_conf_set_dr_msg_cb(pconf, on_delivery);
	producer = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, err, sizeof(err));
	if (producer == NULL)
	{
		fprintf(stderr, "raw_consume_produce: %s\n", err);
		return 1;
	}
	out = rd_kafka_topic_new(producer, argv[3], NULL);

	rkt = rd_kafka_topic_new(consumer, argv[2], NULL);
	if (rd_kafka_metadata(consumer, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR || md->topic_cnt != 1)
	{
		fprintf(stderr, "raw_consume_produce: no metadata for %s\n", argv[2]);
		return 1;
	}
	parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
	for (int p = 0; p < md->topics[0].partition_cnt; p++)
		rd_kafka_topic_partition_list_add(parts, argv[2], md->topics[0].partitions[p].id)->offset =
			RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_metadata_destroy(md);

	t0 = now();
	c0 = cpu_seconds();
	check("init_transactions", rd_kafka_init_transactions(producer, 30000));
	check("begin_transaction", rd_kafka_begin_transaction(producer));
	txn_start = now();
	rd_kafka_assign(consumer, parts);
	queue = rd_kafka_queue_get_consumer(consumer);
	while (got < expected)
	{
		ssize_t		n = rd_kafka_consume_batch_queue(queue, 100, batch, 10000);

		for (ssize_t i = 0; i < n; i++)
		{
			rd_kafka_message_t *m = batch[i];

			if (!m->err)
			{
				/* The producer's queue full: serve delivery reports, retry. */
				while (rd_kafka_produce(out, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY,
										m->payload, m->len, m->key, m->key_len, NULL) == -1)
				{
					if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL)
					{
						fprintf(stderr, "raw_consume_produce: produce: %s\n",
								rd_kafka_err2str(rd_kafka_last_error()));
						return 1;
					}
					rd_kafka_poll(producer, 10);
				}
				got++;
				in_txn++;
				bytes += m->len;
			}
			rd_kafka_message_destroy(m);
		}
		rd_kafka_poll(producer, 0);
		/* A checkpoint: commit (it flushes first) and begin the next. */
		if (in_txn > 0 && (in_txn >= per_txn || now() - txn_start >= txn_secs || got >= expected))
		{
			check("commit_transaction", rd_kafka_commit_transaction(producer, -1));
			txns++;
			in_txn = 0;
			if (got < expected)
				check("begin_transaction", rd_kafka_begin_transaction(producer));
			txn_start = now();
		}
		if (now() - t0 > 600)
			break;
	}
	{
		double		secs = now() - t0;
		double		cpu = cpu_seconds() - c0;

		printf("messages %ld bytes %zu seconds %.3f rate %.0f cpu_seconds %.3f transactions %ld delivered %ld\n",
			   got, bytes, secs, got / secs, cpu, txns, delivered);
	}
	rd_kafka_queue_destroy(queue);
	rd_kafka_topic_destroy(rkt);
	rd_kafka_topic_destroy(out);
	rd_kafka_destroy(consumer);
	rd_kafka_destroy(producer);
	return got == expected && delivered == expected && failed == 0 ? 0 : 1;
}
