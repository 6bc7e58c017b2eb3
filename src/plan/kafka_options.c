/*
 * kafka_options.c
 *		Which librdkafka properties (source.options) a job's owner may set.
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

#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"

#include "plan/kafka_options.h"

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
	{"max.partition.fetch.bytes"}, {"fetch.error.backoff.ms"},
	{"queued.min.messages"}, {"queued.max.messages.kbytes"},
	{"session.timeout.ms"}, {"heartbeat.interval.ms"}, {"coordinator.query.interval.ms"},
	{"max.poll.interval.ms"}, {"auto.commit.interval.ms"}, {"group.instance.id"},
	{"partition.assignment.strategy"}, {"group.protocol.type"},
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

static const KafkaOptionCap option_caps[] = {
	{"queued.max.messages.kbytes", MEMORY_CAP_BYTES / 1024},
	{"fetch.max.bytes", MEMORY_CAP_BYTES},
	{"receive.message.max.bytes", MEMORY_CAP_BYTES},
	{"fetch.message.max.bytes", MEMORY_CAP_BYTES},
	{"max.partition.fetch.bytes", MEMORY_CAP_BYTES},
	{"message.max.bytes", MEMORY_CAP_BYTES},
	{"socket.receive.buffer.bytes", MEMORY_CAP_BYTES},
	{"socket.send.buffer.bytes", MEMORY_CAP_BYTES},
};

/* The SASL mechanisms that run nothing on the server. */
static const char *const safe_mechanisms[] = {
	"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", NULL
};

#define GSSAPI_DETAIL "The GSSAPI mechanism runs kinit through a shell as the database server's operating system user, and authenticates with the server's own Kerberos credentials."
#define GSSAPI_HINT "Set \"sasl.mechanisms\" to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER, or grant pg_execute_server_program to the job's owner."

static const KafkaOptionRule *find_rule(const char *name);
static bool is_safe_mechanism(const char *value);
static void refuse(const char *name, const char *detail, const char *hint) pg_attribute_noreturn();
static void check_cap(const char *name, const char *value);

void
kafka_options_check(List *options, Oid owner)
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
			refuse(name,
				   "It is not one of the librdkafka properties that run no program, load no code and read no file.",
				   "The README's section \"Security\" lists the properties a role other than a superuser may set: check the name, or leave it out.");
		if (rule->needs & NEEDS_SUPERUSER)
			refuse(name,
				   "It loads a library into the server process, as the database server's operating system user.",
				   "Only a superuser may set it.");
		if ((rule->needs & NEEDS_EXECUTE) && !may_execute)
			refuse(name,
				   strcmp(name, "sasl.kerberos.kinit.cmd") == 0 ?
				   "It is a command that librdkafka runs through a shell as the database server's operating system user." :
				   "It configures GSSAPI, whose kinit command librdkafka runs through a shell as the database server's operating system user.",
				   "Grant pg_execute_server_program to the job's owner, or leave it out.");
		if ((rule->needs & NEEDS_READ) && !may_read)
			refuse(name,
				   "It names a file that librdkafka reads as the database server's operating system user.",
				   rule->inline_pem ?
				   psprintf("Give the content inline in \"%s\", or grant pg_read_server_files to the job's owner.", rule->inline_pem) :
				   "Grant pg_read_server_files to the job's owner, or leave it out.");

		check_cap(name, value);
		if (strcmp(name, "sasl.mechanisms") == 0 || strcmp(name, "sasl.mechanism") == 0)
		{
			mechanism_set = true;
			if (!may_execute && !is_safe_mechanism(value))
				refuse(name, GSSAPI_DETAIL, GSSAPI_HINT);
		}
		else if (strcmp(name, "security.protocol") == 0)
			sasl_protocol = pg_strcasecmp(value, "plaintext") != 0 && pg_strcasecmp(value, "ssl") != 0;
		else if (strcmp(name, "sasl.oauthbearer.token.endpoint.url") == 0 &&
				 pg_strncasecmp(value, "https://", 8) != 0)
			refuse(name,
				   "librdkafka fetches the token with libcurl, which reads file:// and other URLs too.",
				   "Use an https:// URL.");
	}

	/* librdkafka's default mechanism is GSSAPI. */
	if (sasl_protocol && !mechanism_set && !may_execute)
		refuse("security.protocol",
			   "Without \"sasl.mechanisms\", SASL means GSSAPI, which runs kinit through a shell as the database server's operating system user and authenticates with the server's own Kerberos credentials.",
			   GSSAPI_HINT);
}

bool
kafka_option_loads_code(const char *name)
{
	const KafkaOptionRule *rule = find_rule(name);

	return rule != NULL && (rule->needs & NEEDS_SUPERUSER) != 0;
}

/*
 * Refuse a memory property above its cap.  The value is read as librdkafka
 * reads it (strtol, base 0: hex too); one it cannot read, it refuses.
 */
static void
check_cap(const char *name, const char *value)
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
				 errmsg("permission denied to set source.options.%s above " INT64_FORMAT, name,
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
refuse(const char *name, const char *detail, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to set source.options.%s", name),
			 errdetail("%s", detail),
			 errhint("%s", hint)));
}
