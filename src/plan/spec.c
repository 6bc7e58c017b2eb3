/*
 * spec.c
 *		Parse and check a job spec (spec.h).
 *
 * Strict by design: every object's fields are checked against the fields
 * it accepts, every value against its type, and an error names the JSON
 * path (steps[2].window.size) and says what is accepted.  Expressions are
 * only checked for being strings here; plan.c compiles them.
 */
#include "postgres.h"

#include "access/twophase.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "nodes/makefuncs.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/formatting.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "base/jsonb_build.h"
#include "base/key_groups.h"
#include "base/mailer.h"
#include "plan/spec.h"
#include "plan/spec_error.h"

const char *const step_kind_names[] = {
	[STEP_FILTER] = "filter",
	[STEP_MAP] = "map",
	[STEP_FLAT_MAP] = "flat_map",
	[STEP_KEY_BY] = "key_by",
	[STEP_WINDOW] = "window",
	[STEP_AGGREGATE] = "aggregate"
};
StaticAssertDecl(lengthof(step_kind_names) == STEP_AGGREGATE + 1,
				 "every step kind has a name");

const SpecChoice spec_source_types[] = {
	{"kafka", SOURCE_KAFKA}, {"generator", SOURCE_GENERATOR}, {"pulsar", SOURCE_PULSAR}, {NULL}
};
const SpecChoice spec_formats[] = {
	{"json", FORMAT_JSON}, {"text", FORMAT_TEXT}, {"bytes", FORMAT_BYTES}, {NULL}
};
const SpecChoice spec_kafka_starts[] = {
	{"earliest", false}, {"latest", true}, {NULL}
};
const SpecChoice spec_window_types[] = {
	{"tumbling", WINDOW_TUMBLING}, {"sliding", WINDOW_SLIDING}, {"session", WINDOW_SESSION}, {NULL}
};
const SpecChoice spec_window_emits[] = {
	{"final", false}, {"update", true}, {NULL}
};
const SpecChoice spec_sink_types[] = {
	{"table", SINK_TABLE}, {"kafka", SINK_KAFKA}, {"pulsar", SINK_PULSAR}, {NULL}
};
const SpecChoice spec_sink_modes[] = {
	{"upsert", SINK_MODE_UPSERT}, {"append", SINK_MODE_APPEND}, {NULL}
};
const SpecChoice spec_sink_deliveries[] = {
	{"exactly_once", true}, {"at_least_once", false}, {NULL}
};
const SpecChoice spec_state_backends[] = {
	{"rocksdb", STATE_ROCKSDB}, {"memory", STATE_MEMORY}, {NULL}
};
const SpecChoice spec_on_errors[] = {
	{"dead_letter", ON_ERROR_DEAD_LETTER}, {"skip", ON_ERROR_SKIP}, {"fail", ON_ERROR_FAIL}, {NULL}
};

/* A JSON object being read, with its path for error messages. */
typedef struct JsonObject
{
	const char *path;			/* "" at the top */
	JsonbContainer *container;
} JsonObject;

static const char *const top_fields[] = {
	"version", "source", "event_time", "watermark", "steps", "sink", "sinks",
	"checkpoint", "state", "on_error", "parallelism", "key_groups", NULL
};
static const char *const kafka_fields[] = {
	"type", "brokers", "topic", "topics", "start", "format", "options", "group_id",
	"barrier_group", "barrier_topic", NULL
};
static const char *const pulsar_fields[] = {
	"type", "service_url", "topic", "start", "format", "options", NULL
};
static const char *const generator_fields[] = {
	"type", "events", "rate", "keys", "seed", "start_time", "step", "partitions", "format", NULL
};
static const char *const watermark_fields[] = {
	"max_out_of_orderness", "idle_timeout", "max_drift", NULL
};
static const char *const window_fields[] = {
	"type", "size", "slide", "gap", "allowed_lateness", "emit", NULL
};
static const char *const table_sink_fields[] = {
	"type", "table", "mode", "key", NULL
};
/* What Kafka allows in a topic's name. */
#define TOPIC_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

static const char *const kafka_sink_fields[] = {
	"type", "brokers", "topic", "key", "value", "format", "headers", "options", "delivery", NULL
};
static const char *const pulsar_sink_fields[] = {
	"type", "service_url", "topic", "key", "value", "format", "properties", "options", NULL
};
/* "sinks": a table and a topic */
#define MAX_SINKS 2
#define SINKS_HINT "An array of a table sink and a Kafka or Pulsar sink, such as [{\"type\": \"table\", \"table\": \"totals\"}, {\"type\": \"kafka\", \"brokers\": \"localhost:9092\", \"topic\": \"totals\"}]."

#define KAFKA_OPTIONS_HINT "librdkafka properties take strings, numbers or booleans, e.g. \"security.protocol\": \"SASL_SSL\"."

static const char *const checkpoint_fields[] = {"interval", "retain", "between_cuts", "retain_cuts", NULL};

/*
 * Bounds that keep event-time arithmetic far from the ends of timestamptz
 * (294276 AD) and a record's work small: a duration is at most 100 years,
 * a sliding window puts a record in at most 1000 windows, and a generator
 * makes at most a billion events per second.
 */
#define SPEC_MAX_DURATION_DAYS 36525
#define SPEC_MAX_WINDOWS_PER_RECORD 1000
#define SPEC_MAX_RATE 1e9
static const char *const state_fields[] = {"backend", NULL};

static char *join_names(const char *const *names);
static char *join_choices(const SpecChoice *choices);
static bool next_member(JsonbIterator **it, char **name, JsonbValue *key, JsonbValue *value);
static char *child_path(const char *path, const char *key);
static void check_fields(JsonObject *obj, const char *const *allowed);
static bool get_value(JsonObject *obj, const char *key, JsonbValue *out);
static JsonObject get_object(JsonObject *obj, const char *key, bool *found);
static JsonObject required_object(JsonObject *obj, const char *key, const char *hint);
static JsonObject as_object(JsonbValue *v, const char *path);
static char *get_string(JsonObject *obj, const char *key, bool required, const char *hint);
static List *get_string_array(JsonObject *obj, const char *key, const char *hint);
static int64 get_integer(JsonObject *obj, const char *key, int64 dflt, int64 min, int64 max,
						 bool *is_null);
static double get_number(JsonObject *obj, const char *key, double dflt, bool *is_null);
static bool get_boolean(JsonObject *obj, const char *key, bool dflt);
static void check_topic_name(const char *path, const char *topic);
static int64 get_interval(JsonObject *obj, const char *key, int64 dflt, bool allow_zero);
static int	get_choice(JsonObject *obj, const char *key, const SpecChoice *choices, int dflt);
static const char *json_type_name(JsonbValue *v);
static void parse_watermark(JsonObject *top, JobSpec *spec);
static void parse_checkpoint(JsonObject *top, JobSpec *spec);
static void parse_state(JsonObject *top, JobSpec *spec);
static void parse_source(JsonObject *top, SourceSpec *source);
static void parse_kafka(JsonObject *obj, KafkaSourceSpec *kafka);
static void parse_generator(JsonObject *obj, GeneratorSpec *gen);
static void parse_pulsar(JsonObject *obj, PulsarSourceSpec *pulsar);
static void parse_pulsar_address(JsonObject *obj, char **service_url, char **topic, List **options);
static void parse_pulsar_sink(JsonObject *obj, KafkaSinkSpec *pulsar);
static void parse_sink_record(JsonObject *obj, KafkaSinkSpec *sink, const char *headers);
static List *parse_steps(JsonObject *top);
static StepSpec *parse_step(JsonbValue *v, const char *path);
static List *parse_named_exprs(JsonbValue *v, const char *path, bool aggregates);
static void parse_window(JsonObject *obj, WindowSpec *w);
static void parse_sinks(JsonObject *top, JobSpec *spec);
static void parse_sink(JsonObject obj, SinkSpec *sink);
static void parse_kafka_sink(JsonObject *obj, KafkaSinkSpec *kafka);
static List *parse_options(JsonObject *obj, const char *hint);

JobSpec *
spec_parse(Jsonb *jb)
{
	JobSpec    *spec = palloc0(sizeof(JobSpec));
	JsonObject	top;
	JsonbValue	v;

	if (!JB_ROOT_IS_OBJECT(jb))
		spec_error("$", ERRCODE_INVALID_PARAMETER_VALUE, "A job spec is a JSON object with at least \"source\" and \"sink\".",
				   "a job spec must be a JSON object");
	top.path = "";
	top.container = &jb->root;
	check_fields(&top, top_fields);

	if (get_value(&top, "version", &v) &&
		!(v.type == jbvNumeric && get_integer(&top, "version", 1, 1, 1, NULL) == 1))
		spec_error("version", ERRCODE_INVALID_PARAMETER_VALUE, "The only spec version is 1.", "unsupported spec version");

	parse_source(&top, &spec->source);
	spec->event_time = get_string(&top, "event_time", false,
								  "An SQL expression giving the record's timestamptz, such as \"(value->>'ts')::timestamptz\".");

	parse_watermark(&top, spec);
	spec->steps = parse_steps(&top);
	parse_sinks(&top, spec);
	parse_checkpoint(&top, spec);
	parse_state(&top, spec);
	spec->on_error = get_choice(&top, "on_error", spec_on_errors, ON_ERROR_DEAD_LETTER);

	spec->parallelism = get_integer(&top, "parallelism", 1, 1, MAILER_MAX_PARALLELISM, NULL);
	spec->key_groups = get_integer(&top, "key_groups", KEY_GROUPS_DEFAULT, 1, KEY_GROUPS_MAX, NULL);
	/* Every subtask owns at least one key group. */
	if (spec->key_groups < spec->parallelism)
		spec_error("parallelism", ERRCODE_INVALID_PARAMETER_VALUE,
				   psprintf("The job's key groups (\"key_groups\", fixed when it is created) bound its parallelism: use at most %d, or create a job with more key groups.",
							spec->key_groups),
				   "parallelism %d is more than the job's %d key groups", spec->parallelism, spec->key_groups);

	return spec;
}

void
spec_check_settings(const JobSpec *spec)
{
	if (spec->parallelism > mailer_max_parallelism_per_job)
		spec_error("parallelism", ERRCODE_INVALID_PARAMETER_VALUE,
				   psprintf("Use at most %d, or have a superuser raise mailer.max_parallelism_per_job (up to %d), for everyone or for the job's owner (ALTER ROLE ... SET).",
							mailer_max_parallelism_per_job, MAILER_MAX_PARALLELISM),
				   "parallelism %d is more than mailer.max_parallelism_per_job (%d)",
				   spec->parallelism, mailer_max_parallelism_per_job);

	/*
	 * Each subtask but the coordinator prepares its share of an epoch, and
	 * the coordinator commits them: a running job holds at most
	 * parallelism - 1 prepared transactions at a time.
	 */
	if (spec->parallelism > 1 && max_prepared_xacts < spec->parallelism - 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 spec_errmsg("parallelism", "parallelism %d needs max_prepared_transactions of at least %d, and it is %d",
							 spec->parallelism, spec->parallelism - 1, max_prepared_xacts),
				 errdetail("Every subtask of a parallel job but the first prepares its share of each checkpoint as a prepared transaction."),
				 errhint("Set max_prepared_transactions to at least the sum of parallelism - 1 over the parallel jobs that run at once, and restart the server; or use \"parallelism\": 1.")));
}

Jsonb *
spec_pin_defaults(Jsonb *doc, const JobSpec *spec)
{
	const char *path[] = {"key_groups"};

	return spec_jsonb_set(doc, path, lengthof(path), spec_jsonb_int(spec->key_groups), true);
}

static void
parse_watermark(JsonObject *top, JobSpec *spec)
{
	bool		found;
	JsonObject	wm = get_object(top, "watermark", &found);
	JsonbValue	v;

	spec->max_out_of_orderness_us = 0;
	spec->idle_timeout_us = -1;
	spec->max_drift_us = SPEC_DEFAULT_MAX_DRIFT_US;
	if (!found)
		return;
	check_fields(&wm, watermark_fields);
	spec->max_out_of_orderness_us = get_interval(&wm, "max_out_of_orderness", 0, true);
	spec->idle_timeout_us = get_interval(&wm, "idle_timeout", -1, false);
	if (!get_value(&wm, "max_drift", &v))
		return;
	/* null: partitions are read as they come, however far apart */
	if (v.type == jbvNull)
		spec->max_drift_us = -1;
	else if (v.type != jbvString)
		spec_error(child_path(wm.path, "max_drift"), ERRCODE_INVALID_PARAMETER_VALUE,
				   "A PostgreSQL interval such as \"30 seconds\", or null to read every partition as it comes.",
				   "expected an interval string or null, found %s", json_type_name(&v));
	else
		spec->max_drift_us = get_interval(&wm, "max_drift", SPEC_DEFAULT_MAX_DRIFT_US, false);
}

static void
parse_checkpoint(JsonObject *top, JobSpec *spec)
{
	bool		found;
	JsonObject	ck = get_object(top, "checkpoint", &found);

	spec->checkpoint_interval_us = USECS_PER_SEC;
	spec->checkpoint_retain = 10;
	spec->checkpoint_between_cuts = false;
	spec->checkpoint_retain_cuts = 100;
	if (!found)
		return;
	check_fields(&ck, checkpoint_fields);
	spec->checkpoint_interval_us = get_interval(&ck, "interval", USECS_PER_SEC, false);
	spec->checkpoint_retain = get_integer(&ck, "retain", 10, 1, 10000, NULL);
	spec->checkpoint_between_cuts = get_boolean(&ck, "between_cuts", false);
	spec->checkpoint_retain_cuts = get_integer(&ck, "retain_cuts", 100, 1, 10000, NULL);
	if (spec->checkpoint_interval_us < 10 * 1000)
		spec_error("checkpoint.interval", ERRCODE_INVALID_PARAMETER_VALUE, "Use an interval of at least 10 milliseconds.",
				   "checkpoint interval is too short");
}

static void
parse_state(JsonObject *top, JobSpec *spec)
{
	bool		found;
	JsonObject	st = get_object(top, "state", &found);

	spec->state_backend = STATE_ROCKSDB;
	if (!found)
		return;
	check_fields(&st, state_fields);
	spec->state_backend = get_choice(&st, "backend", spec_state_backends, STATE_ROCKSDB);
}

static void
parse_source(JsonObject *top, SourceSpec *source)
{
	JsonObject	obj = required_object(top, "source",
									  "An object such as {\"type\": \"generator\", \"events\": 1000}, {\"type\": \"kafka\", \"brokers\": \"localhost:9092\", \"topic\": \"orders\"} or {\"type\": \"pulsar\", \"service_url\": \"http://localhost:8080\", \"topic\": \"persistent://public/default/orders\"}.");

	source->type = get_choice(&obj, "type", spec_source_types, -1);
	source->format = get_choice(&obj, "format", spec_formats, FORMAT_JSON);
	if (source->type == SOURCE_KAFKA)
	{
		check_fields(&obj, kafka_fields);
		parse_kafka(&obj, &source->kafka);
	}
	else if (source->type == SOURCE_PULSAR)
	{
		check_fields(&obj, pulsar_fields);
		parse_pulsar(&obj, &source->pulsar);
	}
	else
	{
		check_fields(&obj, generator_fields);
		parse_generator(&obj, &source->generator);
	}
}

static void
parse_kafka(JsonObject *obj, KafkaSourceSpec *kafka)
{
	JsonbValue	v;

	kafka->brokers = get_string(obj, "brokers", true,
								"A bootstrap list such as \"localhost:9092\" or \"b1:9092,b2:9092\".");
	if (get_value(obj, "topic", &v) && get_value(obj, "topics", &v))
		spec_error(child_path(obj->path, "topics"), ERRCODE_INVALID_PARAMETER_VALUE, "Give either \"topic\" (one name) or \"topics\" (an array of names).",
				   "\"topic\" and \"topics\" are exclusive");
	if (get_value(obj, "topic", &v))
		kafka->topics = list_make1(get_string(obj, "topic", true, "A topic name."));
	else if (get_value(obj, "topics", &v))
		kafka->topics = get_string_array(obj, "topics", "An array of topic names, such as [\"orders\", \"refunds\"].");
	else
		spec_error(child_path(obj->path, "topic"), ERRCODE_INVALID_PARAMETER_VALUE, "Give \"topic\": \"name\" or \"topics\": [\"a\", \"b\"].",
				   "a Kafka source needs a topic");

	kafka->start_latest = get_choice(obj, "start", spec_kafka_starts, false);
	kafka->group_id = get_string(obj, "group_id", false, "A consumer group name.");
	kafka->barrier_group = get_string(obj, "barrier_group", false,
									  "The name of a barrier group whose cuts the job checkpoints at.");
	kafka->barrier_topic = get_string(obj, "barrier_topic", false,
									  "The topic the cuts are published to; leave it out for \"__barrier_state\".");
	if (kafka->barrier_topic && !kafka->barrier_group)
		spec_error(child_path(obj->path, "barrier_topic"), ERRCODE_INVALID_PARAMETER_VALUE,
				   "Give \"barrier_group\" too, or leave \"barrier_topic\" out.",
				   "\"barrier_topic\" applies to a source with a \"barrier_group\" only");
	if (kafka->barrier_topic)
		check_topic_name(child_path(obj->path, "barrier_topic"), kafka->barrier_topic);
	else if (kafka->barrier_group)
		kafka->barrier_topic = pstrdup("__barrier_state");

	kafka->options = parse_options(obj, KAFKA_OPTIONS_HINT);
}

/*
 * The host[:port] of an http:// service URL: a host name or IPv4 address
 * (letters, digits, '.', '-', '_') or a bracketed IPv6 address, and a port
 * from 1 to 65535 when given.  Checked here, so that a bad URL is refused
 * with its path rather than met by the worker, waiting forever.
 */
static void
check_service_host(const char *path, const char *url, const char *host, const char *hint)
{
	const char *colon;
	size_t		namelen;

	if (host[0] == '[')
	{
		const char *close = strchr(host, ']');

		namelen = close ? (size_t) (close - host) + 1 : 0;
		if (close == NULL || close == host + 1 ||
			strspn(host + 1, "0123456789abcdefABCDEF:.") != (size_t) (close - host - 1))
			namelen = 0;
	}
	else
		namelen = strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_");
	colon = host + namelen;
	if (namelen == 0 || (*colon != '\0' && *colon != ':'))
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint,
				   "\"%s\" is not a service URL: the host must be a name, an IPv4 address or a bracketed IPv6 address", url);
	if (*colon == ':')
	{
		const char *port = colon + 1;
		size_t		digits = strspn(port, "0123456789");

		if (digits == 0 || digits > 5 || port[digits] != '\0' || atoi(port) < 1 || atoi(port) > 65535)
			spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint,
					   "\"%s\" is not a service URL: the port must be a number from 1 to 65535", url);
	}
}

/*
 * A Pulsar source.  The service URL is the broker's web service, http:// or
 * https:// (its WebSocket API and REST admin API share it); the topic must be
 * persistent, since a non-persistent topic keeps no message a restart could
 * resume from.
 */
static void
parse_pulsar(JsonObject *obj, PulsarSourceSpec *pulsar)
{
	parse_pulsar_address(obj, &pulsar->service_url, &pulsar->topic, &pulsar->options);
	pulsar->start_latest = get_choice(obj, "start", spec_kafka_starts, false);
}

/*
 * A Pulsar source's or sink's service_url, topic and options: *topic gets
 * "tenant/namespace/topic", without "persistent://".  The options' names
 * and values are judged with the owner's privileges (pulsar_options.c).
 */
static void
parse_pulsar_address(JsonObject *obj, char **service_url, char **topic_out, List **options)
{
	const char *url_hint = "The broker's web service, such as \"http://127.0.0.1:8080\" or, with TLS, \"https://broker.example.com:8443\".";
	const char *topic_hint = "A persistent topic, \"persistent://tenant/namespace/topic\", of letters, digits, '.', '_', '-', '=' and ':'.";
	char	   *url = get_string(obj, "service_url", true, url_hint);
	char	   *topic = get_string(obj, "topic", true, topic_hint);
	const char *rest;
	const char *seg;
	int			nseg = 0;
	size_t		hostlen;
	size_t		schemelen;

	/* The admin API is HTTP: a WebSocket scheme would name half of what is asked. */
	if (strncmp(url, "http://", 7) == 0)
		schemelen = 7;
	else if (strncmp(url, "https://", 8) == 0)
		schemelen = 8;
	else
		spec_error(child_path(obj->path, "service_url"), ERRCODE_INVALID_PARAMETER_VALUE,
				   strncmp(url, "ws://", 5) == 0 || strncmp(url, "wss://", 6) == 0 ?
				   "Give the broker's web service as http://host:port, or https://host:port for TLS: mailer uses it for the admin API and the WebSocket API both." : url_hint,
				   "\"%s\" is not an http:// or https:// URL", url);
	hostlen = strcspn(url + schemelen, "/?#@ ");
	if (hostlen == 0 || strlen(url) > 512 ||
		(url[schemelen + hostlen] != '\0' && strcmp(url + schemelen + hostlen, "/") != 0))
		spec_error(child_path(obj->path, "service_url"), ERRCODE_INVALID_PARAMETER_VALUE, url_hint,
				   "\"%s\" is not a service URL: give %s://host:port and nothing after it", url,
				   schemelen == 8 ? "https" : "http");
	check_service_host(child_path(obj->path, "service_url"), url, pnstrdup(url + schemelen, hostlen), url_hint);
	*service_url = pnstrdup(url, schemelen + hostlen);
	*options = parse_options(obj, "Pulsar options take strings, such as \"auth.token\": \"eyJhbGciOi...\".");

	if (strncmp(topic, "persistent://", 13) != 0)
		spec_error(child_path(obj->path, "topic"), ERRCODE_INVALID_NAME, topic_hint,
				   "\"%s\" is not a persistent Pulsar topic", topic);
	rest = topic + 13;

	/*
	 * Three segments, each of the name's characters and none "." or "..":
	 * the topic goes into the admin API's paths, where a dot segment would
	 * ask the server for another path (README, "Security").
	 */
	for (seg = rest; nseg < 4; nseg++)
	{
		size_t		len = strcspn(seg, "/");
		bool		dots = (len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.');

		if (len == 0 || dots || strspn(seg, TOPIC_CHARS "=:") < len || strlen(rest) > 512)
			spec_error(child_path(obj->path, "topic"), ERRCODE_INVALID_NAME, topic_hint,
					   dots ? "\"%s\" is not a Pulsar topic name: a tenant, namespace or topic may not be \".\" or \"..\""
					   : "\"%s\" is not a Pulsar topic name", topic);
		if (seg[len] == '\0')
			break;
		seg += len + 1;
	}
	if (nseg != 2)
		spec_error(child_path(obj->path, "topic"), ERRCODE_INVALID_NAME, topic_hint,
				   "\"%s\" is not a Pulsar topic name: give tenant, namespace and topic", topic);
	/* Pulsar reserves the suffix "-partition-<digits>" alone for a partition. */
	{
		const char *suffix = strstr(seg, "-partition-");

		while (suffix != NULL && strstr(suffix + 1, "-partition-") != NULL)
			suffix = strstr(suffix + 1, "-partition-");
		if (suffix != NULL && suffix[11] != '\0' && strspn(suffix + 11, "0123456789") == strlen(suffix + 11))
			spec_error(child_path(obj->path, "topic"), ERRCODE_INVALID_NAME,
					   "Give the partitioned topic without its \"-partition-N\" suffix: a source reads every partition, a sink takes a topic as a whole.",
					   "\"%s\" names one partition of a topic", topic);
	}
	*topic_out = pstrdup(rest);
}

/* The options (DefElem, string values) of obj.options, or NIL; hint: what they take. */
static List *
parse_options(JsonObject *obj, const char *hint)
{
	bool		found;
	JsonObject	opts = get_object(obj, "options", &found);
	List	   *options = NIL;
	JsonbIterator *it;
	JsonbValue	key,
				val;
	char	   *name;

	if (!found)
		return NIL;
	it = JsonbIteratorInit(opts.container);
	while (next_member(&it, &name, &key, &val))
	{
		char	   *value;

		if (val.type == jbvString)
			value = pnstrdup(val.val.string.val, val.val.string.len);
		else if (val.type == jbvNumeric)
			value = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(val.val.numeric)));
		else if (val.type == jbvBool)
			value = pstrdup(val.val.boolean ? "true" : "false");
		else
			spec_error(child_path(opts.path, name), ERRCODE_INVALID_PARAMETER_VALUE, hint,
					   "expected a string, found %s", json_type_name(&val));
		options = lappend(options, makeDefElem(name, (Node *) makeString(value), -1));
	}
	return options;
}

static void
parse_generator(JsonObject *obj, GeneratorSpec *gen)
{
	bool		is_null;
	JsonbValue	v;

	gen->events = get_integer(obj, "events", -1, 0, PG_INT64_MAX, &is_null);
	if (is_null)
		gen->events = -1;
	gen->rate = get_number(obj, "rate", 0, &is_null);
	if (is_null)
		gen->rate = 0;
	else if (gen->rate <= 0)
		spec_error(child_path(obj->path, "rate"), ERRCODE_INVALID_PARAMETER_VALUE, "A positive number of events per second, or null for as fast as possible.",
				   "rate must be positive");
	else if (gen->rate > SPEC_MAX_RATE)
		spec_error(child_path(obj->path, "rate"), ERRCODE_INVALID_PARAMETER_VALUE, "At most 1000000000 events per second, or null for as fast as possible.",
				   "rate is more than 1000000000 events per second");
	gen->keys = get_integer(obj, "keys", 100, 1, PG_INT32_MAX, NULL);
	gen->seed = get_integer(obj, "seed", 1, PG_INT64_MIN, PG_INT64_MAX, NULL);
	gen->step_us = get_interval(obj, "step", 10 * 1000, true);
	gen->partitions = get_integer(obj, "partitions", 1, 1, 1024, NULL);
	gen->start_time = 1735689600LL * USECS_PER_SEC -
		((POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC);	/* 2025-01-01 UTC */
	if (get_value(obj, "start_time", &v))
	{
		char	   *path = child_path(obj->path, "start_time");
		char	   *s = get_string(obj, "start_time", true,
								   "A timestamptz such as \"2025-01-01 00:00:00+00\".");

		PG_TRY();
		{
			gen->start_time = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
																	  CStringGetDatum(s),
																	  ObjectIdGetDatum(InvalidOid),
																	  Int32GetDatum(-1)));
		}
		PG_CATCH();
		{
			FlushErrorState();
			spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, "A timestamptz such as \"2025-01-01 00:00:00+00\".",
					   "\"%s\" is not a timestamp", s);
		}
		PG_END_TRY();
	}
}

static List *
parse_steps(JsonObject *top)
{
	JsonbValue	v;
	List	   *steps = NIL;
	JsonbIterator *it;
	JsonbValue	elem;
	JsonbIteratorToken tok;
	int			i = 0;

	if (!get_value(top, "steps", &v))
		return NIL;
	if (v.type != jbvBinary || !JsonContainerIsArray(v.val.binary.data))
		spec_error("steps", ERRCODE_INVALID_PARAMETER_VALUE, "An array of steps, each an object with one key: filter, map, flat_map, key_by, window or aggregate.",
				   "expected an array, found %s", json_type_name(&v));
	it = JsonbIteratorInit(v.val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &elem, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		steps = lappend(steps, parse_step(&elem, psprintf("steps[%d]", i)));
		i++;
	}
	return steps;
}

static StepSpec *
parse_step(JsonbValue *v, const char *path)
{
	StepSpec   *step = palloc0(sizeof(StepSpec));
	JsonObject	obj = as_object(v, path);
	JsonbIterator *it = JsonbIteratorInit(obj.container);
	JsonbValue	key,
				val;
	int			nkeys = 0;
	char	   *kind = NULL;

	while (next_member(&it, &kind, &key, &val))
		nkeys++;
	if (nkeys != 1)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, "Each step is an object with exactly one key: filter, map, flat_map, key_by, window or aggregate.",
				   "a step must have exactly one key, found %d", nkeys);

	step->path = pstrdup(path);
	step->kind = -1;
	for (int k = 0; k < lengthof(step_kind_names); k++)
		if (strcmp(step_kind_names[k], kind) == 0)
			step->kind = k;
	if ((int) step->kind < 0)
		spec_error(child_path(path, kind), ERRCODE_INVALID_PARAMETER_VALUE, "A step is one of: filter, map, flat_map, key_by, window, aggregate.",
				   "unknown step \"%s\"", kind);

	switch (step->kind)
	{
		case STEP_FILTER:
		case STEP_FLAT_MAP:
			step->expr = get_string(&obj, kind, true,
									step->kind == STEP_FILTER ?
									"A boolean SQL expression over the record's fields, such as \"(value->>'amount')::numeric > 0\"." :
									"A set-returning SQL expression, such as \"jsonb_array_elements(value->'items')\".");
			break;
		case STEP_MAP:
		case STEP_KEY_BY:
		case STEP_AGGREGATE:
			(void) get_value(&obj, kind, &val);
			step->fields = parse_named_exprs(&val, child_path(path, kind),
											 step->kind == STEP_AGGREGATE);
			break;
		case STEP_WINDOW:
			{
				JsonObject	w = required_object(&obj, "window", NULL);

				check_fields(&w, window_fields);
				parse_window(&w, &step->window);
			}
			break;
	}
	return step;
}

static List *
parse_named_exprs(JsonbValue *v, const char *path, bool aggregates)
{
	JsonObject	obj = as_object(v, path);
	JsonbIterator *it = JsonbIteratorInit(obj.container);
	JsonbValue	key,
				val;
	char	   *name;
	List	   *result = NIL;

	while (next_member(&it, &name, &key, &val))
	{
		NamedExprSpec *ne = palloc0(sizeof(NamedExprSpec));

		ne->name = name;
		ne->path = child_path(path, ne->name);
		if (ne->name[0] == '\0')
			spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, "Field names are non-empty strings.", "empty field name");
		if (val.type != jbvString)
			spec_error(ne->path, ERRCODE_INVALID_PARAMETER_VALUE,
					   aggregates ? "An aggregate call as SQL text, such as count(*), sum(e), count(DISTINCT e) or string_agg(e, ',')." :
					   "An SQL expression over the record's fields, as a string.",
					   "expected a string, found %s", json_type_name(&val));
		ne->expr = pnstrdup(val.val.string.val, val.val.string.len);
		result = lappend(result, ne);
	}
	if (result == NIL)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, "Name at least one field: {\"name\": \"expression\"}.", "no fields");
	return result;
}

static void
parse_window(JsonObject *obj, WindowSpec *w)
{
	JsonbValue	v;

	w->type = get_choice(obj, "type", spec_window_types, -1);
	switch (w->type)
	{
		case WINDOW_TUMBLING:
			w->size_us = get_interval(obj, "size", -1, false);
			w->slide_us = w->size_us;
			break;
		case WINDOW_SLIDING:
			w->size_us = get_interval(obj, "size", -1, false);
			w->slide_us = get_interval(obj, "slide", -1, false);
			if (w->slide_us > w->size_us)
				spec_error(child_path(obj->path, "slide"), ERRCODE_INVALID_PARAMETER_VALUE, "A slide no longer than the window's size.",
						   "slide is longer than size");
			if (w->size_us % w->slide_us != 0)
				spec_error(child_path(obj->path, "slide"), ERRCODE_INVALID_PARAMETER_VALUE, "A slide that divides the size, such as size '1 minute' with slide '10 seconds'.",
						   "size is not a multiple of slide");
			if (w->size_us / w->slide_us > SPEC_MAX_WINDOWS_PER_RECORD)
				spec_error(child_path(obj->path, "slide"), ERRCODE_INVALID_PARAMETER_VALUE,
						   psprintf("A slide of at least 1/%d of the size: each record goes into size/slide windows.",
									SPEC_MAX_WINDOWS_PER_RECORD),
						   "size/slide is " INT64_FORMAT ", more than %d windows per record",
						   w->size_us / w->slide_us, SPEC_MAX_WINDOWS_PER_RECORD);
			break;
		case WINDOW_SESSION:
			w->gap_us = get_interval(obj, "gap", -1, false);
			break;
	}
	if (w->type != WINDOW_SESSION && get_value(obj, "gap", &v))
		spec_error(child_path(obj->path, "gap"), ERRCODE_INVALID_PARAMETER_VALUE, "\"gap\" belongs to session windows; tumbling takes \"size\", sliding \"size\" and \"slide\".",
				   "unexpected field for a %s window", spec_choice_name(spec_window_types, w->type));
	if (w->type != WINDOW_SLIDING && get_value(obj, "slide", &v))
		spec_error(child_path(obj->path, "slide"), ERRCODE_INVALID_PARAMETER_VALUE, "\"slide\" belongs to sliding windows.",
				   "unexpected field for a %s window", spec_choice_name(spec_window_types, w->type));
	if (w->type == WINDOW_SESSION && get_value(obj, "size", &v))
		spec_error(child_path(obj->path, "size"), ERRCODE_INVALID_PARAMETER_VALUE, "A session window takes \"gap\", not \"size\".",
				   "unexpected field for a session window");
	w->allowed_lateness_us = get_interval(obj, "allowed_lateness", 0, true);
	w->emit_update = get_choice(obj, "emit", spec_window_emits, false);
}

/*
 * "sink": one object; or "sinks": a table sink and a Kafka sink that
 * receive the same rows in the same epochs (the topic a changelog of the
 * table), or one sink as "sink" would be.
 */
void
spec_set_owner(JobSpec *spec, Oid owner)
{
	spec->source.kafka.owner = owner;
	spec->source.pulsar.owner = owner;
	spec->sink.kafka.owner = owner;
	if (spec->changelog)
		spec->changelog->kafka.owner = owner;
}

static void
parse_sinks(JsonObject *top, JobSpec *spec)
{
	JsonbValue	v;
	JsonbIterator *it;
	JsonbValue	elem;
	JsonbIteratorToken tok;
	SinkSpec	sinks[MAX_SINKS];
	int			n = 0;

	if (!get_value(top, "sinks", &v))
	{
		spec->sink.path = "sink";
		spec->sink.index = -1;
		parse_sink(required_object(top, "sink",
								   "An object such as {\"type\": \"table\", \"table\": \"order_totals\"}."),
				   &spec->sink);
		return;
	}
	if (get_value(top, "sink", &elem))
		spec_error("sinks", ERRCODE_INVALID_PARAMETER_VALUE, "Give either \"sink\" (one) or \"sinks\" (a table and a topic).",
				   "\"sink\" and \"sinks\" are exclusive");
	if (v.type != jbvBinary || !JsonContainerIsArray(v.val.binary.data))
		spec_error("sinks", ERRCODE_INVALID_PARAMETER_VALUE, SINKS_HINT, "expected an array, found %s", json_type_name(&v));
	it = JsonbIteratorInit(v.val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &elem, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		if (n == lengthof(sinks))
			spec_error(psprintf("sinks[%d]", n), ERRCODE_INVALID_PARAMETER_VALUE, SINKS_HINT, "more than two sinks");
		memset(&sinks[n], 0, sizeof(SinkSpec));
		sinks[n].path = psprintf("sinks[%d]", n);
		sinks[n].index = n;
		parse_sink(as_object(&elem, sinks[n].path), &sinks[n]);
		n++;
	}
	if (n == 0)
		spec_error("sinks", ERRCODE_INVALID_PARAMETER_VALUE, SINKS_HINT, "no sink");
	if (n == 2 && (sinks[0].type == SINK_TABLE) == (sinks[1].type == SINK_TABLE))
		spec_error("sinks[1].type", ERRCODE_FEATURE_NOT_SUPPORTED, SINKS_HINT, "%s",
				   sinks[1].type == SINK_TABLE ? "two sinks of type table" : "two topic sinks (Kafka or Pulsar)");
	/* The table first: it is the job's sink, the topic its changelog. */
	spec->sink = sinks[n == 2 && sinks[1].type == SINK_TABLE ? 1 : 0];
	if (n == 2)
	{
		spec->changelog = palloc(sizeof(SinkSpec));
		*spec->changelog = sinks[sinks[1].type != SINK_TABLE ? 1 : 0];
	}
}

static void
parse_sink(JsonObject obj, SinkSpec *sink)
{
	JsonbValue	v;

	sink->type = get_choice(&obj, "type", spec_sink_types, -1);
	if (sink->type == SINK_KAFKA)
	{
		check_fields(&obj, kafka_sink_fields);
		sink->kafka.path = sink->path;
		parse_kafka_sink(&obj, &sink->kafka);
		return;
	}
	if (sink->type == SINK_PULSAR)
	{
		check_fields(&obj, pulsar_sink_fields);
		sink->kafka.path = sink->path;
		parse_pulsar_sink(&obj, &sink->kafka);
		return;
	}
	check_fields(&obj, table_sink_fields);
	sink->table = get_string(&obj, "table", true, "A table name, optionally schema-qualified: \"public.totals\".");
	sink->mode = get_choice(&obj, "mode", spec_sink_modes, SINK_MODE_DEFAULT);
	if (get_value(&obj, "key", &v))
	{
		sink->key = get_string_array(&obj, "key", "An array of column names, such as [\"customer_id\", \"window_start\"].");
		if (sink->mode == SINK_MODE_APPEND)
			spec_error(child_path(obj.path, "key"), ERRCODE_INVALID_PARAMETER_VALUE, "\"key\" applies to \"mode\": \"upsert\" only.", "an append sink has no key");
	}
}

static void
parse_kafka_sink(JsonObject *obj, KafkaSinkSpec *kafka)
{
	kafka->brokers = get_string(obj, "brokers", true,
								"A bootstrap list such as \"localhost:9092\" or \"b1:9092,b2:9092\".");
	kafka->topic = get_string(obj, "topic", true, "The output topic's name; create the topic before the job.");
	check_topic_name(child_path(obj->path, "topic"), kafka->topic);
	parse_sink_record(obj, kafka, "headers");
	kafka->options = parse_options(obj, KAFKA_OPTIONS_HINT);
	kafka->exactly_once = get_choice(obj, "delivery", spec_sink_deliveries, true);
}

/*
 * A Pulsar sink: the Kafka sink's record (key, value, format), its headers
 * named "properties" as Pulsar calls them, the source's address checks.
 * Always exactly once: the deduplicating producer costs nothing more.
 */
static void
parse_pulsar_sink(JsonObject *obj, KafkaSinkSpec *pulsar)
{
	pulsar->pulsar = true;
	parse_pulsar_address(obj, &pulsar->service_url, &pulsar->topic, &pulsar->options);
	parse_sink_record(obj, pulsar, "properties");
	pulsar->exactly_once = true;
}

/* A topic sink's record: key, value, format, and headers under the name given. */
static void
parse_sink_record(JsonObject *obj, KafkaSinkSpec *sink, const char *headers)
{
	JsonbValue	v;

	sink->key = get_string(obj, "key", false,
						   "An SQL expression over the output fields, such as \"customer\"; leave it out for the default key.");
	sink->value = get_string(obj, "value", false,
							 "An SQL expression over the output fields; leave it out for the output row as a JSON object.");
	sink->format = get_choice(obj, "format", spec_formats, FORMAT_JSON);
	if (get_value(obj, headers, &v))
		sink->headers = parse_named_exprs(&v, child_path(obj->path, headers), false);
}

/*
 * Secrets
 */

bool
spec_option_is_secret(const char *name)
{
	/* SASL credentials too: those librdkafka itself redacts from its logs. */
	static const char *const markers[] = {
		"password", "secret", "key", "token", "credential",
		"sasl.username", "sasl.oauthbearer.config", NULL
	};
	char	   *lower = asc_tolower(name, strlen(name));

	for (int i = 0; markers[i]; i++)
		if (strstr(lower, markers[i]) != NULL)
			return true;
	return false;
}

/*
 * The secrets of every options object are kept in one flat object: a
 * source option under its own name (as since the first version), a sink
 * option under "sink.options.<name>", one of "sinks" under
 * "sinks.<i>.options.<name>".
 */
#define SINK_SECRET_PREFIX "sink.options."
#define SINKS_SECRET_PREFIX "sinks."

/* jsonb_set(doc, '{...,options,<name>}', value), name as secrets hold it */
static Jsonb *
set_option(Jsonb *doc, const char *name, Jsonb *value)
{
	const char *path[4] = {"source", "options", name};
	int			npath = 3;

	if (strncmp(name, SINK_SECRET_PREFIX, strlen(SINK_SECRET_PREFIX)) == 0)
	{
		path[0] = "sink";
		path[2] = name + strlen(SINK_SECRET_PREFIX);
	}
	else if (strncmp(name, SINKS_SECRET_PREFIX, strlen(SINKS_SECRET_PREFIX)) == 0 &&
			 isdigit((unsigned char) name[strlen(SINKS_SECRET_PREFIX)]) &&
			 strncmp(name + strlen(SINKS_SECRET_PREFIX) + 1, ".options.", 9) == 0)
	{
		path[0] = "sinks";
		path[1] = pnstrdup(name + strlen(SINKS_SECRET_PREFIX), 1);
		path[2] = "options";
		path[3] = name + strlen(SINKS_SECRET_PREFIX) + 1 + 9;
		npath = 4;
	}
	return spec_jsonb_set(doc, path, npath, value, false);
}

Jsonb *
spec_jsonb_set(Jsonb *doc, const char *const *path, int npath, Jsonb *value, bool create)
{
	Datum	   *elems = palloc(sizeof(Datum) * npath);

	for (int i = 0; i < npath; i++)
		elems[i] = CStringGetTextDatum(path[i]);
	return DatumGetJsonbP(DirectFunctionCall4(jsonb_set, JsonbPGetDatum(doc),
											  PointerGetDatum(construct_array(elems, npath, TEXTOID, -1, false,
																			  TYPALIGN_INT)),
											  JsonbPGetDatum(value), BoolGetDatum(create)));
}

Jsonb *
spec_jsonb_string(const char *s)
{
	JsonbValue	v;

	return JsonbValueToJsonb(jsonb_string_value(&v, s, strlen(s)));
}

Jsonb *
spec_jsonb_int(int64 n)
{
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(psprintf(INT64_FORMAT, n))));
}

/* The options object of an object, or NULL. */
static JsonbContainer *
options_in(JsonbValue *obj)
{
	JsonbValue *options;

	if (obj == NULL || obj->type != jbvBinary || !JsonContainerIsObject(obj->val.binary.data))
		return NULL;
	options = getKeyJsonValueFromContainer(obj->val.binary.data, "options", 7, NULL);
	if (options == NULL || options->type != jbvBinary || !JsonContainerIsObject(options->val.binary.data))
		return NULL;
	return options->val.binary.data;
}

/*
 * The options object of the spec's part (0 source, 1 sink, 2.. the sinks
 * array's elements), or NULL; *prefix: how secrets name its options.
 */
static JsonbContainer *
options_of(Jsonb *spec, int part, const char **prefix)
{
	JsonbValue *sinks;

	if (!JB_ROOT_IS_OBJECT(spec))
		return NULL;
	if (part < 2)
	{
		*prefix = part == 0 ? "" : SINK_SECRET_PREFIX;
		return options_in(getKeyJsonValueFromContainer(&spec->root, part == 0 ? "source" : "sink",
													   part == 0 ? 6 : 4, NULL));
	}
	*prefix = psprintf(SINKS_SECRET_PREFIX "%d.options.", part - 2);
	sinks = getKeyJsonValueFromContainer(&spec->root, "sinks", 5, NULL);
	if (sinks == NULL || sinks->type != jbvBinary || !JsonContainerIsArray(sinks->val.binary.data))
		return NULL;
	return options_in(getIthJsonbValueFromContainer(sinks->val.binary.data, part - 2));
}

Jsonb *
spec_redact(Jsonb *spec, Jsonb **secrets)
{
	JsonbValue	v;
	JsonbParseState *state = NULL;
	bool		any = false;
	Jsonb	   *result = spec;

	*secrets = NULL;
	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int p = 0; p < 2 + MAX_SINKS; p++)
	{
		const char *prefix;
		JsonbContainer *options = options_of(spec, p, &prefix);
		JsonbIterator *it;
		JsonbValue	key;
		char	   *name;

		if (options == NULL)
			continue;
		it = JsonbIteratorInit(options);
		while (next_member(&it, &name, &key, &v))
		{
			char	   *stored_name = psprintf("%s%s", prefix, name);

			if (!spec_option_is_secret(name))
				continue;
			key.val.string.val = stored_name;
			key.val.string.len = strlen(stored_name);
			pushJsonbValue(&state, WJB_KEY, &key);
			pushJsonbValue(&state, WJB_VALUE, &v);
			result = set_option(result, stored_name, spec_jsonb_string("********"));
			any = true;
		}
	}
	v = *pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	if (any)
		*secrets = JsonbValueToJsonb(&v);
	return result;
}

Jsonb *
spec_unredact(Jsonb *redacted, Jsonb *secrets)
{
	JsonbIterator *it;
	JsonbValue	key,
				v;
	char	   *name;
	Jsonb	   *result = redacted;

	if (secrets == NULL)
		return redacted;
	it = JsonbIteratorInit(&secrets->root);
	while (next_member(&it, &name, &key, &v))
		result = set_option(result, name, JsonbValueToJsonb(&v));
	return result;
}

Jsonb *
spec_keep_masked(Jsonb *doc, Jsonb *old_doc)
{
	Jsonb	   *secrets;
	Jsonb	   *old_secrets;
	JsonbIterator *it;
	JsonbValue	key,
				v;
	char	   *name;
	Jsonb	   *result = doc;

	(void) spec_redact(doc, &secrets);
	(void) spec_redact(old_doc, &old_secrets);
	if (secrets == NULL || old_secrets == NULL)
		return doc;
	it = JsonbIteratorInit(&secrets->root);
	while (next_member(&it, &name, &key, &v))
	{
		JsonbValue	old;

		if (v.type == jbvString && v.val.string.len == strlen(SPEC_SECRET_MASK) &&
			memcmp(v.val.string.val, SPEC_SECRET_MASK, v.val.string.len) == 0 &&
			getKeyJsonValueFromContainer(&old_secrets->root, key.val.string.val, key.val.string.len, &old))
			result = set_option(result, name, JsonbValueToJsonb(&old));
	}
	return result;
}

static char *first_difference(JsonbValue *a, JsonbValue *b, const char *path);

/* A scalar or container value's equality, as jsonb's = operator judges it. */
static bool
same_value(JsonbValue *a, JsonbValue *b)
{
	Jsonb	   *ja = JsonbValueToJsonb(a);
	Jsonb	   *jb = JsonbValueToJsonb(b);

	return compareJsonbContainers(&ja->root, &jb->root) == 0;
}

static char *
object_difference(JsonbContainer *a, JsonbContainer *b, const char *path)
{
	JsonbIterator *it = JsonbIteratorInit(a);
	JsonbValue	key,
				v,
				other;
	char	   *name;

	while (next_member(&it, &name, &key, &v))
	{
		char	   *diff;

		if (!getKeyJsonValueFromContainer(b, key.val.string.val, key.val.string.len, &other))
			return child_path(path, name);
		diff = first_difference(&v, &other, child_path(path, name));
		if (diff)
			return diff;
	}
	/* What b has that a has not. */
	it = JsonbIteratorInit(b);
	while (next_member(&it, &name, &key, &v))
		if (!getKeyJsonValueFromContainer(a, key.val.string.val, key.val.string.len, &other))
			return child_path(path, name);
	return NULL;
}

static char *
array_difference(JsonbContainer *a, JsonbContainer *b, const char *path)
{
	int			na = JsonContainerSize(a);
	int			nb = JsonContainerSize(b);

	for (int i = 0; i < Min(na, nb); i++)
	{
		char	   *diff = first_difference(getIthJsonbValueFromContainer(a, i),
										   getIthJsonbValueFromContainer(b, i),
										   psprintf("%s[%d]", path, i));

		if (diff)
			return diff;
	}
	return na == nb ? NULL : psprintf("%s[%d]", path, Min(na, nb));
}

static char *
first_difference(JsonbValue *a, JsonbValue *b, const char *path)
{
	if (a->type == jbvBinary && b->type == jbvBinary)
	{
		JsonbContainer *ca = a->val.binary.data;
		JsonbContainer *cb = b->val.binary.data;

		if (JsonContainerIsObject(ca) && JsonContainerIsObject(cb))
			return object_difference(ca, cb, path);
		if (JsonContainerIsArray(ca) && JsonContainerIsArray(cb) &&
			!JsonContainerIsScalar(ca) && !JsonContainerIsScalar(cb))
			return array_difference(ca, cb, path);
	}
	return same_value(a, b) ? NULL : pstrdup(path[0] ? path : "$");
}

char *
spec_first_difference(Jsonb *a, Jsonb *b)
{
	JsonbValue	va,
				vb;

	va.type = vb.type = jbvBinary;
	va.val.binary.data = &a->root;
	va.val.binary.len = VARSIZE(a) - VARHDRSZ;
	vb.val.binary.data = &b->root;
	vb.val.binary.len = VARSIZE(b) - VARHDRSZ;
	return first_difference(&va, &vb, "");
}

/*
 * Reading JSON with paths
 */

static char *
child_path(const char *path, const char *key)
{
	return path[0] ? psprintf("%s.%s", path, key) : pstrdup(key);
}

static char *
join_names(const char *const *names)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; names[i]; i++)
		appendStringInfo(&buf, "%s%s", i ? ", " : "", names[i]);
	return buf.data;
}

static char *
join_choices(const SpecChoice *choices)
{
	int			n = 0;
	const char **names;

	while (choices[n].name)
		n++;
	names = palloc(sizeof(char *) * (n + 1));
	for (int i = 0; i <= n; i++)
		names[i] = choices[i].name;
	return join_names(names);
}

/*
 * The next member of the object that it walks, false past the last; *name
 * is a copy of its key.
 */
static bool
next_member(JsonbIterator **it, char **name, JsonbValue *key, JsonbValue *value)
{
	JsonbIteratorToken tok;

	while ((tok = JsonbIteratorNext(it, key, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		*name = pnstrdup(key->val.string.val, key->val.string.len);
		(void) JsonbIteratorNext(it, value, true);
		return true;
	}
	return false;
}

static const char *
json_type_name(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "a string";
		case jbvNumeric:
			return "a number";
		case jbvBool:
			return "a boolean";
		case jbvBinary:
			return JsonContainerIsArray(v->val.binary.data) ? "an array" : "an object";
		default:
			return "a JSON value";
	}
}

static void
check_fields(JsonObject *obj, const char *const *allowed)
{
	JsonbIterator *it = JsonbIteratorInit(obj->container);
	JsonbValue	key,
				val;
	char	   *name;

	while (next_member(&it, &name, &key, &val))
	{
		bool		ok = false;

		for (int i = 0; allowed[i]; i++)
			if (strcmp(allowed[i], name) == 0)
				ok = true;
		if (!ok)
			spec_error(child_path(obj->path, name), ERRCODE_INVALID_PARAMETER_VALUE,
					   psprintf("Fields accepted %s%s: %s.", obj->path[0] ? "in " : "at the top level",
								obj->path, join_names(allowed)),
					   "unknown field \"%s\"", name);
	}
}

static bool
get_value(JsonObject *obj, const char *key, JsonbValue *out)
{
	return getKeyJsonValueFromContainer(obj->container, key, strlen(key), out) != NULL;
}

static JsonObject
as_object(JsonbValue *v, const char *path)
{
	JsonObject	obj;

	if (v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, "A JSON object.", "expected an object, found %s", json_type_name(v));
	obj.path = path;
	obj.container = v->val.binary.data;
	return obj;
}

/* An optional object: *found says whether it is there. */
static JsonObject
get_object(JsonObject *obj, const char *key, bool *found)
{
	JsonbValue	v;
	JsonObject	result = {NULL, NULL};

	*found = get_value(obj, key, &v);
	if (!*found)
		return result;
	return as_object(&v, child_path(obj->path, key));
}

static JsonObject
required_object(JsonObject *obj, const char *key, const char *hint)
{
	JsonbValue	v;

	if (!get_value(obj, key, &v))
		spec_error(child_path(obj->path, key), ERRCODE_INVALID_PARAMETER_VALUE, hint,
				   "required field is missing");
	return as_object(&v, child_path(obj->path, key));
}

static char *
get_string(JsonObject *obj, const char *key, bool required, const char *hint)
{
	JsonbValue	v;

	if (!get_value(obj, key, &v))
	{
		if (required)
			spec_error(child_path(obj->path, key), ERRCODE_INVALID_PARAMETER_VALUE, hint, "required field is missing");
		return NULL;
	}
	if (v.type != jbvString)
		spec_error(child_path(obj->path, key), ERRCODE_INVALID_PARAMETER_VALUE, hint, "expected a string, found %s", json_type_name(&v));
	if (v.val.string.len == 0)
		spec_error(child_path(obj->path, key), ERRCODE_INVALID_PARAMETER_VALUE, hint, "empty string");
	return pnstrdup(v.val.string.val, v.val.string.len);
}

/* A non-empty array of non-empty strings, as a List of char *. */
static List *
get_string_array(JsonObject *obj, const char *key, const char *hint)
{
	JsonbValue	v;
	char	   *path = child_path(obj->path, key);
	JsonbIterator *it;
	JsonbValue	elem;
	JsonbIteratorToken tok;
	List	   *result = NIL;
	int			i = 0;

	if (!get_value(obj, key, &v))
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "required field is missing");
	if (v.type != jbvBinary || !JsonContainerIsArray(v.val.binary.data))
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "expected an array, found %s", json_type_name(&v));
	it = JsonbIteratorInit(v.val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &elem, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		if (elem.type != jbvString || elem.val.string.len == 0)
			spec_error(psprintf("%s[%d]", path, i), ERRCODE_INVALID_PARAMETER_VALUE, hint,
					   "expected a non-empty string, found %s", json_type_name(&elem));
		result = lappend(result, pnstrdup(elem.val.string.val, elem.val.string.len));
		i++;
	}
	if (result == NIL)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "empty array");
	return result;
}

static int64
get_integer(JsonObject *obj, const char *key, int64 dflt, int64 min, int64 max, bool *is_null)
{
	JsonbValue	v;
	char	   *path = child_path(obj->path, key);
	char	   *hint = psprintf("An integer from " INT64_FORMAT " to " INT64_FORMAT "%s.",
							   min, max, is_null ? ", or null" : "");
	Numeric		num;
	int64		result;

	if (is_null)
		*is_null = false;
	if (!get_value(obj, key, &v))
	{
		if (dflt == -1 && is_null)
			*is_null = true;
		return dflt;
	}
	if (v.type == jbvNull && is_null)
	{
		*is_null = true;
		return dflt;
	}
	if (v.type != jbvNumeric)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "expected an integer, found %s", json_type_name(&v));
	num = v.val.numeric;
	if (!DatumGetBool(DirectFunctionCall2(numeric_eq, NumericGetDatum(num),
										  DirectFunctionCall2(numeric_trunc, NumericGetDatum(num),
															  Int32GetDatum(0)))))
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "expected an integer, found a fraction");
	PG_TRY();
	{
		result = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(num)));
	}
	PG_CATCH();
	{
		FlushErrorState();
		result = PG_INT64_MAX;
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "integer out of range");
	}
	PG_END_TRY();
	if (result < min || result > max)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, INT64_FORMAT " is out of range", result);
	return result;
}

static bool
get_boolean(JsonObject *obj, const char *key, bool dflt)
{
	JsonbValue	v;

	if (!get_value(obj, key, &v))
		return dflt;
	if (v.type != jbvBool)
		spec_error(child_path(obj->path, key), ERRCODE_INVALID_PARAMETER_VALUE, "true or false.",
				   "expected a boolean, found %s", json_type_name(&v));
	return v.val.boolean;
}

static void
check_topic_name(const char *path, const char *topic)
{
	if (strlen(topic) > 249 || strspn(topic, TOPIC_CHARS) != strlen(topic) ||
		strcmp(topic, ".") == 0 || strcmp(topic, "..") == 0)
		spec_error(path, ERRCODE_INVALID_NAME,
				   "A Kafka topic name: 1 to 249 letters, digits, '.', '_' or '-', and not \".\" or \"..\".",
				   "\"%s\" is not a Kafka topic name", topic);
}

static double
get_number(JsonObject *obj, const char *key, double dflt, bool *is_null)
{
	JsonbValue	v;
	double		result;

	*is_null = false;
	if (!get_value(obj, key, &v))
	{
		*is_null = true;
		return dflt;
	}
	if (v.type == jbvNull)
	{
		*is_null = true;
		return dflt;
	}
	if (v.type != jbvNumeric)
		spec_error(child_path(obj->path, key), ERRCODE_INVALID_PARAMETER_VALUE, "A number, or null.", "expected a number, found %s",
				   json_type_name(&v));
	PG_TRY();
	{
		result = DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v.val.numeric)));
	}
	PG_CATCH();
	{
		FlushErrorState();
		result = 0;
		spec_error(child_path(obj->path, key), ERRCODE_INVALID_PARAMETER_VALUE, "A number within the range of double precision, or null.",
				   "number out of range");
	}
	PG_END_TRY();
	return result;
}

/*
 * An interval in microseconds.  Months and years are refused: their length
 * varies, and windows and timeouts need a fixed one.  dflt -1 with the field
 * missing means required.
 */
static int64
get_interval(JsonObject *obj, const char *key, int64 dflt, bool allow_zero)
{
	JsonbValue	v;
	char	   *path = child_path(obj->path, key);
	const char *hint = "A PostgreSQL interval such as \"5 seconds\", \"1 minute\" or \"250 milliseconds\".";
	char	   *s;
	Interval   *iv = NULL;
	int64		us;

	if (!get_value(obj, key, &v))
	{
		if (dflt == -1 && strcmp(key, "idle_timeout") != 0)
			spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "required field is missing");
		return dflt;
	}
	if (v.type != jbvString)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "expected an interval string, found %s", json_type_name(&v));
	s = pnstrdup(v.val.string.val, v.val.string.len);
	PG_TRY();
	{
		iv = DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(s),
												   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));
	}
	PG_CATCH();
	{
		FlushErrorState();
		iv = NULL;
	}
	PG_END_TRY();
	if (iv == NULL)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "\"%s\" is not an interval", s);
	if (iv->month != 0)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, "Use days, hours, minutes or seconds: months and years have no fixed length.",
				   "\"%s\" has months or years", s);
	if (pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &us) ||
		pg_add_s64_overflow(us, iv->time, &us))
		us = iv->day < 0 ? -1 : PG_INT64_MAX;
	if (us > SPEC_MAX_DURATION_DAYS * USECS_PER_DAY)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, "Use at most 36525 days (100 years).", "\"%s\" is longer than 100 years", s);
	if (us < 0 || (us == 0 && !allow_zero))
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "\"%s\" must be %s", s, allow_zero ? "zero or positive" : "positive");
	return us;
}

static int
get_choice(JsonObject *obj, const char *key, const SpecChoice *choices, int dflt)
{
	JsonbValue	v;
	char	   *path = child_path(obj->path, key);
	char	   *hint = psprintf("One of: %s.", join_choices(choices));
	char	   *s;

	if (!get_value(obj, key, &v))
	{
		if (dflt < 0)
			spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "required field is missing");
		return dflt;
	}
	if (v.type != jbvString)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "expected a string, found %s", json_type_name(&v));
	s = pnstrdup(v.val.string.val, v.val.string.len);
	for (int i = 0; choices[i].name; i++)
		if (strcmp(choices[i].name, s) == 0)
			return choices[i].value;
	spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE, hint, "unknown value \"%s\"", s);
}

const char *
spec_choice_name(const SpecChoice *choices, int value)
{
	for (int i = 0; choices[i].name; i++)
		if (choices[i].value == value)
			return choices[i].name;
	elog(ERROR, "no name for spec choice %d", value);
}
