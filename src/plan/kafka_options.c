/*
 * kafka_options.c
 *		Which librdkafka properties (source.options, sink.options) a job's
 *		owner may set, and the configurations of the source's consumer and
 *		the Kafka sink's producer.
 *
 * librdkafka acts on some properties as the server's OS user: it runs the
 * kinit command through a shell (GSSAPI), reads the files that properties
 * name, and dlopen()s plugins and OpenSSL engines and providers, some as
 * soon as the property is set.  So a role gets what PostgreSQL itself would
 * give it: programs need pg_execute_server_program (as COPY ... PROGRAM
 * does), server files pg_read_server_files, code superuser, and every other
 * property must be on the list below, reviewed against CONFIGURATION.md of
 * librdkafka 2.0 as running no program, loading no code and touching no
 * file.  Names are matched exactly, as librdkafka matches them, so an
 * unknown name, an alias or a "topic."-prefixed topic property that is not
 * listed is refused.  Superusers may set any property librdkafka accepts.
 */
#include "postgres.h"

#include <librdkafka/rdkafka.h>

#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"

#include "plan/kafka_options.h"
#include "plan/spec_error.h"

/* What a property needs beyond being listed; 0: any role may set it. */
#define NEEDS_EXECUTE	0x01	/* librdkafka runs a program with it */
#define NEEDS_READ		0x02	/* it names a server file that librdkafka reads */
#define NEEDS_SUPERUSER 0x04	/* it loads code into the server process */

typedef struct KafkaOptionRule
{
	const char *name;
	int			needs;
	const char *inline_pem;		/* a file property: what to give inline instead */
} KafkaOptionRule;

static const KafkaOptionRule option_rules[] = {
	/* Brokers and the network: the spec's "brokers" reaches as far. */
	{"bootstrap.servers"}, {"metadata.broker.list"}, {"client.id"}, {"client.rack"},
	{"broker.address.family"}, {"broker.address.ttl"}, {"broker.version.fallback"},
	{"api.version.request"}, {"api.version.request.timeout.ms"}, {"api.version.fallback.ms"},
	{"socket.timeout.ms"}, {"socket.send.buffer.bytes"}, {"socket.receive.buffer.bytes"},
	{"socket.keepalive.enable"}, {"socket.nagle.disable"}, {"socket.max.fails"},
	{"socket.connection.setup.timeout.ms"}, {"connections.max.idle.ms"},
	{"reconnect.backoff.ms"}, {"reconnect.backoff.max.ms"},
	{"message.max.bytes"}, {"message.copy.max.bytes"}, {"receive.message.max.bytes"},
	{"max.in.flight.requests.per.connection"}, {"max.in.flight"},
	{"metadata.max.age.ms"}, {"topic.metadata.refresh.interval.ms"},
	{"topic.metadata.refresh.fast.interval.ms"}, {"topic.metadata.refresh.sparse"},
	{"topic.metadata.propagation.max.ms"}, {"topic.blacklist"}, {"allow.auto.create.topics"},
	/* What librdkafka logs (into the server log, at DEBUG1). */
	{"debug"}, {"log_level"}, {"log.connection.close"}, {"log.thread.name"},
	/* Checks that the build has features; sets nothing. */
	{"builtin.features"},
	/* The consumer and its (progress-only) group. */
	{"isolation.level"}, {"auto.offset.reset"}, {"check.crcs"},
	{"fetch.wait.max.ms"}, {"fetch.min.bytes"}, {"fetch.max.bytes"}, {"fetch.message.max.bytes"},
	{"max.partition.fetch.bytes"}, {"fetch.error.backoff.ms"}, {"fetch.queue.backoff.ms"},
	{"queued.min.messages"}, {"queued.max.messages.kbytes"},
	{"session.timeout.ms"}, {"heartbeat.interval.ms"}, {"coordinator.query.interval.ms"},
	{"max.poll.interval.ms"}, {"auto.commit.interval.ms"}, {"group.instance.id"},
	{"partition.assignment.strategy"}, {"group.protocol.type"},
	/* The producer (the Kafka sink). */
	{"linger.ms"}, {"queue.buffering.max.ms"}, {"queue.buffering.max.messages"},
	{"queue.buffering.max.kbytes"}, {"batch.num.messages"}, {"batch.size"},
	{"compression.codec"}, {"compression.type"}, {"compression.level"},
	{"request.timeout.ms"}, {"message.timeout.ms"}, {"delivery.timeout.ms"},
	{"transaction.timeout.ms"}, {"retries"}, {"message.send.max.retries"},
	{"retry.backoff.ms"}, {"retry.backoff.max.ms"}, {"partitioner"},
	{"sticky.partitioning.linger.ms"}, {"transactional.id"}, {"enable.idempotence"},
	{"acks"}, {"request.required.acks"},
	/* mailer sets these itself and refuses them to everyone, with a hint. */
	{"group.id"}, {"enable.auto.commit"}, {"enable.auto.offset.store"},
	{"enable.partition.eof"}, {"log.queue"},
	/* TLS, with keys and certificates inline. */
	{"security.protocol"}, {"ssl.ca.pem"}, {"ssl.certificate.pem"}, {"ssl.key.pem"},
	{"ssl.key.password"}, {"ssl.keystore.password"}, {"ssl.cipher.suites"}, {"ssl.curves.list"},
	{"ssl.sigalgs.list"}, {"ssl.endpoint.identification.algorithm"},
	{"enable.ssl.certificate.verification"},
	/* SASL other than GSSAPI (the mechanism's value is checked below). */
	{"sasl.mechanisms"}, {"sasl.mechanism"}, {"sasl.username"}, {"sasl.password"},
	{"sasl.oauthbearer.config"}, {"enable.sasl.oauthbearer.unsecure.jwt"},
	{"sasl.oauthbearer.method"}, {"sasl.oauthbearer.client.id"}, {"sasl.oauthbearer.client.secret"},
	{"sasl.oauthbearer.scope"}, {"sasl.oauthbearer.extensions"},
	{"sasl.oauthbearer.token.endpoint.url"},

	/*
	 * GSSAPI: librdkafka runs sasl.kerberos.kinit.cmd through a shell, and
	 * its default pastes the principal (unquoted) and the keytab (in double
	 * quotes, where $(...) still expands) into that line.  GSSAPI also
	 * authenticates with the server's own Kerberos credentials.
	 */
	{"sasl.kerberos.kinit.cmd", NEEDS_EXECUTE},
	{"sasl.kerberos.principal", NEEDS_EXECUTE},
	{"sasl.kerberos.keytab", NEEDS_EXECUTE | NEEDS_READ},
	{"sasl.kerberos.service.name", NEEDS_EXECUTE},
	{"sasl.kerberos.min.time.before.relogin", NEEDS_EXECUTE},

	/* Server files, read as the server's OS user (newer librdkafka's too). */
	{"ssl.ca.location", NEEDS_READ, "ssl.ca.pem"},
	{"ssl.certificate.location", NEEDS_READ, "ssl.certificate.pem"},
	{"ssl.key.location", NEEDS_READ, "ssl.key.pem"},
	{"ssl.keystore.location", NEEDS_READ, "ssl.certificate.pem\" and \"ssl.key.pem"},
	{"ssl.crl.location", NEEDS_READ},
	{"https.ca.location", NEEDS_READ},
	{"sasl.oauthbearer.assertion.private.key.file", NEEDS_READ},
	{"sasl.oauthbearer.assertion.jwt.template.file", NEEDS_READ},

	/* Code: a shared library, an OpenSSL engine or provider, dlopen()ed. */
	{"plugin.library.paths", NEEDS_SUPERUSER},
	{"ssl.engine.location", NEEDS_SUPERUSER},
	{"ssl.engine.id", NEEDS_SUPERUSER},
	{"ssl.providers", NEEDS_SUPERUSER},
};

/*
 * Memory: librdkafka holds up to queued.max.messages.kbytes of prefetched
 * messages, and buffers a fetch response and a received message of up to
 * these sizes per broker.  Near 2 GB each, a role could make the worker
 * (and the server's memory) swell; a superuser is not bound.
 */
typedef struct KafkaOptionCap
{
	const char *name;
	int64		max;
} KafkaOptionCap;

#define MEMORY_CAP_BYTES	INT64CONST(268435456)	/* 256 MB */

/* librdkafka's default message.max.bytes. */
#define DEFAULT_MESSAGE_MAX_BYTES 1000000

static const KafkaOptionCap option_caps[] = {
	{"queued.max.messages.kbytes", MEMORY_CAP_BYTES / 1024},
	{"fetch.max.bytes", MEMORY_CAP_BYTES},
	{"receive.message.max.bytes", MEMORY_CAP_BYTES},
	{"fetch.message.max.bytes", MEMORY_CAP_BYTES},
	{"max.partition.fetch.bytes", MEMORY_CAP_BYTES},
	{"message.max.bytes", MEMORY_CAP_BYTES},
	{"queue.buffering.max.kbytes", MEMORY_CAP_BYTES / 1024},
	{"socket.receive.buffer.bytes", MEMORY_CAP_BYTES},
	{"socket.send.buffer.bytes", MEMORY_CAP_BYTES},
};

/* The SASL mechanisms that run nothing on the server. */
static const char *const safe_mechanisms[] = {
	"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", NULL
};

#define GSSAPI_DETAIL "The GSSAPI mechanism runs kinit through a shell as the database server's operating system user, and authenticates with the server's own Kerberos credentials."
#define GSSAPI_HINT "Set \"sasl.mechanisms\" to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER, or grant pg_execute_server_program to the job's owner."

/* A property mailer sets itself, which a spec may not override, and what to do instead. */
typedef struct ForcedProperty
{
	const char *name;
	const char *hint;
} ForcedProperty;

#define OWN_OFFSETS_HINT "Leave it out: mailer keeps its own offsets in its checkpoints."
#define OWN_TRANSACTIONS_HINT "Leave it out: mailer names the sink's transactions per job and subtask, and needs idempotent, fully acknowledged writes for them."

static const ForcedProperty consumer_forced[] = {
	{"enable.auto.commit", OWN_OFFSETS_HINT}, {"enable.auto.offset.store", OWN_OFFSETS_HINT},
	{"enable.partition.eof", OWN_OFFSETS_HINT}, {"log.queue", OWN_OFFSETS_HINT},
	{"auto.offset.reset", OWN_OFFSETS_HINT},
	{"group.id", "Use \"source.group_id\" to name the consumer group."},
	{NULL}
};
/* The consumer's too: the sink reads its epoch marker with a consumer of the same options. */
static const ForcedProperty producer_forced[] = {
	{"transactional.id", OWN_TRANSACTIONS_HINT}, {"enable.idempotence", OWN_TRANSACTIONS_HINT},
	{"acks", OWN_TRANSACTIONS_HINT}, {"request.required.acks", OWN_TRANSACTIONS_HINT},
	{"log.queue", OWN_TRANSACTIONS_HINT}, {"group.id", OWN_TRANSACTIONS_HINT},
	{"enable.auto.commit", OWN_TRANSACTIONS_HINT}, {"enable.auto.offset.store", OWN_TRANSACTIONS_HINT},
	{"enable.partition.eof", OWN_TRANSACTIONS_HINT}, {"auto.offset.reset", OWN_TRANSACTIONS_HINT},
	{"isolation.level", OWN_TRANSACTIONS_HINT},
	{NULL}
};

/* A property mailer sets before the spec's. */
typedef struct KafkaDefault
{
	const char *name;
	const char *value;
} KafkaDefault;

static rd_kafka_conf_t *build_conf(const char *path, List *options, Oid owner,
								   const KafkaDefault *defaults, int ndefaults,
								   const ForcedProperty *forced, const char *hint,
								   bool validate_only);
static void check_privileges(const char *path, List *options, Oid owner);
static void check_idempotence(const char *path, List *options);
static bool loads_code(const char *name);
static void check_unsecured_jwt(const char *path, List *options);
static const KafkaOptionRule *find_rule(const char *name);
static bool is_safe_mechanism(const char *value);
static void refuse(const char *path, const char *name, const char *detail, const char *hint) pg_attribute_noreturn();
static void check_cap(const char *path, const char *name, const char *value);

void
kafka_check_options(KafkaSourceSpec *spec)
{
	rd_kafka_conf_t *conf = kafka_options_conf(spec, "mailer-check", true);

	rd_kafka_conf_destroy(conf);
}

void
kafka_check_sink_options(KafkaSinkSpec *spec)
{
	rd_kafka_conf_t *conf = kafka_producer_conf(spec, NULL, true);

	rd_kafka_conf_destroy(conf);
}

/*
 * validate_only: for create_job and describe_job, in the caller's backend:
 * properties that load code (librdkafka dlopen()s a plugin as soon as it
 * is set) are judged by name only, and only the worker sets them.
 */
rd_kafka_conf_t *
kafka_options_conf(KafkaSourceSpec *spec, const char *group_id, bool validate_only)
{
	/* librdkafka 2.2 and later (see the queue's bound below). */
	bool		queue_backoff = rd_kafka_version() >= 0x02020000;
	KafkaDefault defaults[] = {
		{"bootstrap.servers", spec->brokers},
		{"isolation.level", "read_committed"},
		{"auto.offset.reset", "earliest"},
		{"fetch.wait.max.ms", "100"},
		/*
		 * The prefetch is bounded by size alone: librdkafka would prefetch
		 * up to 64 MB, so bound what a worker holds (source.options may
		 * raise it).  It costs several times its size, as librdkafka's own
		 * bytes per message are not counted.  A count bound would only
		 * add a second way to fill the queue.
		 *
		 * A full queue stops the fetching.  librdkafka 2.2 looks again
		 * after fetch.queue.backoff.ms (the last default); 2.0 only when
		 * its broker thread wakes, up to a second later, and the source
		 * wakes it once the queue has drained to half (kafka_refill.c).
		 * Either way 8 MB keep a busy worker fed.  At 4 MB the windowed
		 * jobs took fewer, longer checkpoints and the session job ran a
		 * fifth slower; from 8 MB on they did not (issue 16, 5M orders).
		 */
		{"queued.min.messages", "10000000"},
		{"queued.max.messages.kbytes", "8192"},

		/*
		 * What is on its way counts too: each partition's fetch asks for
		 * up to this much (librdkafka's default is 1 MB, compressed), so
		 * with many partitions a response brings several times the queue's
		 * bound.  256 KB took about 50 MB off the worker's peak at 5M keys
		 * (8 partitions); a larger message still comes, alone.  Smaller
		 * fetches made librdkafka 2.0 read some partitions far ahead of
		 * others, which watermark alignment now stops (issue 16,
		 * docs/ARCHITECTURE.md, "Watermark alignment").
		 */
		{"max.partition.fetch.bytes", "262144"},
		{"enable.auto.commit", "false"},
		{"enable.auto.offset.store", "false"},
		{"enable.partition.eof", "false"},
		{"log.queue", "true"},
		{"group.id", group_id},
		{"fetch.queue.backoff.ms", "10"},
	};

	return build_conf("source.options", spec->options, spec->owner, defaults,
					  lengthof(defaults) - (queue_backoff ? 0 : 1),
					  consumer_forced,
					  "source.options takes librdkafka consumer properties, as CONFIGURATION.md of librdkafka lists them.",
					  validate_only);
}

rd_kafka_conf_t *
kafka_producer_conf(KafkaSinkSpec *spec, const char *transactional_id, bool validate_only)
{
	KafkaDefault defaults[] = {
		{"bootstrap.servers", spec->brokers},
		{"enable.idempotence", "true"},
		{"acks", "all"},
		/* The Java clients' partitioner: a key lands where their producers put it. */
		{"partitioner", "murmur2_random"},
		{"linger.ms", "5"},
		/*
		 * Sending the epoch marker waits out one retry backoff (100 ms by
		 * default) for the group coordinator: a shorter one keeps a
		 * checkpoint's Kafka transaction near the broker's round trips.
		 */
		{"retry.backoff.ms", "10"},
		/* librdkafka's own default is 1 GB per producer. */
		{"queue.buffering.max.kbytes", "65536"},
		/* A sink writes into a topic made for it, as into a table. */
		{"allow.auto.create.topics", "false"},
		{"log.queue", "true"},
		{"transactional.id", transactional_id},
	};

	check_idempotence(psprintf("%s.options", spec->path ? spec->path : "sink"), spec->options);
	return build_conf(psprintf("%s.options", spec->path ? spec->path : "sink"), spec->options, spec->owner, defaults,
					  lengthof(defaults) - (spec->exactly_once && transactional_id ? 0 : 1),
					  producer_forced,
					  "sink.options takes librdkafka producer properties, as CONFIGURATION.md of librdkafka lists them.",
					  validate_only);
}

int64
kafka_producer_max_bytes(KafkaSinkSpec *spec)
{
	int64		max = DEFAULT_MESSAGE_MAX_BYTES;
	ListCell   *lc;

	foreach(lc, spec->options)
	{
		DefElem    *opt = lfirst(lc);

		if (strcmp(opt->defname, "message.max.bytes") == 0)
			max = strtoll(strVal(opt->arg), NULL, 0);
	}
	return max;
}

rd_kafka_conf_t *
kafka_marker_reader_conf(KafkaSinkSpec *spec, const char *group_id)
{
	KafkaDefault defaults[] = {
		{"bootstrap.servers", spec->brokers},
		/* A marker committed with a transaction is read once that commit is final. */
		{"isolation.level", "read_committed"},
		{"enable.auto.commit", "false"},
		{"log.queue", "true"},
		{"group.id", group_id},
	};

	return build_conf(psprintf("%s.options", spec->path ? spec->path : "sink"), spec->options,
					  spec->owner, defaults, lengthof(defaults), producer_forced,
					  "sink.options takes librdkafka producer properties, as CONFIGURATION.md of librdkafka lists them.",
					  false);
}

/*
 * An idempotent producer refuses more than 5 requests in flight and no
 * retries when it is created: refuse them with the spec's path instead.
 */
static void
check_idempotence(const char *path, List *options)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *opt = lfirst(lc);
		long long	v = strtoll(strVal(opt->arg), NULL, 0);

		if ((strcmp(opt->defname, "max.in.flight.requests.per.connection") == 0 ||
			 strcmp(opt->defname, "max.in.flight") == 0) && v > 5)
			spec_error(psprintf("%s.%s", path, opt->defname), ERRCODE_INVALID_PARAMETER_VALUE,
					   "At most 5: the sink's producer is idempotent.", "%lld requests in flight are too many", v);
		if ((strcmp(opt->defname, "retries") == 0 || strcmp(opt->defname, "message.send.max.retries") == 0) &&
			v < 1)
			spec_error(psprintf("%s.%s", path, opt->defname), ERRCODE_INVALID_PARAMETER_VALUE,
					   "At least 1: the sink's producer is idempotent, and retries are how it stays exact.",
					   "a producer without retries cannot be idempotent");
	}
}

/*
 * defaults, then options once judged; a forced property in options is
 * refused.  validate_only: for create_job and describe_job, in the caller's
 * backend: properties that load code (librdkafka dlopen()s a plugin as soon
 * as it is set) are judged by name only, and only the worker sets them.
 */
static rd_kafka_conf_t *
build_conf(const char *path, List *options, Oid owner, const KafkaDefault *defaults, int ndefaults,
		   const ForcedProperty *forced, const char *hint, bool validate_only)
{
	rd_kafka_conf_t *conf;
	char		errstr[512];
	ListCell   *lc;

	/* Before librdkafka sees a property: some act as soon as they are set. */
	check_privileges(path, options, owner);
	check_unsecured_jwt(path, options);
	foreach(lc, options)
	{
		DefElem    *opt = lfirst(lc);

		for (int i = 0; forced[i].name; i++)
			if (strcmp(opt->defname, forced[i].name) == 0)
				spec_error(psprintf("%s.%s", path, opt->defname), ERRCODE_INVALID_PARAMETER_VALUE,
						   forced[i].hint, "mailer sets this property itself");
	}

	conf = rd_kafka_conf_new();
	for (int i = 0; i < ndefaults; i++)
		if (rd_kafka_conf_set(conf, defaults[i].name, defaults[i].value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
			elog(ERROR, "librdkafka refused %s: %s", defaults[i].name, errstr);
	foreach(lc, options)
	{
		DefElem    *opt = lfirst(lc);

		if (validate_only && loads_code(opt->defname))
			continue;
		if (rd_kafka_conf_set(conf, opt->defname, strVal(opt->arg), errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		{
			rd_kafka_conf_destroy(conf);
			/* librdkafka's message may quote the value: never show a secret. */
			spec_error(psprintf("%s.%s", path, opt->defname), ERRCODE_INVALID_PARAMETER_VALUE, hint,
					   "%s", spec_option_is_secret(opt->defname) ? "librdkafka refused the value" : errstr);
		}
	}
	return conf;
}

/*
 * librdkafka 2.0 crashes (a broker thread, so the whole server restarts)
 * some seconds after it fails to parse the sasl.oauthbearer.config of an
 * unsecured JWT: refuse, for every role, a config it would fail on.  Its
 * grammar: space-separated principal=, principalClaimName=, scope=,
 * lifeSeconds= (digits) and extension_NAME= settings, principal required.
 */
static void
check_unsecured_jwt(const char *path, List *options)
{
	const char *config = NULL;
	bool		unsecured = false;
	bool		principal = false;
	char	   *copy;
	char	   *word;
	char	   *save;
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *opt = lfirst(lc);

		if (strcmp(opt->defname, "enable.sasl.oauthbearer.unsecure.jwt") == 0)
			unsecured = pg_strcasecmp(strVal(opt->arg), "true") == 0 ||
				strcmp(strVal(opt->arg), "1") == 0;
		else if (strcmp(opt->defname, "sasl.oauthbearer.config") == 0)
			config = strVal(opt->arg);
	}
	if (!unsecured || config == NULL)
		return;
	copy = pstrdup(config);
	for (word = strtok_r(copy, " ", &save); word; word = strtok_r(NULL, " ", &save))
	{
		char	   *eq = strchr(word, '=');
		bool		ok = eq != NULL && eq[1] != '\0';

		if (ok)
		{
			*eq = '\0';
			if (strcmp(word, "principal") == 0)
				principal = true;
			else if (strcmp(word, "lifeSeconds") == 0)
				ok = strspn(eq + 1, "0123456789") == strlen(eq + 1);
			else
				ok = strcmp(word, "principalClaimName") == 0 || strcmp(word, "scope") == 0 ||
					(strncmp(word, "extension_", 10) == 0 && word[10] != '\0');
		}
		if (!ok)
			break;
	}
	if (word != NULL || !principal)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 spec_errmsg(psprintf("%s.sasl.oauthbearer.config", path),
							 "librdkafka cannot read it as an unsecured JWT's settings"),
				 errdetail("With \"enable.sasl.oauthbearer.unsecure.jwt\", it is space-separated principal=, principalClaimName=, scope=, lifeSeconds= and extension_NAME= settings, principal required; librdkafka 2.0 fails on anything else."),
				 errhint("Correct the value (it is not shown: it may be a secret).")));
}

/*
 * Raise ERRCODE_INSUFFICIENT_PRIVILEGE at the first property of options (a
 * list of DefElem with string values) that owner may not set.  Runs before
 * librdkafka sees any of them; needs a transaction (role membership).
 */
static void
check_privileges(const char *path, List *options, Oid owner)
{
	bool		may_execute;
	bool		may_read;
	bool		mechanism_set = false;
	bool		sasl_protocol = false;
	ListCell   *lc;

	if (superuser_arg(owner))
		return;
	may_execute = has_privs_of_role(owner, ROLE_PG_EXECUTE_SERVER_PROGRAM);
	may_read = has_privs_of_role(owner, ROLE_PG_READ_SERVER_FILES);

	foreach(lc, options)
	{
		DefElem    *opt = lfirst(lc);
		const char *name = opt->defname;
		const char *value = strVal(opt->arg);
		const KafkaOptionRule *rule = find_rule(name);

		if (rule == NULL)
			refuse(path, name,
				   "It is not one of the librdkafka properties that run no program, load no code and read no file.",
				   "The README's section \"Security\" lists the properties a role other than a superuser may set: check the name, or leave it out.");
		if (rule->needs & NEEDS_SUPERUSER)
			refuse(path, name,
				   "It loads a library into the server process, as the database server's operating system user.",
				   "Only a superuser may set it.");
		if ((rule->needs & NEEDS_EXECUTE) && !may_execute)
			refuse(path, name,
				   strcmp(name, "sasl.kerberos.kinit.cmd") == 0 ?
				   "It is a command that librdkafka runs through a shell as the database server's operating system user." :
				   "It configures GSSAPI, whose kinit command librdkafka runs through a shell as the database server's operating system user.",
				   "Grant pg_execute_server_program to the job's owner, or leave it out.");
		if ((rule->needs & NEEDS_READ) && !may_read)
			refuse(path, name,
				   "It names a file that librdkafka reads as the database server's operating system user.",
				   rule->inline_pem ?
				   psprintf("Give the content inline in \"%s\", or grant pg_read_server_files to the job's owner.", rule->inline_pem) :
				   "Grant pg_read_server_files to the job's owner, or leave it out.");

		check_cap(path, name, value);
		if (strcmp(name, "sasl.mechanisms") == 0 || strcmp(name, "sasl.mechanism") == 0)
		{
			mechanism_set = true;
			if (!may_execute && !is_safe_mechanism(value))
				refuse(path, name, GSSAPI_DETAIL, GSSAPI_HINT);
		}
		else if (strcmp(name, "security.protocol") == 0)
			sasl_protocol = pg_strcasecmp(value, "plaintext") != 0 && pg_strcasecmp(value, "ssl") != 0;
		else if (strcmp(name, "sasl.oauthbearer.token.endpoint.url") == 0 &&
				 pg_strncasecmp(value, "https://", 8) != 0)
			refuse(path, name,
				   "librdkafka fetches the token with libcurl, which reads file:// and other URLs too.",
				   "Use an https:// URL.");
	}

	/* librdkafka's default mechanism is GSSAPI. */
	if (sasl_protocol && !mechanism_set && !may_execute)
		refuse(path, "security.protocol",
			   "Without \"sasl.mechanisms\", SASL means GSSAPI, which runs kinit through a shell as the database server's operating system user and authenticates with the server's own Kerberos credentials.",
			   GSSAPI_HINT);
}

/*
 * Whether librdkafka loads code for a property (a plugin, an OpenSSL engine
 * or provider): validation outside the worker never hands it over.
 */
static bool
loads_code(const char *name)
{
	const KafkaOptionRule *rule = find_rule(name);

	return rule != NULL && (rule->needs & NEEDS_SUPERUSER) != 0;
}

/*
 * Refuse a memory property above its cap.  The value is read as librdkafka
 * reads it (strtol, base 0: hex too); one it cannot read, it refuses.
 */
static void
check_cap(const char *path, const char *name, const char *value)
{
	for (int i = 0; i < lengthof(option_caps); i++)
	{
		char	   *end;
		long long	v;

		if (strcmp(option_caps[i].name, name) != 0)
			continue;
		errno = 0;
		v = strtoll(value, &end, 0);
		if (end == value || (errno == 0 && v <= option_caps[i].max))
			return;
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to set %s.%s above " INT64_FORMAT, path, name,
						option_caps[i].max),
				 errdetail("librdkafka holds that much memory in the job's worker."),
				 errhint("Give at most " INT64_FORMAT ", or ask a superuser to create the job.",
						 option_caps[i].max)));
	}
}

static const KafkaOptionRule *
find_rule(const char *name)
{
	for (int i = 0; i < lengthof(option_rules); i++)
		if (strcmp(option_rules[i].name, name) == 0)
			return &option_rules[i];
	return NULL;
}

static bool
is_safe_mechanism(const char *value)
{
	for (int i = 0; safe_mechanisms[i]; i++)
		if (strcmp(safe_mechanisms[i], value) == 0)
			return true;
	return false;
}

/* The value is never shown: it may be a secret. */
static void
refuse(const char *path, const char *name, const char *detail, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to set %s.%s", path, name),
			 errdetail("%s", detail),
			 errhint("%s", hint)));
}
