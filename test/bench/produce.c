/*
 * produce.c
 *		The benchmark's order events, produced straight with librdkafka (lz4,
 *		large batches), so that 5M events take seconds, not minutes.
 *
 *		produce <brokers> <topic> <events> <keys> [options]
 *			--first N		order_id of the first event (default 0)
 *			--cycle			customer ids cycle through a fixed permutation
 *							of all keys (every key appears once per <keys>
 *							events: distinct keys = min(events, keys));
 *							default: a hash of the order id (random, with
 *							repeats, as real customers come back)
 *			--rate R		R events per second, each carrying its wall-clock
 *							send time ("sent", µs since 1970) and ts = now;
 *							for the latency benchmark
 *
 * Without --rate, event time starts at 2025-06-01 00:00:00 UTC and advances
 * SPACING_US per order, minus up to JITTER_US of disorder: 1 million orders
 * a minute, so with 100k customers a one-minute window holds 10 orders per
 * customer, and 5M orders span five minutes of event time.
 *
 * One line of JSON, about 100 bytes:
 *	{"order_id": 17, "customer_id": "c4711", "amount": 12.34, "ts": "2025-06-01T00:00:00.001020Z"}
 * The message key is the customer id.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#define SPACING_US	60			/* event-time step per order */
#define JITTER_US	2000000		/* up to 2 s out of order */
#define BASE_EPOCH	1748736000	/* 2025-06-01 00:00:00 UTC */

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t
splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static void
set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
	char		err[512];

	if (rd_kafka_conf_set(conf, name, value, err, sizeof(err)) != RD_KAFKA_CONF_OK)
	{
		fprintf(stderr, "produce: %s: %s\n", name, err);
		exit(1);
	}
}

static long delivery_errors = 0;

static void
on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	if (m->err && delivery_errors++ < 5)
		fprintf(stderr, "produce: delivery failed: %s\n", rd_kafka_err2str(m->err));
}

/* ISO 8601 in UTC with microseconds: what PostgreSQL and java.time both parse. */
static int
format_ts(char *buf, size_t len, int64_t us)
{
	time_t		secs = (time_t) (us / 1000000);
	struct tm	tm;

	gmtime_r(&secs, &tm);
	return snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
					tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
					tm.tm_hour, tm.tm_min, tm.tm_sec, (int) (us % 1000000));
}

int
main(int argc, char **argv)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	rd_kafka_topic_t *rkt;
	char		err[512];
	long		events,
				keys,
				first = 0;
	double		rate = 0;
	int			cycle = 0;
	double		t0;

	if (argc < 5)
	{
		fprintf(stderr, "usage: produce <brokers> <topic> <events> <keys> [--first N] [--cycle] [--rate R]\n");
		return 2;
	}
	events = atol(argv[3]);
	keys = atol(argv[4]);
	for (int i = 5; i < argc; i++)
	{
		if (strcmp(argv[i], "--first") == 0 && i + 1 < argc)
			first = atol(argv[++i]);
		else if (strcmp(argv[i], "--cycle") == 0)
			cycle = 1;
		else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc)
			rate = atof(argv[++i]);
		else
		{
			fprintf(stderr, "produce: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (keys <= 0 || events < 0)
	{
		fprintf(stderr, "produce: events >= 0 and keys > 0\n");
		return 2;
	}

	set(conf, "bootstrap.servers", argv[1]);
	set(conf, "compression.codec", "lz4");
	set(conf, "acks", "1");
	/* A paced producer sends at once; a bulk one fills large batches. */
	set(conf, "linger.ms", rate > 0 ? "1" : "50");
	set(conf, "batch.size", "1000000");
	set(conf, "queue.buffering.max.messages", "1000000");
	set(conf, "queue.buffering.max.kbytes", "1048576");
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (rk == NULL)
	{
		fprintf(stderr, "produce: %s\n", err);
		return 1;
	}
	rkt = rd_kafka_topic_new(rk, argv[2], NULL);

	t0 = now();
	for (long i = 0; i < events; i++)
	{
		long		n = first + i;
		uint64_t	h = splitmix64((uint64_t) n);
		long		customer;
		char		key[32];
		char		value[256];
		char		ts[64];
		int			klen,
					vlen;
		int64_t		sent_us = 0;

		/* A multiplier coprime to every key count used (odd, not a multiple of 5). */
		customer = cycle ? (long) (((uint64_t) n * 2654435761ULL) % (uint64_t) keys)
			: (long) (h % (uint64_t) keys);
		klen = snprintf(key, sizeof(key), "c%ld", customer);
		if (rate > 0)
		{
			/* Pace: event i is due at t0 + i / rate. */
			double		due = t0 + i / rate;
			double		t = now();

			if (due > t + 0.0005)
			{
				rd_kafka_poll(rk, 0);
				usleep((useconds_t) ((due - t) * 1e6));
			}
			t = now();
			sent_us = (int64_t) (t * 1e6);
			format_ts(ts, sizeof(ts), sent_us);
		}
		else
			format_ts(ts, sizeof(ts), (int64_t) BASE_EPOCH * 1000000 +
					  (int64_t) n * SPACING_US - (int64_t) ((h >> 32) % JITTER_US));
		if (rate > 0)
			vlen = snprintf(value, sizeof(value),
							"{\"order_id\": %ld, \"customer_id\": \"%s\", \"amount\": %ld.%02ld, \"ts\": \"%s\", \"sent\": %" PRId64 "}",
							n, key, (long) (1 + (h >> 8) % 999), (long) ((h >> 20) % 100), ts, sent_us);
		else
			vlen = snprintf(value, sizeof(value),
							"{\"order_id\": %ld, \"customer_id\": \"%s\", \"amount\": %ld.%02ld, \"ts\": \"%s\"}",
							n, key, (long) (1 + (h >> 8) % 999), (long) ((h >> 20) % 100), ts);
		while (rd_kafka_produce(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY,
								value, vlen, key, klen, NULL) == -1)
		{
			if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL)
			{
				fprintf(stderr, "produce: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
				return 1;
			}
			rd_kafka_poll(rk, 10);
		}
		if ((i & 1023) == 0)
			rd_kafka_poll(rk, 0);
	}
	while (rd_kafka_flush(rk, 1000) == RD_KAFKA_RESP_ERR__TIMED_OUT)
		;
	{
		double		secs = now() - t0;

		printf("produced %ld seconds %.3f rate %.0f errors %ld\n",
			   events, secs, secs > 0 ? events / secs : 0.0, delivery_errors);
	}
	rd_kafka_topic_destroy(rkt);
	rd_kafka_destroy(rk);
	return delivery_errors ? 1 : 0;
}
