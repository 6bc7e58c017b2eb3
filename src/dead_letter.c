/*
 * dead_letter.c
 *		Buffer and write dead letters (dead_letter.h).
 *
 * They are written in the checkpoint transaction, with the epoch that
 * covers them, so each bad record appears exactly once whatever crashes.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "dead_letter.h"

#define DLQ_COLUMNS 7

struct DeadLetterBuffer
{
	MemoryContext ctx;
	int			n;
	int			capacity;
	Datum	   *values[DLQ_COLUMNS];	/* topic, partition, offset, key, value, stage, error */
	bool	   *nulls[DLQ_COLUMNS];
};

static const Oid dlq_types[DLQ_COLUMNS] = {
	TEXTOID, INT4OID, INT8OID, BYTEAOID, BYTEAOID, TEXTOID, TEXTOID
};

DeadLetterBuffer *
dead_letter_buffer_create(MemoryContext parent)
{
	DeadLetterBuffer *dlq = MemoryContextAllocZero(parent, sizeof(DeadLetterBuffer));

	dlq->ctx = AllocSetContextCreate(parent, "mailer dead letters", ALLOCSET_DEFAULT_SIZES);
	return dlq;
}

static Datum
bytes_datum(const char *data, int len)
{
	bytea	   *b = palloc(len + VARHDRSZ);

	SET_VARSIZE(b, len + VARHDRSZ);
	memcpy(VARDATA(b), data, len);
	return PointerGetDatum(b);
}

void
dead_letter_add(DeadLetterBuffer *dlq, const char *topic, int32 partition, int64 offset,
				const char *key, int key_len, const char *value, int value_len,
				const char *stage, const char *error)
{
	MemoryContext old = MemoryContextSwitchTo(dlq->ctx);
	int			i = dlq->n;

	if (dlq->n == dlq->capacity)
	{
		dlq->capacity = Max(64, dlq->capacity * 2);
		for (int c = 0; c < DLQ_COLUMNS; c++)
		{
			if (dlq->values[c] == NULL)
			{
				dlq->values[c] = palloc(sizeof(Datum) * dlq->capacity);
				dlq->nulls[c] = palloc(sizeof(bool) * dlq->capacity);
			}
			else
			{
				dlq->values[c] = repalloc(dlq->values[c], sizeof(Datum) * dlq->capacity);
				dlq->nulls[c] = repalloc(dlq->nulls[c], sizeof(bool) * dlq->capacity);
			}
		}
	}
	dlq->nulls[0][i] = topic == NULL;
	dlq->values[0][i] = topic ? CStringGetTextDatum(topic) : (Datum) 0;
	dlq->nulls[1][i] = partition < 0;
	dlq->values[1][i] = Int32GetDatum(partition);
	dlq->nulls[2][i] = offset < 0;
	dlq->values[2][i] = Int64GetDatum(offset);
	dlq->nulls[3][i] = key == NULL;
	dlq->values[3][i] = key ? bytes_datum(key, key_len) : (Datum) 0;
	dlq->nulls[4][i] = value == NULL;
	dlq->values[4][i] = value ? bytes_datum(value, value_len) : (Datum) 0;
	dlq->nulls[5][i] = false;
	dlq->values[5][i] = CStringGetTextDatum(stage);
	dlq->nulls[6][i] = false;
	dlq->values[6][i] = CStringGetTextDatum(error ? error : "unknown error");
	dlq->n++;
	MemoryContextSwitchTo(old);
}

int
dead_letter_count(DeadLetterBuffer *dlq)
{
	return dlq->n;
}

void
dead_letter_flush(DeadLetterBuffer *dlq, int64 job_id, int64 epoch)
{
	Oid			types[DLQ_COLUMNS + 2];
	Datum		values[DLQ_COLUMNS + 2];
	int			dims[1];
	int			lbs[1] = {1};

	if (dlq->n == 0)
		return;
	dims[0] = dlq->n;
	types[0] = INT8OID;
	values[0] = Int64GetDatum(job_id);
	types[1] = INT8OID;
	values[1] = Int64GetDatum(epoch);
	for (int c = 0; c < DLQ_COLUMNS; c++)
	{
		int16		typlen;
		bool		typbyval;
		char		typalign;

		get_typlenbyvalalign(dlq_types[c], &typlen, &typbyval, &typalign);
		types[c + 2] = get_array_type(dlq_types[c]);
		values[c + 2] = PointerGetDatum(construct_md_array(dlq->values[c], dlq->nulls[c], 1, dims, lbs,
														   dlq_types[c], typlen, typbyval, typalign));
	}
	SPI_connect();
	catalog_exec("INSERT INTO mailer.dead_letters "
				 "(job_id, epoch, topic, partition, \"offset\", key, value, stage, error) "
				 "SELECT $1, $2, * FROM ROWS FROM (pg_catalog.unnest($3), pg_catalog.unnest($4), "
				 "pg_catalog.unnest($5), pg_catalog.unnest($6), pg_catalog.unnest($7), "
				 "pg_catalog.unnest($8), pg_catalog.unnest($9))",
				 DLQ_COLUMNS + 2, types, values, NULL, false);
	SPI_finish();
	dead_letter_discard(dlq);
}

void
dead_letter_discard(DeadLetterBuffer *dlq)
{
	MemoryContextReset(dlq->ctx);
	dlq->n = 0;
	dlq->capacity = 0;
	memset(dlq->values, 0, sizeof(dlq->values));
	memset(dlq->nulls, 0, sizeof(dlq->nulls));
}
