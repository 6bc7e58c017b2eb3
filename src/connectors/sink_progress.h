/*
 * sink_progress.h
 *		How far a topic sink (Kafka or Pulsar) has published its outbox
 *		(mailer.kafka_outbox): the subtask's row of mailer.kafka_sink_progress,
 *		shared by both publishers, and the producer identity they name
 *		themselves by.
 *
 * Design: docs/ARCHITECTURE.md, "The Kafka sink" and "The Pulsar sink".
 */
#ifndef SINK_PROGRESS_H
#define SINK_PROGRESS_H

#include "connectors/sink.h"

typedef struct SinkProgress
{
	int64		published;		/* every record up to this epoch is in the topic */
	int32		generation;		/* restore_job moves it on */
	int64		restored_to;	/* restore_job's epoch until the next publish; -1: none */
	char		nonce[17];		/* Kafka: in every epoch marker */
	int64		last_sequence_id;	/* Pulsar: the last record of epoch published */
	int32		sequence_generation;	/* Pulsar: whose producer name that is */
	int64		sent_sequence_id;	/* Pulsar: no attempt under that name sent a higher one */
} SinkProgress;

/*
 * mailer.<system identifier>.<database oid>.<extension oid>.<job id>.<subtask>:
 * unique across every database and server that may share the broker, and
 * new for a job made anew after DROP EXTENSION (its id may repeat, the
 * extension's oid does not).  In parent.
 */
extern char *sink_producer_id(const SinkOwner *owner, MemoryContext parent);

/* In a transaction: the subtask's row, made if missing, naming producer_id. */
extern void sink_progress_make(const SinkOwner *owner, const char *producer_id);

/* In a transaction: the subtask's row; ERROR if missing. */
extern void sink_progress_read(const SinkOwner *owner, SinkProgress *progress);

/*
 * In a transaction: the topic holds every record up to epoch through:
 * delete them from the outbox and note it.  sequence_generation < 0
 * leaves the Pulsar columns as they are; a new one starts its producer's
 * sent mark at last_sequence_id.
 */
extern void sink_progress_record(const SinkOwner *owner, int64 through,
								 int64 last_sequence_id, int32 sequence_generation);

/*
 * In a transaction: an attempt under the producer of sequence_generation may
 * now send sequence ids up to sent_sequence_id (it only ever rises).
 */
extern void sink_progress_mark_sent(const SinkOwner *owner, int64 sent_sequence_id);

/* What one round of publishing came to. */
typedef enum PublishRound
{
	PUBLISH_DONE,				/* nothing past the published epoch */
	PUBLISH_MORE,				/* progress made, more to send */
	PUBLISH_FAILED				/* *error says why */
} PublishRound;

/*
 * A publisher's publish: the progress row made first (once: *progress_made),
 * then round(arg, error) again until it is not PUBLISH_MORE.  Whether the
 * outbox was published.
 */
extern bool sink_publish_rounds(const SinkOwner *owner, const char *producer_id, bool *progress_made,
								PublishRound (*round) (void *arg, char **error), void *arg,
								char **error);

#endif							/* SINK_PROGRESS_H */
