/*
 * spec.h
 *		The job spec parsed from its JSON document.
 *
 * Parsing checks the document's shape strictly: unknown fields, wrong types
 * and bad values are errors naming the JSON path.  Expressions are kept as
 * text here; plan.c compiles them against the record's fields.
 *
 * Design: docs/ARCHITECTURE.md, "The job spec".
 */
#ifndef SPEC_H
#define SPEC_H

#include "nodes/pg_list.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

typedef enum SourceType
{
	SOURCE_KAFKA,
	SOURCE_GENERATOR,
	SOURCE_PULSAR
} SourceType;

typedef enum ValueFormat
{
	FORMAT_JSON,				/* jsonb */
	FORMAT_TEXT,				/* text, must be valid in the database encoding */
	FORMAT_BYTES				/* bytea */
} ValueFormat;

typedef struct KafkaSourceSpec
{
	char	   *brokers;
	List	   *topics;			/* of char * */
	bool		start_latest;
	char	   *group_id;
	List	   *options;		/* of DefElem: librdkafka property, string value */
	Oid			owner;			/* whose privileges judge options: set by the caller */
	char	   *barrier_group;	/* checkpoint at this group's barrier cuts; NULL: none */
	char	   *barrier_topic;	/* where the cuts are published: __barrier_state */
} KafkaSourceSpec;

/* A Pulsar topic, read one partition at a time over the WebSocket API. */
typedef struct PulsarSourceSpec
{
	char	   *service_url;	/* http(s)://host:port, the broker's web service */
	char	   *topic;			/* tenant/namespace/topic, without persistent:// */
	bool		start_latest;
	List	   *options;		/* of DefElem: plan/pulsar_options.h's names, string values */
	Oid			owner;			/* whose privileges judge options: set by the caller */
} PulsarSourceSpec;

typedef struct GeneratorSpec
{
	int64		events;			/* -1: unbounded */
	double		rate;			/* events per second; 0: as fast as possible */
	int32		keys;
	int64		seed;
	TimestampTz start_time;
	int64		step_us;		/* event time between consecutive events */
	int32		partitions;		/* event n belongs to partition n % partitions */
} GeneratorSpec;

typedef struct SourceSpec
{
	SourceType	type;
	ValueFormat format;
	KafkaSourceSpec kafka;
	GeneratorSpec generator;
	PulsarSourceSpec pulsar;
} SourceSpec;

typedef enum StepKind
{
	STEP_FILTER,
	STEP_MAP,
	STEP_FLAT_MAP,
	STEP_KEY_BY,
	STEP_WINDOW,
	STEP_AGGREGATE
} StepKind;

/* Indexed by StepKind; the spec names a step by its one key. */
extern const char *const step_kind_names[];

/* A named expression: a map or key_by field, or an aggregate. */
typedef struct NamedExprSpec
{
	char	   *name;
	char	   *expr;
	char	   *path;			/* JSON path of the expression, for errors */
} NamedExprSpec;

typedef enum WindowType
{
	WINDOW_TUMBLING,
	WINDOW_SLIDING,
	WINDOW_SESSION
} WindowType;

typedef struct WindowSpec
{
	WindowType	type;
	int64		size_us;		/* tumbling, sliding */
	int64		slide_us;		/* sliding */
	int64		gap_us;			/* session */
	int64		allowed_lateness_us;
	bool		emit_update;	/* false: emit final */
} WindowSpec;

typedef struct StepSpec
{
	StepKind	kind;
	char	   *path;			/* "steps[2]" */
	char	   *expr;			/* filter, flat_map */
	List	   *fields;			/* map, key_by, aggregate: of NamedExprSpec */
	WindowSpec	window;			/* window */
} StepSpec;

typedef enum SinkType
{
	SINK_TABLE,
	SINK_KAFKA,
	SINK_PULSAR					/* a KafkaSinkSpec with pulsar set: the same outbox */
} SinkType;

typedef enum SinkMode
{
	SINK_MODE_DEFAULT,			/* upsert when the table has a primary key */
	SINK_MODE_UPSERT,
	SINK_MODE_APPEND
} SinkMode;

/*
 * A Kafka or Pulsar sink: one output topic, records made by expressions
 * over the output.  Both share the record, the outbox and its planning
 * (docs/ARCHITECTURE.md, "The Pulsar sink"); a Pulsar sink has service_url
 * instead of brokers, properties as its headers, Pulsar's options
 * (plan/pulsar_options.h) rather than librdkafka's, and is always exactly
 * once.
 */
typedef struct KafkaSinkSpec
{
	const char *path;			/* "sink" or "sinks[i]", for errors */
	bool		pulsar;			/* a Pulsar sink */
	char	   *service_url;	/* Pulsar: http(s)://host:port */
	char	   *brokers;
	char	   *topic;			/* Pulsar: tenant/namespace/topic */
	char	   *key;			/* expression; NULL: the default (see plan_kafka_sink) */
	char	   *value;			/* expression; NULL: the output row as a JSON object */
	ValueFormat format;			/* how key and value expressions become bytes */
	List	   *headers;		/* of NamedExprSpec: header name, value expression */
	List	   *options;		/* of DefElem: librdkafka producer property (Pulsar: pulsar_options.h), string value */
	bool		exactly_once;	/* delivery; false: at least once */
	Oid			owner;			/* whose privileges judge options: set by the caller */
} KafkaSinkSpec;

typedef struct SinkSpec
{
	SinkType	type;
	const char *path;			/* "sink" or "sinks[i]", for errors */
	int			index;			/* i of "sinks[i]"; -1 for "sink" */
	/* table */
	char	   *table;			/* as written; resolved by plan.c */
	SinkMode	mode;
	List	   *key;			/* of char *: conflict columns; NIL: primary key */
	/* kafka */
	KafkaSinkSpec kafka;
} SinkSpec;

typedef enum StateBackendType
{
	STATE_ROCKSDB,
	STATE_MEMORY
} StateBackendType;

typedef enum OnError
{
	ON_ERROR_DEAD_LETTER,
	ON_ERROR_SKIP,
	ON_ERROR_FAIL
} OnError;

/*
 * watermark.max_drift when the spec says nothing: how far a partition's
 * watermark may run ahead of the slowest one still catching up before it
 * is paused (docs/ARCHITECTURE.md, "Watermark alignment").
 */
#define SPEC_DEFAULT_MAX_DRIFT_US (10 * USECS_PER_SEC)

typedef struct JobSpec
{
	SourceSpec	source;
	char	   *event_time;		/* expression, NULL: the message timestamp */
	int64		max_out_of_orderness_us;
	int64		idle_timeout_us;	/* -1: none */
	int64		max_drift_us;	/* watermark alignment of a windowed job; -1: none */
	List	   *steps;			/* of StepSpec */
	SinkSpec	sink;			/* "sink", or of "sinks" the table (or the one) */
	SinkSpec   *changelog;		/* "sinks": the Kafka sink beside the table, or NULL */
	int64		checkpoint_interval_us;
	int32		checkpoint_retain;
	bool		checkpoint_between_cuts;	/* a barrier job also checkpoints per interval */
	int32		checkpoint_retain_cuts; /* cut checkpoints kept apart from the others */
	StateBackendType state_backend;
	OnError		on_error;
	int32		parallelism;	/* subtasks, 1..MAILER_MAX_PARALLELISM */
	int32		key_groups;		/* fixed for the job's life: pinned at create_job */
} JobSpec;

/* Parse and check a spec; ERROR (with the JSON path) when it is invalid. */
extern JobSpec *spec_parse(Jsonb *spec);

/* Whose privileges judge the Kafka options of the spec's source and sinks. */
extern void spec_set_owner(JobSpec *spec, Oid owner);

/*
 * ERROR unless the server's settings let a job of this spec be created (or
 * altered to it) now: mailer.max_parallelism_per_job, and enough
 * max_prepared_transactions for a parallel job's checkpoints.  Not part of
 * spec_parse: a job keeps running when a setting is lowered after it was
 * created.
 */
extern void spec_check_settings(const JobSpec *spec);

/*
 * doc with the defaults that must never change for a job written in:
 * key_groups (a later default must not move an existing job's state).
 */
extern Jsonb *spec_pin_defaults(Jsonb *doc, const JobSpec *spec);

/*
 * The JSON path of the first place where a and b differ (in jsonb's order
 * of keys), or NULL when they are equal.
 */
extern char *spec_first_difference(Jsonb *a, Jsonb *b);

/*
 * doc with each secret option whose value is the mask "********" given
 * the value old_doc (a spec with its secrets) has for it: a spec read from
 * mailer.jobs can be given back as it is.
 */
extern Jsonb *spec_keep_masked(Jsonb *doc, Jsonb *old_doc);

/* The mask that stands for a secret's value in a stored spec. */
#define SPEC_SECRET_MASK "********"

/*
 * The spec with secret values replaced by "********", and the secrets found
 * as a jsonb object {"source.options.<name>": "value"} (NULL when none).
 */
extern Jsonb *spec_redact(Jsonb *spec, Jsonb **secrets);

/* The inverse of spec_redact: put the secrets back. */
extern Jsonb *spec_unredact(Jsonb *redacted, Jsonb *secrets);

/* doc with the value at path (jsonb_set); create: as jsonb_set's create_missing. */
extern Jsonb *spec_jsonb_set(Jsonb *doc, const char *const *path, int npath, Jsonb *value,
							 bool create);

/* A jsonb string, as jsonb_in reads a JSON string literal. */
extern Jsonb *spec_jsonb_string(const char *s);

/* A jsonb number. */
extern Jsonb *spec_jsonb_int(int64 n);

/* True for an option name whose value must never be shown. */
extern bool spec_option_is_secret(const char *name);

/*
 * A value a spec field may name, and what it stands for.  One table per
 * choice, ending with a NULL name, in the order the hint lists them: the
 * parser reads the spec through it and describe_job prints through it.
 */
typedef struct SpecChoice
{
	const char *name;
	int			value;
} SpecChoice;

extern const SpecChoice spec_source_types[];	/* SourceType */
extern const SpecChoice spec_formats[]; /* ValueFormat */
extern const SpecChoice spec_kafka_starts[];	/* KafkaSourceSpec.start_latest */
extern const SpecChoice spec_window_types[];	/* WindowType */
extern const SpecChoice spec_window_emits[];	/* WindowSpec.emit_update */
extern const SpecChoice spec_sink_types[];	/* SinkType */
extern const SpecChoice spec_sink_modes[];	/* SinkMode but SINK_MODE_DEFAULT */
extern const SpecChoice spec_sink_deliveries[];	/* KafkaSinkSpec.exactly_once */
extern const SpecChoice spec_state_backends[];	/* StateBackendType */
extern const SpecChoice spec_on_errors[];	/* OnError */

/* The name of value in choices. */
extern const char *spec_choice_name(const SpecChoice *choices, int value);

#endif							/* SPEC_H */
