/*
 * sink_table.c
 *		The table sink (sink.h).
 *
 * Rows are kept column by column.  At a checkpoint each chunk of rows is
 * one INSERT ... SELECT * FROM unnest($1, $2, ...) [ON CONFLICT ...], a
 * plan prepared once.  When the table rejects a chunk for a row's data
 * (a constraint, a value out of range), the chunk is split in halves until
 * the bad rows are alone; they become dead letters and the rest is written.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "sink.h"

#define SINK_CHUNK_ROWS 10000

typedef struct RowEntry
{
	uint32		row;
	uint32		hash;
	char		status;
} RowEntry;

typedef struct SinkOrigin
{
	const char *topic;			/* a source's topic name, or NULL */
	int32		partition;
	int64		offset;
} SinkOrigin;

struct SinkBuffer
{
	SinkPlan   *plan;
	MemoryContext ctx;			/* the rows; reset at each flush */
	int			nrows;
	int			capacity;
	Datum	  **values;			/* [column][row] */
	bool	  **nulls;
	SinkOrigin *origins;
	struct rowset_hash *keys;	/* upsert: row of each key */
	SPIPlanPtr	insert_plan;
};

static uint32 row_hash(SinkBuffer *sb, uint32 row);
static bool row_equal(SinkBuffer *sb, uint32 a, uint32 b);

#define SH_PREFIX rowset
#define SH_ELEMENT_TYPE RowEntry
#define SH_KEY_TYPE uint32
#define SH_KEY row
#define SH_HASH_KEY(tb, key) row_hash((SinkBuffer *) (tb)->private_data, key)
#define SH_EQUAL(tb, a, b) row_equal((SinkBuffer *) (tb)->private_data, a, b)
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) a->hash
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

static void grow(SinkBuffer *sb);
static void write_range(SinkBuffer *sb, int from, int to, DeadLetterBuffer *dlq, OnError on_error,
						int64 *written);
static bool is_row_error(ErrorData *edata);
static char *row_as_json(SinkBuffer *sb, int row);

SinkBuffer *
sink_buffer_create(JobPlan *plan, MemoryContext parent)
{
	SinkBuffer *sb = MemoryContextAllocZero(parent, sizeof(SinkBuffer));
	SinkPlan   *sp = plan->sink;

	sb->plan = sp;
	sb->ctx = AllocSetContextCreate(parent, "mailer sink rows", ALLOCSET_DEFAULT_SIZES);
	sb->values = MemoryContextAllocZero(parent, sizeof(Datum *) * sp->ncolumns);
	sb->nulls = MemoryContextAllocZero(parent, sizeof(bool *) * sp->ncolumns);
	if (sp->upsert)
		sb->keys = rowset_create(parent, 1024, sb);

	SPI_connect();
	sb->insert_plan = SPI_prepare(sp->insert_sql, sp->ncolumns, sp->param_types);
	if (sb->insert_plan == NULL)
		elog(ERROR, "could not prepare the sink statement: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(sb->insert_plan);
	SPI_finish();
	return sb;
}

void
sink_project(SinkBuffer *sb, ExprRuntime *out_rt, Record *rec, Datum *values, bool *nulls)
{
	SinkPlan   *sp = sb->plan;

	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];

		if (col->cast)
			values[c] = expr_eval(col->cast, out_rt, rec, &nulls[c]);
		else
		{
			values[c] = rec->values[col->slot];
			nulls[c] = rec->isnull[col->slot];
		}
	}
}

void
sink_buffer_add(SinkBuffer *sb, Datum *values, bool *nulls, const char *topic, int32 partition,
				int64 offset)
{
	SinkPlan   *sp = sb->plan;
	MemoryContext old = MemoryContextSwitchTo(sb->ctx);
	int			row;

	if (sb->nrows == sb->capacity)
		grow(sb);
	row = sb->nrows;
	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];

		sb->nulls[c][row] = nulls[c];
		sb->values[c][row] = nulls[c] ? (Datum) 0 :
			datumCopy(values[c], col->typbyval, col->typlen);
	}
	sb->origins[row].topic = topic;
	sb->origins[row].partition = partition;
	sb->origins[row].offset = offset;

	if (sb->keys)
	{
		bool		found;
		RowEntry   *entry = rowset_insert(sb->keys, (uint32) row, &found);

		if (found)
		{
			/* The newest row of a key replaces the one buffered before. */
			for (int c = 0; c < sp->ncolumns; c++)
			{
				sb->values[c][entry->row] = sb->values[c][row];
				sb->nulls[c][entry->row] = sb->nulls[c][row];
			}
			sb->origins[entry->row] = sb->origins[row];
			MemoryContextSwitchTo(old);
			return;
		}
	}
	sb->nrows++;
	MemoryContextSwitchTo(old);
}

int
sink_buffer_rows(SinkBuffer *sb)
{
	return sb->nrows;
}

int64
sink_buffer_flush(SinkBuffer *sb, DeadLetterBuffer *dlq, OnError on_error)
{
	int64		written = 0;

	if (sb->nrows > 0)
	{
		SPI_connect();
		for (int from = 0; from < sb->nrows; from += SINK_CHUNK_ROWS)
			write_range(sb, from, Min(from + SINK_CHUNK_ROWS, sb->nrows), dlq, on_error, &written);
		SPI_finish();
	}
	MemoryContextReset(sb->ctx);
	sb->nrows = 0;
	sb->capacity = 0;
	if (sb->keys)
		rowset_reset(sb->keys);
	return written;
}

static void
grow(SinkBuffer *sb)
{
	SinkPlan   *sp = sb->plan;
	int			cap = Max(1024, sb->capacity * 2);

	for (int c = 0; c < sp->ncolumns; c++)
	{
		sb->values[c] = sb->capacity ? repalloc(sb->values[c], sizeof(Datum) * cap) :
			palloc(sizeof(Datum) * cap);
		sb->nulls[c] = sb->capacity ? repalloc(sb->nulls[c], sizeof(bool) * cap) :
			palloc(sizeof(bool) * cap);
	}
	sb->origins = sb->capacity ? repalloc(sb->origins, sizeof(SinkOrigin) * cap) :
		palloc(sizeof(SinkOrigin) * cap);
	sb->capacity = cap;
}

/* Write rows [from, to) in one statement, in a subtransaction. */
static void
write_range(SinkBuffer *sb, int from, int to, DeadLetterBuffer *dlq, OnError on_error,
			int64 *written)
{
	SinkPlan   *sp = sb->plan;
	MemoryContext ctx = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Datum	   *params = palloc(sizeof(Datum) * sp->ncolumns);
	int			dims[1] = {to - from};
	int			lbs[1] = {1};
	ErrorData  *edata = NULL;

	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];

		params[c] = PointerGetDatum(construct_md_array(sb->values[c] + from, sb->nulls[c] + from,
													   1, dims, lbs, getBaseType(col->type),
													   col->typlen, col->typbyval, col->typalign));
	}

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(ctx);
	PG_TRY();
	{
		int			rc = SPI_execute_plan(sb->insert_plan, params, NULL, false, 0);

		if (rc != SPI_OK_INSERT)
			elog(ERROR, "sink statement returned %s", SPI_result_code_string(rc));
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(ctx);
		CurrentResourceOwner = owner;
		*written += to - from;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(ctx);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(ctx);
		CurrentResourceOwner = owner;
	}
	PG_END_TRY();

	if (edata == NULL)
		return;
	if (!is_row_error(edata))
		ReThrowError(edata);
	if (to - from > 1)
	{
		int			mid = from + (to - from) / 2;

		write_range(sb, from, mid, dlq, on_error, written);
		write_range(sb, mid, to, dlq, on_error, written);
		return;
	}

	/* One row the table refuses. */
	if (on_error == ON_ERROR_FAIL)
		ereport(ERROR,
				(errcode(edata->sqlerrcode),
				 errmsg("table %s rejected a row: %s", sp->relname, edata->message),
				 errdetail("The row: %s%s", row_as_json(sb, from),
						   sb->origins[from].topic ?
						   psprintf(" (from %s partition %d offset " INT64_FORMAT ")",
									sb->origins[from].topic, sb->origins[from].partition,
									sb->origins[from].offset) : ""),
				 errhint("The job's on_error is \"fail\"; with \"dead_letter\" such rows go to mailer.dead_letters.")));
	if (on_error == ON_ERROR_DEAD_LETTER)
	{
		char	   *json = row_as_json(sb, from);

		dead_letter_add(dlq, sb->origins[from].topic, sb->origins[from].partition,
						sb->origins[from].offset, NULL, -1, json, strlen(json), "sink",
						edata->message);
	}
}

/* Errors about a row's data, as opposed to the table or the server. */
static bool
is_row_error(ErrorData *edata)
{
	int			category = ERRCODE_TO_CATEGORY(edata->sqlerrcode);

	return category == ERRCODE_DATA_EXCEPTION ||
		category == ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION ||
		edata->sqlerrcode == ERRCODE_WITH_CHECK_OPTION_VIOLATION ||
		(edata->sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE &&
		 strstr(edata->message, "row-level security") != NULL);
}

/* A row as a JSON object of its column values' text, for a dead letter. */
static char *
row_as_json(SinkBuffer *sb, int row)
{
	SinkPlan   *sp = sb->plan;
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];

		if (c > 0)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, col->name);
		appendStringInfoString(&buf, ": ");
		if (sb->nulls[c][row])
			appendStringInfoString(&buf, "null");
		else
		{
			Oid			out;
			bool		varlena;

			getTypeOutputInfo(col->type, &out, &varlena);
			escape_json(&buf, OidOutputFunctionCall(out, sb->values[c][row]));
		}
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

static uint32
row_hash(SinkBuffer *sb, uint32 row)
{
	SinkPlan   *sp = sb->plan;
	uint32		h = 0;

	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];

		if (!col->is_key)
			continue;
		h = hash_combine(h, sb->nulls[c][row] ? 0x5bd1e995 :
						 datum_image_hash(sb->values[c][row], col->typbyval, col->typlen));
	}
	return h;
}

static bool
row_equal(SinkBuffer *sb, uint32 a, uint32 b)
{
	SinkPlan   *sp = sb->plan;

	for (int c = 0; c < sp->ncolumns; c++)
	{
		SinkColumn *col = &sp->columns[c];

		if (!col->is_key)
			continue;
		if (sb->nulls[c][a] != sb->nulls[c][b])
			return false;
		if (!sb->nulls[c][a] &&
			!datum_image_eq(sb->values[c][a], sb->values[c][b], col->typbyval, col->typlen))
			return false;
	}
	return true;
}
