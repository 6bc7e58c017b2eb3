/*
 * sink_progress.c
 *		A topic sink's progress row and producer identity (sink_progress.h),
 *		for the Kafka and the Pulsar publisher alike.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "base/mailer.h"
#include "base/work_xact.h"
#include "connectors/sink_progress.h"
#include "jobs/catalog.h"

#define Anum_progress_published		1
#define Anum_progress_generation	2
#define Anum_progress_restored_to	3
#define Anum_progress_marker_nonce	4
#define Anum_progress_sequence_id	5
#define Anum_progress_sequence_gen	6
#define Anum_progress_sent_sequence	7

char *
sink_producer_id(const SinkOwner *owner, MemoryContext parent)
{
	return MemoryContextStrdup(parent,
							   psprintf("mailer." UINT64_FORMAT ".%u.%u." INT64_FORMAT ".%d",
										GetSystemIdentifier(), MyDatabaseId,
										owner->ext_oid, owner->job_id, owner->subtask));
}

void
sink_progress_make(const SinkOwner *owner, const char *producer_id)
{
	Oid			types[4] = {INT8OID, INT4OID, TEXTOID, TEXTOID};
	Datum		values[4];
	uint64		random;

	/*
	 * The nonce goes into every Kafka epoch marker and is shown nowhere: a
	 * marker that another Kafka client committed to the group is not
	 * believed.
	 */
	if (!pg_strong_random(&random, sizeof(random)))
		elog(ERROR, "could not generate a nonce for the sink's epoch marker");
	values[0] = Int64GetDatum(owner->job_id);
	values[1] = Int32GetDatum(owner->subtask);
	values[2] = CStringGetTextDatum(producer_id);
	values[3] = CStringGetTextDatum(psprintf("%016" INT64_MODIFIER "x", random));
	SPI_connect();
	catalog_exec("INSERT INTO " MAILER_SCHEMA ".kafka_sink_progress (job_id, subtask, transactional_id, marker_nonce) "
				 "VALUES ($1, $2, $3, $4) ON CONFLICT (job_id, subtask) DO UPDATE "
				 "SET transactional_id = EXCLUDED.transactional_id", 4, types, values, NULL, false);
	SPI_finish();
}

void
sink_progress_read(const SinkOwner *owner, SinkProgress *progress)
{
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2];
	bool		isnull;

	values[0] = Int64GetDatum(owner->job_id);
	values[1] = Int32GetDatum(owner->subtask);
	SPI_connect();
	catalog_exec("SELECT published_epoch, generation, restored_to, marker_nonce, last_sequence_id, "
				 "sequence_generation, sent_sequence_id FROM " MAILER_SCHEMA ".kafka_sink_progress "
				 "WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) $2",
				 2, types, values, NULL, true);
	if (SPI_processed != 1)
		elog(ERROR, "the sink's progress row of job " INT64_FORMAT " subtask %d is missing",
			 owner->job_id, owner->subtask);
	progress->published = DatumGetInt64(catalog_value(0, Anum_progress_published, &isnull));
	progress->generation = DatumGetInt32(catalog_value(0, Anum_progress_generation, &isnull));
	progress->restored_to = DatumGetInt64(catalog_value(0, Anum_progress_restored_to, &isnull));
	if (isnull)
		progress->restored_to = -1;
	strlcpy(progress->nonce, catalog_text(0, Anum_progress_marker_nonce), sizeof(progress->nonce));
	progress->last_sequence_id = DatumGetInt64(catalog_value(0, Anum_progress_sequence_id, &isnull));
	progress->sequence_generation = DatumGetInt32(catalog_value(0, Anum_progress_sequence_gen, &isnull));
	progress->sent_sequence_id = DatumGetInt64(catalog_value(0, Anum_progress_sent_sequence, &isnull));
	SPI_finish();
}

void
sink_progress_mark_sent(const SinkOwner *owner, int64 sent_sequence_id)
{
	Oid			types[3] = {INT8OID, INT4OID, INT8OID};
	Datum		values[3];

	values[0] = Int64GetDatum(owner->job_id);
	values[1] = Int32GetDatum(owner->subtask);
	values[2] = Int64GetDatum(sent_sequence_id);
	SPI_connect();
	catalog_exec("UPDATE " MAILER_SCHEMA ".kafka_sink_progress "
				 "SET sent_sequence_id = pg_catalog.int8larger(sent_sequence_id, $3) "
				 "WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) $2",
				 3, types, values, NULL, false);
	SPI_finish();
}

void
sink_progress_record(const SinkOwner *owner, int64 through, int64 last_sequence_id,
					 int32 sequence_generation)
{
	Oid			types[5] = {INT8OID, INT4OID, INT8OID, INT8OID, INT4OID};
	Datum		values[5];

	values[0] = Int64GetDatum(owner->job_id);
	values[1] = Int32GetDatum(owner->subtask);
	values[2] = Int64GetDatum(through);
	values[3] = Int64GetDatum(last_sequence_id);
	values[4] = Int32GetDatum(sequence_generation);
	SPI_connect();
	catalog_exec("DELETE FROM " MAILER_SCHEMA ".kafka_outbox WHERE job_id OPERATOR(pg_catalog.=) $1 "
				 "AND subtask OPERATOR(pg_catalog.=) $2 AND epoch OPERATOR(pg_catalog.<=) $3",
				 3, types, values, NULL, false);
	if (sequence_generation < 0)
		catalog_exec("UPDATE " MAILER_SCHEMA ".kafka_sink_progress SET published_epoch = $3, "
					 "published_at = pg_catalog.now(), restored_to = NULL "
					 "WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) $2",
					 3, types, values, NULL, false);
	else
		catalog_exec("UPDATE " MAILER_SCHEMA ".kafka_sink_progress SET published_epoch = $3, "
					 "published_at = pg_catalog.now(), restored_to = NULL, "
					 "last_sequence_id = $4, sequence_generation = $5, "
					 "sent_sequence_id = CASE WHEN sequence_generation OPERATOR(pg_catalog.=) $5 "
					 "THEN pg_catalog.int8larger(sent_sequence_id, $4) ELSE $4 END "
					 "WHERE job_id OPERATOR(pg_catalog.=) $1 AND subtask OPERATOR(pg_catalog.=) $2",
					 5, types, values, NULL, false);
	SPI_finish();
}

bool
sink_publish_rounds(const SinkOwner *owner, const char *producer_id, bool *progress_made,
					PublishRound (*round) (void *arg, char **error), void *arg, char **error)
{
	PublishRound r;

	*error = NULL;
	if (!*progress_made)
	{
		/* In a transaction of its own: mailer.kafka_sinks shows a sink that waits too. */
		work_xact_begin();
		sink_progress_make(owner, producer_id);
		work_xact_end();
		*progress_made = true;
	}
	/* Each round sends a bounded amount, or (Kafka) dead-letters refused records. */
	while ((r = round(arg, error)) == PUBLISH_MORE)
		CHECK_FOR_INTERRUPTS();
	return r == PUBLISH_DONE;
}
