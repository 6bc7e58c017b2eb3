/*
 * describe.c
 *		The plan as a person reads it (describe_job), section by section in
 *		the order a record goes through them: source, event time, stateless
 *		stage, keyed stage, sink, checkpoints and error policy.
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "plan/aggregate_call.h"
#include "plan/json_fields.h"
#include "plan/plan.h"

static void describe_source(StringInfo buf, JobPlan *plan);
static void describe_kafka(StringInfo buf, KafkaSourceSpec *k);
static void describe_options(StringInfo buf, List *options);
static void describe_generator(StringInfo buf, GeneratorSpec *g);
static void describe_record(StringInfo buf, JobPlan *plan);
static void describe_event_time(StringInfo buf, JobPlan *plan);
static void describe_stateless(StringInfo buf, JobPlan *plan);
static void describe_keyed(StringInfo buf, JobPlan *plan);
static void describe_window(StringInfo buf, WindowSpec *w);
static void describe_sink(StringInfo buf, JobPlan *plan);
static char *format_duration(int64 us);
static const char *field_desc(RecordSchema *schema, int slot);

char *
plan_describe(JobPlan *plan)
{
	JobSpec    *spec = plan->spec;
	StringInfoData buf;

	initStringInfo(&buf);
	describe_source(&buf, plan);
	describe_event_time(&buf, plan);
	describe_stateless(&buf, plan);
	if (plan->keyed)
		describe_keyed(&buf, plan);
	describe_sink(&buf, plan);
	if (spec->source.type == SOURCE_KAFKA && spec->source.kafka.barrier_group)
		appendStringInfo(&buf, "\nCheckpoint: at each complete cut of barrier group %s (topic %s), %d retained%s, %d others retained",
						 spec->source.kafka.barrier_group, spec->source.kafka.barrier_topic,
						 spec->checkpoint_retain_cuts,
						 spec->checkpoint_between_cuts ?
						 psprintf("; between cuts every %s", format_duration(spec->checkpoint_interval_us)) : "",
						 spec->checkpoint_retain);
	else
		appendStringInfo(&buf, "\nCheckpoint: every %s, %d retained",
						 format_duration(spec->checkpoint_interval_us), spec->checkpoint_retain);
	appendStringInfo(&buf, "\nOn error: %s", spec_choice_name(spec_on_errors, spec->on_error));
	/* Key groups matter at every parallelism: they are what a later rescale moves. */
	appendStringInfo(&buf, "\nParallelism: %d subtask%s, %d key groups",
					 spec->parallelism, spec->parallelism > 1 ? "s" : "", spec->key_groups);
	return buf.data;
}

static void
describe_source(StringInfo buf, JobPlan *plan)
{
	SourceSpec *source = &plan->spec->source;

	appendStringInfoString(buf, "Source: ");
	if (source->type == SOURCE_KAFKA)
		describe_kafka(buf, &source->kafka);
	else if (source->type == SOURCE_PULSAR)
	{
		appendStringInfo(buf, "pulsar, service %s, topic persistent://%s (every partition), start %s without a checkpoint",
						 source->pulsar.service_url, source->pulsar.topic,
						 spec_choice_name(spec_kafka_starts, source->pulsar.start_latest));
		describe_options(buf, source->pulsar.options);
	}
	else
		describe_generator(buf, &source->generator);
	describe_record(buf, plan);
}

static void
describe_kafka(StringInfo buf, KafkaSourceSpec *k)
{
	ListCell   *lc;

	appendStringInfo(buf, "kafka, brokers %s, topic%s", k->brokers,
					 list_length(k->topics) > 1 ? "s" : "");
	foreach(lc, k->topics)
		appendStringInfo(buf, "%s %s", foreach_current_index(lc) ? "," : "", (char *) lfirst(lc));
	appendStringInfo(buf, ", start %s without a checkpoint, consumer group %s (progress only)",
					 spec_choice_name(spec_kafka_starts, k->start_latest),
					 k->group_id ? k->group_id : "<job name>");
	describe_options(buf, k->options);
}

/* librdkafka properties or Pulsar options, secrets masked. */
static void
describe_options(StringInfo buf, List *options)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *opt = lfirst(lc);

		appendStringInfo(buf, "\n  option %s = %s", opt->defname,
						 spec_option_is_secret(opt->defname) ? SPEC_SECRET_MASK : strVal(opt->arg));
	}
}

static void
describe_generator(StringInfo buf, GeneratorSpec *g)
{
	appendStringInfoString(buf, "generator, ");
	if (g->events < 0)
		appendStringInfoString(buf, "unbounded");
	else
		appendStringInfo(buf, INT64_FORMAT " events", g->events);
	appendStringInfo(buf, ", %d keys, seed " INT64_FORMAT ", event time from %s every %s",
					 g->keys, g->seed, timestamptz_to_str(g->start_time), format_duration(g->step_us));
	if (g->rate > 0)
		appendStringInfo(buf, ", %g events per second", g->rate);
	if (g->partitions > 1)
		appendStringInfo(buf, ", %d partitions", g->partitions);
}

/* The record a message becomes, and how its JSON value is read. */
static void
describe_record(StringInfo buf, JobPlan *plan)
{
	JsonFields *jf = plan->json_fields;

	appendStringInfo(buf, "\n  record: %s", field_desc(plan->schema, FIELD_KEY));
	for (int i = 1; i < NUM_BASE_FIELDS; i++)
		appendStringInfo(buf, ", %s", field_desc(plan->schema, i));
	if (jf && jf->nfields == 0)
		appendStringInfoString(buf, "\n  value: validated as JSON, not built (no step reads it)");
	else if (jf)
	{
		appendStringInfoString(buf, jf->lazy_value ?
							   "\n  value fields read from the JSON text, the value built as jsonb only for a record that uses it whole:" :
							   "\n  value fields read from the JSON text without building jsonb:");
		for (int i = 0; i < jf->nfields; i++)
			appendStringInfo(buf, "%s %s", i ? "," : "", quote_literal_cstr(jf->fields[i].key));
	}
}

static void
describe_event_time(StringInfo buf, JobPlan *plan)
{
	JobSpec    *spec = plan->spec;

	appendStringInfo(buf, "\nEvent time: %s, watermark %s behind the latest",
					 plan->event_time ? plan->event_time->text : "the message timestamp",
					 format_duration(spec->max_out_of_orderness_us));
	if (spec->idle_timeout_us >= 0)
		appendStringInfo(buf, ", partitions idle after %s", format_duration(spec->idle_timeout_us));
	/* Alignment serves windows, and the Kafka source alone pauses partitions. */
	if (plan->window && spec->source.type == SOURCE_KAFKA && spec->max_drift_us >= 0)
		appendStringInfo(buf, "; partitions more than %s ahead of the slowest are paused",
						 format_duration(spec->max_drift_us));
}

static void
describe_stateless(StringInfo buf, JobPlan *plan)
{
	appendStringInfoString(buf, "\nStateless stage:");
	if (plan->nsteps == 0)
		appendStringInfoString(buf, " none");
	for (int i = 0; i < plan->nsteps; i++)
	{
		StatelessStep *st = plan->steps[i];

		appendStringInfo(buf, "\n  %s %s", st->path, step_kind_names[st->kind]);
		if (st->kind == STEP_FILTER)
			appendStringInfo(buf, ": %s", st->expr->text);
		else if (st->kind == STEP_FLAT_MAP)
			appendStringInfo(buf, ": %s := %s", field_desc(plan->schema, st->slots[0]), st->expr->text);
		for (int j = 0; j < st->nexprs; j++)
			appendStringInfo(buf, "\n    %s := %s", field_desc(plan->schema, st->slots[j]),
							 st->exprs[j]->text);
	}
}

static void
describe_keyed(StringInfo buf, JobPlan *plan)
{
	appendStringInfoString(buf, "\nKeyed stage: key (");
	for (int i = 0; i < plan->nkeys; i++)
		appendStringInfo(buf, "%s%s", i ? ", " : "",
						 quote_identifier(plan->schema->fields[plan->key_slots[i]].name));
	appendStringInfoChar(buf, ')');
	if (plan->window)
		describe_window(buf, plan->window);
	else if (plan->aggregated)
		appendStringInfoString(buf, "\n  no window: running values per key, written at each checkpoint");
	for (int i = 0; i < plan->naggs; i++)
	{
		appendStringInfo(buf, "\n  aggregate %s %s := %s", quote_identifier(plan->aggs[i]->name),
						 format_type_be(plan->aggs[i]->result_type), plan->aggs[i]->text);
		if (plan->aggs[i]->general)
			appendStringInfo(buf, "\n    %s", aggregate_call_describe(plan->aggs[i]->general));
	}
	appendStringInfo(buf, "\n  state backend: %s",
					 spec_choice_name(spec_state_backends, plan->spec->state_backend));
}

static void
describe_window(StringInfo buf, WindowSpec *w)
{
	appendStringInfo(buf, "\n  window: %s", spec_choice_name(spec_window_types, w->type));
	if (w->type == WINDOW_SESSION)
		appendStringInfo(buf, ", gap %s", format_duration(w->gap_us));
	else
		appendStringInfo(buf, ", size %s", format_duration(w->size_us));
	if (w->type == WINDOW_SLIDING)
		appendStringInfo(buf, ", slide %s", format_duration(w->slide_us));
	appendStringInfo(buf, ", allowed lateness %s, emit %s",
					 format_duration(w->allowed_lateness_us),
					 spec_choice_name(spec_window_emits, w->emit_update));
}

/* title: "Sink" or "Changelog" */
static void
describe_kafka_sink(StringInfo buf, JobPlan *plan, const char *title, KafkaSinkSpec *k,
					KafkaSinkPlan *kp)
{
	if (k->pulsar)
		appendStringInfo(buf, "\n%s: pulsar, service URL %s, topic persistent://%s, exactly_once, a deduplicating producer per subtask",
						 title, k->service_url, k->topic);
	else
		appendStringInfo(buf, "\n%s: kafka, brokers %s, topic %s, %s, one transaction per checkpoint%s",
						 title, k->brokers, k->topic, spec_choice_name(spec_sink_deliveries, k->exactly_once),
						 k->exactly_once ? "" : " (none: records may repeat after a crash)");
	appendStringInfo(buf, "\n  key <- %s", kp->key ? kp->key->text : "null");
	appendStringInfo(buf, "\n  value <- %s", kp->value->text);
	if (k->key || k->value)
		appendStringInfo(buf, " (format %s)", spec_choice_name(spec_formats, k->format));
	for (int h = 0; h < kp->nheaders; h++)
		appendStringInfo(buf, "\n  %s %s <- %s", k->pulsar ? "property" : "header",
						 kp->header_names[h], kp->headers[h]->text);
	/* Only a merged session replaces a row. */
	if (plan->window && plan->window->type == WINDOW_SESSION)
		appendStringInfoString(buf, "\n  replaced rows: a tombstone (null value) under the key");
	describe_options(buf, k->options);
}

static void
describe_sink(StringInfo buf, JobPlan *plan)
{
	SinkPlan   *sink = plan->sink;

	if (sink->kafka)
	{
		describe_kafka_sink(buf, plan, "Sink", &plan->spec->sink.kafka, sink->kafka);
		return;
	}
	appendStringInfo(buf, "\nSink: %s into %s",
					 spec_choice_name(spec_sink_modes, sink->upsert ? SINK_MODE_UPSERT : SINK_MODE_APPEND),
					 sink->relname);
	for (int i = 0; i < sink->ncolumns; i++)
	{
		SinkColumn *col = &sink->columns[i];

		appendStringInfo(buf, "\n  %s %s <- %s%s", quote_identifier(col->name),
						 format_type_with_typemod(col->type, col->typmod),
						 col->cast ? col->cast->text : quote_identifier(plan->out_schema->fields[col->slot].name),
						 col->is_key ? " (conflict key)" : "");
	}
	appendStringInfo(buf, "\n  statement: %s", sink->insert_sql);
	/* Only a merged session deletes rows. */
	if (plan->window && plan->window->type == WINDOW_SESSION)
		appendStringInfo(buf, "\n  replaced rows: %s", sink->delete_sql);
	if (plan->changelog)
		describe_kafka_sink(buf, plan, "Changelog (the same rows, the same epochs)",
							&plan->spec->changelog->kafka, plan->changelog->kafka);
}

static char *
format_duration(int64 us)
{
	static const struct
	{
		int64		unit;
		const char *name;
	}			units[] = {
		{USECS_PER_DAY, "day"}, {USECS_PER_HOUR, "hour"}, {USECS_PER_MINUTE, "minute"},
		{USECS_PER_SEC, "second"}, {1000, "millisecond"}, {1, "microsecond"}
	};

	if (us == 0)
		return "0";
	for (int i = 0; i < lengthof(units); i++)
		if (us % units[i].unit == 0)
			return psprintf(INT64_FORMAT " %s%s", us / units[i].unit, units[i].name,
							us / units[i].unit == 1 ? "" : "s");
	return psprintf(INT64_FORMAT " microseconds", us);
}

static const char *
field_desc(RecordSchema *schema, int slot)
{
	RecordField *f = &schema->fields[slot];

	return psprintf("%s %s", quote_identifier(f->name), format_type_with_typemod(f->type, f->typmod));
}
