/*
 * pulsar_tool: the Pulsar tests' client, on the extension's own WebSocket
 * layer (src/connectors/pulsar_ws.c, pulsar_frame.c).
 *
 *   pulsar_tool URL produce TOPIC PRODUCER INITIAL_SEQUENCE_ID [PAYLOAD ...]
 *       send each PAYLOAD (without any: each line of stdin) as one message,
 *       in order, from a producer with this name whose messages take the
 *       sequence ids INITIAL_SEQUENCE_ID + 1, + 2, ...; wait for every
 *       acknowledgement. One line per message:
 *           SEQUENCE_ID <TAB> MESSAGE_ID <TAB> LEDGER:ENTRY:PARTITION:BATCH
 *       or, for a message the broker dropped as already stored,
 *           SEQUENCE_ID <TAB> duplicate
 *       PULSAR_TOOL_KEY gives every message that key, PULSAR_TOOL_PROPERTY
 *       (NAME=VALUE) that property; unset or empty, none.
 *   pulsar_tool URL read TOPIC FROM COUNT
 *       read COUNT messages after FROM (a base64 message id; earliest;
 *       latest), one line each:
 *           MESSAGE_ID <TAB> LEDGER:ENTRY:PARTITION:BATCH <TAB> KEY <TAB>
 *           PROPERTIES <TAB> PAYLOAD
 *       KEY is \N when there is none; PROPERTIES is NAME=VALUE;... ; text
 *       is escaped (\\, \t, \n, \xNN for other bytes below 0x20 or 0x7f).
 *       Then it waits PULSAR_TOOL_LINGER_MS (default 500) for more.
 *
 *   pulsar_tool parse < frames
 *       parse each line of stdin as a reader's message frame, as the
 *       source will (no broker involved); one line each:
 *           ok <TAB> MESSAGE_ID <TAB> KEY <TAB> PROPERTIES <TAB> PAYLOAD
 *       every text in hex (KEY \N when there is none, PROPERTIES
 *       NAME=VALUE;...), or "error <TAB> why". Test 181 compares these
 *       with PostgreSQL's jsonb reading the same frames.
 *
 * URL is the broker's http://host:port; TOPIC is tenant/ns/topic or a
 * partition, tenant/ns/topic-partition-N. Exit status: 0; 1 on an error or
 * when fewer than COUNT messages arrive within PULSAR_TOOL_TIMEOUT seconds
 * (default 30), after printing those that did; 2 when more than COUNT
 * arrive (the surplus printed too).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "connectors/pulsar_frame.h"
#include "connectors/pulsar_ws.h"

static char err[1024];

static void
die(const char *what, const char *why)
{
	fprintf(stderr, "pulsar_tool: %s: %s\n", what, why);
	exit(1);
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int
env_int(const char *name, int dflt)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : dflt;
}

/* Service until the session is open; die with its reason if it closes. */
static void
wait_open(PulsarWs *ws, PulsarWsConn *conn, double deadline)
{
	const char *why;

	while (pulsar_ws_state(conn, &why) == PULSAR_WS_CONNECTING)
	{
		if (now() > deadline)
			die("connect", "no answer from the broker");
		if (pulsar_ws_service(ws, 100) < 0)
			die("libwebsockets", "service failed");
	}
	if (pulsar_ws_state(conn, &why) != PULSAR_WS_OPEN)
		die("connect", why);
}

static void
print_escaped(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
	{
		if (s[i] == '\\')
			fputs("\\\\", stdout);
		else if (s[i] == '\t')
			fputs("\\t", stdout);
		else if (s[i] == '\n')
			fputs("\\n", stdout);
		else if (s[i] < 0x20 || s[i] == 0x7f)
			printf("\\x%02x", s[i]);
		else
			putchar(s[i]);
	}
}

static void
print_hex(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", s[i]);
}

static void
print_text(void (*print) (const unsigned char *, size_t), const char *s)
{
	print((const unsigned char *) s, strlen(s));
}

/* KEY <TAB> PROPERTIES <TAB> PAYLOAD, each text written by print. */
static void
print_fields(const PulsarMessage *msg, void (*print) (const unsigned char *, size_t))
{
	if (msg->key)
		print_text(print, msg->key);
	else
		fputs("\\N", stdout);
	putchar('\t');
	for (int i = 0; i < msg->nproperties; i++)
	{
		if (i > 0)
			putchar(';');
		print_text(print, msg->property_names[i]);
		putchar('=');
		print_text(print, msg->property_values[i]);
	}
	putchar('\t');
	print(msg->payload, msg->payload_len);
	putchar('\n');
}

static void
print_id(const char *base64)
{
	PulsarMessageId id;

	if (!pulsar_message_id_decode(base64, &id))
		die("message id", base64);
	printf("%lld:%lld:%d:%d", (long long) id.ledger, (long long) id.entry,
		   id.partition, id.batch_index);
}

static int
produce(PulsarWs *ws, const char *url, const char *topic, const char *name,
		long long initial, int npayloads, char **payloads)
{
	double		deadline = now() + env_int("PULSAR_TOOL_TIMEOUT", 30);
	const char *key = getenv("PULSAR_TOOL_KEY");
	const char *property = getenv("PULSAR_TOOL_PROPERTY");
	char		prop_name[256] = "";
	const char *prop_names[1] = {prop_name};
	const char *prop_values[1] = {""};
	int			nprops = 0;
	PulsarWsConn *conn;
	char	  **lines = payloads;
	int			n = npayloads;
	int			acked = 0;
	const char *why;

	if (key && *key == '\0')
		key = NULL;				/* unset and empty alike: no key */
	if (property && *property)
	{
		const char *eq = strchr(property, '=');

		if (eq == NULL || eq - property >= (long) sizeof(prop_name))
			die("PULSAR_TOOL_PROPERTY", "want NAME=VALUE");
		memcpy(prop_name, property, eq - property);
		prop_values[0] = eq + 1;
		nprops = 1;
	}
	if (n == 0)
	{
		/* Each line of stdin, without its newline. */
		size_t		cap = 0;
		char	   *line = NULL;
		ssize_t		len;

		lines = NULL;
		while ((len = getline(&line, &cap, stdin)) >= 0)
		{
			if (len > 0 && line[len - 1] == '\n')
				line[len - 1] = '\0';
			lines = realloc(lines, sizeof(char *) * (n + 1));
			lines[n++] = strdup(line);
		}
		free(line);
	}
	if ((conn = pulsar_ws_producer(ws, url, topic, name, initial, err, sizeof(err))) == NULL)
		die("producer", err);
	wait_open(ws, conn, deadline);
	for (int i = 0; i < n; i++)
	{
		char		context[32];
		size_t		len;
		char	   *frame;

		/* The context names the message in its acknowledgement. */
		snprintf(context, sizeof(context), "%lld", initial + 1 + i);
		frame = pulsar_frame_send((const unsigned char *) lines[i], strlen(lines[i]),
								  key, nprops, prop_names, prop_values, context, &len);
		if (frame == NULL || !pulsar_ws_send(conn, frame, len))
			die("send", "out of memory or session closed");
		free(frame);
	}
	while (acked < n)
	{
		char	   *frame;
		size_t		len;

		while ((frame = pulsar_ws_take(conn, &len)) != NULL)
		{
			PulsarAck	ack;
			PulsarMessageId id;
			char		want[32];

			if (!pulsar_parse_ack(frame, len, &ack, err, sizeof(err)))
				die("acknowledgement", err);
			snprintf(want, sizeof(want), "%lld", initial + 1 + acked);
			if (strcmp(ack.result, "ok") != 0)
				die(ack.result, ack.error ? ack.error : "no errorMsg");
			/* One producer's acknowledgements come in the order sent. */
			if (ack.context == NULL || strcmp(ack.context, want) != 0)
				die("acknowledgement out of order, context", ack.context ? ack.context : "none");
			if (ack.message_id == NULL || !pulsar_message_id_decode(ack.message_id, &id))
				die("acknowledgement without a message id, context", ack.context);
			if (pulsar_message_id_is_duplicate(&id))
				printf("%s\tduplicate\n", ack.context);
			else
			{
				printf("%s\t%s\t", ack.context, ack.message_id);
				print_id(ack.message_id);
				putchar('\n');
			}
			acked++;
			pulsar_ws_frame_free(frame);
		}
		if (acked == n)
			break;
		if (pulsar_ws_state(conn, &why) == PULSAR_WS_CLOSED)
			die("producer", why);
		if (now() > deadline)
			die("produce", "timed out waiting for acknowledgements");
		if (pulsar_ws_service(ws, 100) < 0)
			die("libwebsockets", "service failed");
	}
	pulsar_ws_close(conn);
	return 0;
}

static int
read_topic(PulsarWs *ws, const char *url, const char *topic, const char *from, int count)
{
	double		deadline = now() + env_int("PULSAR_TOOL_TIMEOUT", 30);
	int			linger_ms = env_int("PULSAR_TOOL_LINGER_MS", 500);
	double		linger_end = now() + linger_ms / 1000.0;	/* COUNT 0: linger at once */
	int			got = 0;
	PulsarWsConn *conn;
	const char *why;

	/* A small receive queue: the flow control (acknowledgements) gets used. */
	if ((conn = pulsar_ws_reader(ws, url, topic, from, 4, err, sizeof(err))) == NULL)
		die("reader", err);
	wait_open(ws, conn, deadline);
	for (;;)
	{
		char	   *frame;
		size_t		len;

		while ((frame = pulsar_ws_take(conn, &len)) != NULL)
		{
			PulsarMessage msg;
			char	   *ack;
			size_t		ack_len;

			if (!pulsar_parse_message(frame, len, &msg, err, sizeof(err)))
				die("message frame", err);
			printf("%s\t", msg.message_id);
			print_id(msg.message_id);
			putchar('\t');
			print_fields(&msg, print_escaped);
			fflush(stdout);
			if ((ack = pulsar_frame_ack(msg.message_id, &ack_len)) == NULL ||
				!pulsar_ws_send(conn, ack, ack_len))
				die("acknowledge", "out of memory or session closed");
			free(ack);
			pulsar_ws_frame_free(frame);
			if (++got == count)
				linger_end = now() + linger_ms / 1000.0;
		}
		if (got > count)
		{
			fprintf(stderr, "pulsar_tool: read: more than %d messages\n", count);
			return 2;
		}
		if (got == count && now() >= linger_end)
			break;
		if (pulsar_ws_state(conn, &why) == PULSAR_WS_CLOSED)
			die("reader", why);
		if (got < count && now() > deadline)
		{
			fprintf(stderr, "pulsar_tool: read: %d of %d messages before the timeout\n", got, count);
			return 1;
		}
		if (pulsar_ws_service(ws, 50) < 0)
			die("libwebsockets", "service failed");
	}
	pulsar_ws_close(conn);
	return 0;
}

static int
parse_frames(void)
{
	size_t		cap = 0;
	char	   *line = NULL;
	ssize_t		len;

	while ((len = getline(&line, &cap, stdin)) >= 0)
	{
		PulsarMessage msg;

		if (len > 0 && line[len - 1] == '\n')
			line[--len] = '\0';
		if (!pulsar_parse_message(line, (size_t) len, &msg, err, sizeof(err)))
		{
			printf("error\t%s\n", err);
			continue;
		}
		fputs("ok\t", stdout);
		print_text(print_hex, msg.message_id);
		putchar('\t');
		print_fields(&msg, print_hex);
	}
	free(line);
	return 0;
}

int
main(int argc, char **argv)
{
	bool		producing = argc >= 6 && strcmp(argv[2], "produce") == 0;
	bool		reading = argc == 6 && strcmp(argv[2], "read") == 0;
	PulsarWs   *ws;
	int			rc;

	if (argc == 2 && strcmp(argv[1], "parse") == 0)
		return parse_frames();
	if (!producing && !reading)
	{
		fprintf(stderr, "usage: pulsar_tool URL produce TOPIC PRODUCER INITIAL_SEQUENCE_ID [PAYLOAD ...]\n"
				"       pulsar_tool URL read TOPIC FROM COUNT\n"
				"       pulsar_tool parse < frames\n");
		return 2;
	}
	if ((ws = pulsar_ws_new(err, sizeof(err))) == NULL)
		die("libwebsockets", err);
	if (producing)
		rc = produce(ws, argv[1], argv[3], argv[4], atoll(argv[5]), argc - 6, argv + 6);
	else
		rc = read_topic(ws, argv[1], argv[3], argv[4], atoi(argv[5]));
	/* Let the close frames go out before the context goes. */
	pulsar_ws_service(ws, 0);
	pulsar_ws_free(ws);
	return rc;
}
