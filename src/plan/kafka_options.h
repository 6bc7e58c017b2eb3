/*
 * kafka_options.h
 *		The librdkafka configuration of a job's Kafka source, and which
 *		properties (source.options) a job's owner may set.
 *
 * librdkafka acts on some properties as the server's OS user: it runs
 * programs, reads files and loads libraries.  A role gets from
 * source.options only what PostgreSQL itself would give it.
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

#endif							/* KAFKA_OPTIONS_H */
