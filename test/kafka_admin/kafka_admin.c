/*
 * kafka_admin: the topic administration of test/services/kafka.sh through
 * librdkafka's Admin API.  Kafka's own TopicCommand starts a JVM for each
 * call (about 1.4 s of wall clock and more of CPU on a 2-core machine), and
 * the tests create and delete topics by the hundred.
 *
 *   kafka_admin BROKERS create TOPIC PARTITIONS [--config KEY=VALUE]...
 *   kafka_admin BROKERS delete TOPIC
 *   kafka_admin BROKERS add-partitions TOPIC TOTAL
 *   kafka_admin BROKERS delete-records TOPIC PARTITION OFFSET
 *
 * create succeeds when the topic exists already and delete when it does not
 * (kafka.sh checks the partition count itself).  The broker acknowledges a
 * request before every listener's metadata shows it: kafka.sh waits for that.
 */
#include <librdkafka/rdkafka.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_MS 30000

static void
die(const char *what, const char *detail)
{
	fprintf(stderr, "kafka_admin: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	exit(1);
}

/* A count, partition or offset: a whole number from 0 to max. */
static long
number(const char *text, const char *what, long max)
{
	char	   *end;
	long		n;

	errno = 0;
	n = strtol(text, &end, 10);
	if (*text == '\0' || *end != '\0' || errno != 0 || n < 0 || n > max)
		die(what, "not a whole number in range");
	return n;
}

static void
usage(void)
{
	fputs("usage: kafka_admin BROKERS create TOPIC PARTITIONS [--config KEY=VALUE]...\n"
		  "       kafka_admin BROKERS delete TOPIC\n"
		  "       kafka_admin BROKERS add-partitions TOPIC TOTAL\n"
		  "       kafka_admin BROKERS delete-records TOPIC PARTITION OFFSET\n", stderr);
	exit(2);
}

/* Wait for the result of one admin request; die on a request-level error. */
static rd_kafka_event_t *
await_result(rd_kafka_queue_t *queue, const char *request)
{
	rd_kafka_event_t *ev = rd_kafka_queue_poll(queue, TIMEOUT_MS + 5000);

	if (ev == NULL)
		die(request, "no answer from the broker");
	if (rd_kafka_event_error(ev))
		die(request, rd_kafka_event_error_string(ev));
	return ev;
}

/*
 * Die unless the one topic's result is a success or the error that means
 * "already so" (created, or gone).
 */
static void
check_topic(const rd_kafka_topic_result_t **results, size_t n,
			rd_kafka_resp_err_t already_so, const char *request)
{
	rd_kafka_resp_err_t err;
	const char *msg;

	if (n != 1)
		die(request, "the broker's answer names no topic");
	err = rd_kafka_topic_result_error(results[0]);
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR || err == already_so)
		return;
	msg = rd_kafka_topic_result_error_string(results[0]);
	die(request, msg ? msg : rd_kafka_err2str(err));
}

int
main(int argc, char **argv)
{
	char		errstr[512];
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	rd_kafka_queue_t *queue;
	rd_kafka_AdminOptions_t *options;
	rd_kafka_event_t *ev;
	const char *cmd;
	const rd_kafka_topic_result_t **results;
	size_t		n;

	if (argc < 4)
		usage();
	cmd = argv[2];

	conf = rd_kafka_conf_new();
	if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], errstr, sizeof errstr) != RD_KAFKA_CONF_OK)
		die("bootstrap.servers", errstr);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
	if (rk == NULL)
		die("cannot create a client", errstr);
	queue = rd_kafka_queue_new(rk);
	options = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_ANY);
	if (rd_kafka_AdminOptions_set_request_timeout(options, TIMEOUT_MS, errstr, sizeof errstr) ||
		rd_kafka_AdminOptions_set_operation_timeout(options, TIMEOUT_MS, errstr, sizeof errstr))
		die("admin options", errstr);

	if (strcmp(cmd, "create") == 0 && argc >= 5)
	{
		rd_kafka_NewTopic_t *topic = rd_kafka_NewTopic_new(argv[3], (int) number(argv[4], "PARTITIONS", INT32_MAX),
														   1, errstr, sizeof errstr);

		if (topic == NULL)
			die("create", errstr);
		for (int i = 5; i < argc; i += 2)
		{
			char	   *eq = i + 1 < argc ? strchr(argv[i + 1], '=') : NULL;

			if (strcmp(argv[i], "--config") != 0 || eq == NULL)
				usage();
			*eq = '\0';
			if (rd_kafka_NewTopic_set_config(topic, argv[i + 1], eq + 1))
				die("create: bad --config", argv[i + 1]);
		}
		rd_kafka_CreateTopics(rk, &topic, 1, options, queue);
		ev = await_result(queue, "create");
		results = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
		check_topic(results, n, RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS, "create");
	}
	else if (strcmp(cmd, "delete") == 0 && argc == 4)
	{
		rd_kafka_DeleteTopic_t *topic = rd_kafka_DeleteTopic_new(argv[3]);

		rd_kafka_DeleteTopics(rk, &topic, 1, options, queue);
		ev = await_result(queue, "delete");
		results = rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(ev), &n);
		check_topic(results, n, RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, "delete");
	}
	else if (strcmp(cmd, "add-partitions") == 0 && argc == 5)
	{
		rd_kafka_NewPartitions_t *parts = rd_kafka_NewPartitions_new(argv[3], (size_t) number(argv[4], "TOTAL", INT32_MAX),
																	 errstr, sizeof errstr);

		if (parts == NULL)
			die("add-partitions", errstr);
		rd_kafka_CreatePartitions(rk, &parts, 1, options, queue);
		ev = await_result(queue, "add-partitions");
		results = rd_kafka_CreatePartitions_result_topics(rd_kafka_event_CreatePartitions_result(ev), &n);
		check_topic(results, n, RD_KAFKA_RESP_ERR_NO_ERROR, "add-partitions");
	}
	else if (strcmp(cmd, "delete-records") == 0 && argc == 6)
	{
		rd_kafka_topic_partition_list_t *before = rd_kafka_topic_partition_list_new(1);
		const rd_kafka_topic_partition_list_t *done;
		rd_kafka_DeleteRecords_t *del;

		rd_kafka_topic_partition_list_add(before, argv[3], (int32_t) number(argv[4], "PARTITION", INT32_MAX))->offset =
			number(argv[5], "OFFSET", INT64_MAX);
		del = rd_kafka_DeleteRecords_new(before);
		rd_kafka_DeleteRecords(rk, &del, 1, options, queue);
		ev = await_result(queue, "delete-records");
		done = rd_kafka_DeleteRecords_result_offsets(rd_kafka_event_DeleteRecords_result(ev));
		for (int i = 0; i < done->cnt; i++)
			if (done->elems[i].err)
				die("delete-records", rd_kafka_err2str(done->elems[i].err));
	}
	else
		usage();

	rd_kafka_event_destroy(ev);
	rd_kafka_AdminOptions_destroy(options);
	rd_kafka_queue_destroy(queue);
	rd_kafka_destroy(rk);
	return 0;
}
