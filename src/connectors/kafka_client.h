/*
 * kafka_client.h
 *		What the Kafka source and the Kafka sink do alike with a librdkafka
 *		handle: mask the values of secret options in every text librdkafka
 *		gives (its messages may quote them), and forward its log lines,
 *		queued for the worker's own thread, to the server log.
 */
#ifndef KAFKA_CLIENT_H
#define KAFKA_CLIENT_H

#include <librdkafka/rdkafka.h>

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

typedef struct KafkaSecrets
{
	char	  **texts;			/* values of secret options, and their longer words */
	int			n;
	int			capacity;
} KafkaSecrets;

/* Note the secret values among options (DefElem, string values). */
extern void kafka_secrets_collect(KafkaSecrets *secrets, List *options);

/* Replace, in place, every secret in text with a mask; the result is cut to size. */
extern void kafka_secrets_mask(const KafkaSecrets *secrets, char *text, size_t size);

/* Write the log lines queued on logs into the server log, masked. */
extern void kafka_drain_logs(rd_kafka_queue_t *logs, const KafkaSecrets *secrets);

/*
 * A Kafka timestamp (milliseconds since 1970) as a timestamptz; a negative
 * one (none) or one outside timestamptz's range (a producer's garbage) is
 * no timestamp: DT_NOBEGIN.
 */
extern TimestampTz kafka_timestamp(int64 ms);

/* rd_kafka_new with every signal blocked, so that its threads take none. */
extern rd_kafka_t *kafka_client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf,
									char *errstr, size_t errstr_size);

#endif							/* KAFKA_CLIENT_H */
