/*
 * kafka_options.h
 *		The librdkafka configurations of a job's Kafka source and Kafka
 *		sink, and which properties (source.options, sink.options) a job's
 *		owner may set: both obey one allow-list.
 *
 * librdkafka acts on some properties as the server's OS user: it runs
 * programs, reads files and loads libraries.  A role gets from
 * source.options and sink.options only what PostgreSQL itself would give it.
 */
#ifndef KAFKA_OPTIONS_H
#define KAFKA_OPTIONS_H

#include "plan/spec.h"

struct rd_kafka_conf_s;

/*
 * ERROR (naming source.options.<name>) when the owner may not set a
 * property or librdkafka refuses one.  create_job and describe_job judge a
 * spec this way, in the caller's backend.
 */
extern void kafka_check_options(KafkaSourceSpec *spec);

/*
 * The consumer configuration of a Kafka source: mailer's settings, then
 * source.options once judged.  validate_only: properties that load code
 * are judged by name only and left out.
 */
extern struct rd_kafka_conf_s *kafka_options_conf(KafkaSourceSpec *spec, const char *group_id,
												  bool validate_only);

/* kafka_check_options for sink.options. */
extern void kafka_check_sink_options(KafkaSinkSpec *spec);

/*
 * The producer configuration of a Kafka sink: mailer's settings (an
 * idempotent producer; transactional_id for an exactly-once sink, NULL
 * when validating), then sink.options once judged.
 */
extern struct rd_kafka_conf_s *kafka_producer_conf(KafkaSinkSpec *spec, const char *transactional_id,
												   bool validate_only);

/* The largest record the sink's producer takes: its message.max.bytes. */
extern int64 kafka_producer_max_bytes(KafkaSinkSpec *spec);

/* The consumer that reads a Kafka sink's epoch marker: its connection options, read_committed. */
extern struct rd_kafka_conf_s *kafka_marker_reader_conf(KafkaSinkSpec *spec, const char *group_id);

#endif							/* KAFKA_OPTIONS_H */
