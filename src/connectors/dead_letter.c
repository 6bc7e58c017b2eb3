/*
 * dead_letter.c
 *		Buffer and write dead letters (dead_letter.h).
 *
 * They are written in the checkpoint transaction, with the epoch that
 * covers them, so each bad record appears exactly once whatever crashes.
 *
 * Bounded by bytes, not only by count: one INSERT takes at most a chunk of
 * DEAD_LETTER_CHUNK_BYTES (an array past 1 GB cannot be built, and the
 * checkpoint would fail again at each replay), a key or value longer than
 * a sixteenth of that is cut (the error says so), and the worker
 * checkpoints early once a chunk's worth is buffered.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "base/bytea.h"
#include "base/mailer.h"
#include "jobs/catalog.h"
#include "connectors/dead_letter.h"

#define DLQ_COLUMNS 7

/* 16 MB per INSERT; a key or value is kept up to 1 MB */
#define DEAD_LETTER_CHUNK_BYTES (16 * 1024 * 1024)

struct DeadLetterBuffer
{
	MemoryContext ctx;
	int			n;
	int			capacity;
	int64		bytes;			/* of the values buffered, roughly */
	Datum	   *values[DLQ_COLUMNS];	/* topic, partition, offset, key, value, stage, error */
	bool	   *nulls[DLQ_COLUMNS];
};

static const Oid dlq_types[DLQ_COLUMNS] = {
	TEXTOID, INT4OID, INT8OID, BYTEAOID, BYTEAOID, TEXTOID, TEXTOID
};

static int64 chunk_bytes(void);
static int64 row_bytes(DeadLetterBuffer *dlq, int i);
static void insert_rows(DeadLetterBuffer *dlq, int64 job_id, int64 epoch, int from, int to);

/* The test setting mailer.test_dead_letter_bytes, else 16 MB. */
static int64
chunk_bytes(void)
{
	return mailer_test_dead_letter_bytes > 0 ? mailer_test_dead_letter_bytes : DEAD_LETTER_CHUNK_BYTES;
}

DeadLetterBuffer *
dead_letter_buffer_create(MemoryContext parent)
{
	DeadLetterBuffer *dlq = MemoryContextAllocZero(parent, sizeof(DeadLetterBuffer));

	dlq->ctx = AllocSetContextCreate(parent, "mailer dead letters", ALLOCSET_DEFAULT_SIZES);
	return dlq;
}

void
dead_letter_add(DeadLetterBuffer *dlq, const char *topic, int32 partition, int64 offset,
				const char *key, int key_len, const char *value, int value_len,
				const char *stage, const char *error)
{
	MemoryContext old = MemoryContextSwitchTo(dlq->ctx);
	int			i = dlq->n;
	int			max_len = chunk_bytes() / 16;
	char	   *cut = NULL;

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
	if (key && key_len > max_len)
	{
		cut = psprintf(" (dead letter key cut from %d to %d bytes)", key_len, max_len);
		key_len = max_len;
	}
	if (value && value_len > max_len)
	{
		cut = psprintf("%s (dead letter value cut from %d to %d bytes)", cut ? cut : "",
					   value_len, max_len);
		value_len = max_len;
	}
	dlq->nulls[3][i] = key == NULL;
	dlq->values[3][i] = key ? PointerGetDatum(mailer_bytea(key, key_len)) : (Datum) 0;
	dlq->nulls[4][i] = value == NULL;
	dlq->values[4][i] = value ? PointerGetDatum(mailer_bytea(value, value_len)) : (Datum) 0;
	dlq->nulls[5][i] = false;
	dlq->values[5][i] = CStringGetTextDatum(stage);
	dlq->nulls[6][i] = false;
	dlq->values[6][i] = CStringGetTextDatum(psprintf("%s%s", error ? error : "unknown error",
													 cut ? cut : ""));
	dlq->bytes += row_bytes(dlq, i);
	dlq->n++;
	MemoryContextSwitchTo(old);
}

int
dead_letter_count(DeadLetterBuffer *dlq)
{
	return dlq->n;
}

bool
dead_letter_full(DeadLetterBuffer *dlq)
{
	return dlq->bytes >= chunk_bytes();
}

/* What row i adds to an INSERT's arrays. */
static int64
row_bytes(DeadLetterBuffer *dlq, int i)
{
	int64		bytes = 32;

	for (int c = 0; c < DLQ_COLUMNS; c++)
		if (!dlq->nulls[c][i] && (dlq_types[c] == TEXTOID || dlq_types[c] == BYTEAOID))
			bytes += VARSIZE_ANY(DatumGetPointer(dlq->values[c][i]));
	return bytes;
}

void
dead_letter_flush(DeadLetterBuffer *dlq, int64 job_id, int64 epoch)
{
	int			from = 0;
	int64		bytes = 0;

	for (int i = 0; i < dlq->n; i++)
	{
		int64		b = row_bytes(dlq, i);

		/* Rows [from, i) fill a chunk: insert them, row i starts the next. */
		if (i > from && bytes + b > chunk_bytes())
		{
			insert_rows(dlq, job_id, epoch, from, i);
			from = i;
			bytes = 0;
		}
		bytes += b;
	}
	if (dlq->n > from)
		insert_rows(dlq, job_id, epoch, from, dlq->n);
	dead_letter_discard(dlq);
}

static void
insert_rows(DeadLetterBuffer *dlq, int64 job_id, int64 epoch, int from, int to)
{
	Oid			types[DLQ_COLUMNS + 2];
	Datum		values[DLQ_COLUMNS + 2];
	int			dims[1];
	int			lbs[1] = {1};

	dims[0] = to - from;
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
		values[c + 2] = PointerGetDatum(construct_md_array(dlq->values[c] + from, dlq->nulls[c] + from,
														   1, dims, lbs, dlq_types[c], typlen,
														   typbyval, typalign));
	}
	SPI_connect();
	catalog_exec("INSERT INTO mailer.dead_letters "
				 "(job_id, epoch, topic, partition, \"offset\", key, value, stage, error) "
				 "SELECT $1, $2, * FROM unnest($3, $4, $5, $6, $7, $8, $9)",
				 DLQ_COLUMNS + 2, types, values, NULL, false);
	SPI_finish();
}

void
dead_letter_discard(DeadLetterBuffer *dlq)
{
	MemoryContextReset(dlq->ctx);
	dlq->n = 0;
	dlq->capacity = 0;
	dlq->bytes = 0;
	memset(dlq->values, 0, sizeof(dlq->values));
	memset(dlq->nulls, 0, sizeof(dlq->nulls));
}
