/*
 * barrier_tool: what the barrier-cut tests (test/t/17x) need of a barrier
 * coordinator that kcat cannot do exactly.
 *
 *   barrier_tool BROKERS ends TOPIC
 *       "partition<TAB>end_offset" for every partition of TOPIC: the high
 *       watermarks asked of the broker at this moment, which a test takes
 *       as a cut's marker offsets.
 *   barrier_tool BROKERS send TOPIC KEYHEX VALUEHEX
 *       produce one message, with these bytes as key and value, to
 *       partition 0 of TOPIC (VALUEHEX "-" sends a null value, a
 *       tombstone); waits until the broker acknowledges it.
 *
 * kcat reads keys and values as text lines split on a delimiter, which
 * binary cut records (any byte, NUL and newline included) do not survive.
 * Exits non-zero, with the reason on stderr, on any error.
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_MS 30000

static void
die(const char *what, const char *why)
{
	fprintf(stderr, "barrier_tool: %s: %s\n", what, why);
	exit(1);
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque);

static rd_kafka_t *
new_client(const char *brokers, rd_kafka_type_t type)
{
	char		err[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;

	if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err)) != RD_KAFKA_CONF_OK)
		die("bootstrap.servers", err);
	/* One acknowledged write or a failure, never a silent retry loop. */
	if (type == RD_KAFKA_PRODUCER &&
		(rd_kafka_conf_set(conf, "acks", "all", err, sizeof(err)) != RD_KAFKA_CONF_OK ||
		 rd_kafka_conf_set(conf, "message.timeout.ms", "30000", err, sizeof(err)) != RD_KAFKA_CONF_OK))
		die("producer settings", err);
	if (type == RD_KAFKA_PRODUCER)
		rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rk = rd_kafka_new(type, conf, err, sizeof(err));
	if (rk == NULL)
		die("rd_kafka_new", err);
	return rk;
}

/* Hex text to bytes; *len gets the byte count.  Odd length or non-hex dies. */
static unsigned char *
unhex(const char *hex, size_t *len)
{
	size_t		n = strlen(hex);
	unsigned char *out;

	if (n % 2 != 0)
		die("hex", "odd number of digits");
	out = malloc(n / 2 + 1);
	for (size_t i = 0; i < n / 2; i++)
	{
		unsigned int b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			die("hex", "not a hex digit");
		out[i] = (unsigned char) b;
	}
	*len = n / 2;
	return out;
}

static int
cmd_ends(const char *brokers, const char *topic)
{
	rd_kafka_t *rk = new_client(brokers, RD_KAFKA_CONSUMER);
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t err;

	err = rd_kafka_metadata(rk, 0, rkt, &md, TIMEOUT_MS);
	if (err)
		die("metadata", rd_kafka_err2str(err));
	if (md->topic_cnt != 1 || md->topics[0].err)
		die(topic, md->topic_cnt == 1 ? rd_kafka_err2str(md->topics[0].err) : "no such topic");
	if (md->topics[0].partition_cnt == 0)
		die(topic, "no partitions");
	for (int p = 0; p < md->topics[0].partition_cnt; p++)
	{
		int32_t		id = md->topics[0].partitions[p].id;
		int64_t		low, high;

		err = rd_kafka_query_watermark_offsets(rk, topic, id, &low, &high, TIMEOUT_MS);
		if (err)
			die("query_watermark_offsets", rd_kafka_err2str(err));
		printf("%d\t%lld\n", (int) id, (long long) high);
	}
	rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	rd_kafka_destroy(rk);
	return 0;
}

/* The delivery report: the message's result into the caller's variable. */
static void
on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
	*(rd_kafka_resp_err_t *) msg->_private = msg->err;
}

static int
cmd_send(const char *brokers, const char *topic, const char *keyhex, const char *valuehex)
{
	rd_kafka_t *rk = new_client(brokers, RD_KAFKA_PRODUCER);
	size_t		klen, vlen = 0;
	unsigned char *key = unhex(keyhex, &klen);
	unsigned char *value = NULL;
	rd_kafka_resp_err_t result = RD_KAFKA_RESP_ERR__IN_PROGRESS;
	rd_kafka_resp_err_t err;

	if (strcmp(valuehex, "-") != 0)
		value = unhex(valuehex, &vlen);

	err = rd_kafka_producev(rk,
							RD_KAFKA_V_TOPIC(topic),
							RD_KAFKA_V_PARTITION(0),
							RD_KAFKA_V_KEY(key, klen),
							RD_KAFKA_V_VALUE(value, vlen),
							RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
							RD_KAFKA_V_OPAQUE(&result),
							RD_KAFKA_V_END);
	if (err)
		die("produce", rd_kafka_err2str(err));
	while (result == RD_KAFKA_RESP_ERR__IN_PROGRESS)
		rd_kafka_poll(rk, 100);
	if (result)
		die("delivery", rd_kafka_err2str(result));
	rd_kafka_destroy(rk);
	free(key);
	free(value);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[2], "ends") == 0)
		return cmd_ends(argv[1], argv[3]);
	if (argc == 6 && strcmp(argv[2], "send") == 0)
		return cmd_send(argv[1], argv[3], argv[4], argv[5]);
	fprintf(stderr, "usage: barrier_tool BROKERS ends TOPIC\n"
			"       barrier_tool BROKERS send TOPIC KEYHEX VALUEHEX|-\n");
	return 2;
}
