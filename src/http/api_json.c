/*
 * api_json.c
 *		/api/jobs and /api/jobs/<name>.
 *
 * The views give what a job is and does: one SQL statement per request
 * builds the JSON of a job's summary from mailer.jobs and mailer.metrics
 * (SUMMARY_SQL, shared by the list and the detail), and the detail's
 * topology, partitions and subtasks.  The rest comes from shared memory
 * (the slots' histograms, the history ring) and from describe_job, whose
 * plan is cached per job while its spec stays the same.
 *
 * The stored spec has its secrets masked, and only it, the counters and
 * the error texts are shown: never a record's content.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "base/mailer.h"
#include "http/api_json.h"
#include "http/http_xact.h"
#include "http/job_topology.h"
#include "http/slot_histograms.h"
#include "jobs/job_history.h"

/* A job's JobSummary, over mailer.jobs j and mailer.metrics m. */
#define SUMMARY_SQL \
	"json_build_object('name', j.name, 'state', j.state, 'waiting_for', j.waiting_for, " \
	"  'desired_state', j.desired_state, 'pid', j.pid, 'restarts', j.restarts, " \
	"  'last_error', j.last_error, 'last_error_at', j.last_error_at, " \
	"  'parallelism', j.parallelism, 'created_at', j.created_at, " \
	"  'metrics', json_build_object('records_in', m.records_in, " \
	"    'records_accepted', m.records_accepted, 'records_out', m.records_out, " \
	"    'records_filtered', m.records_filtered, 'records_dead_lettered', m.records_dead_lettered, " \
	"    'records_skipped', m.records_skipped, 'records_late', m.records_late, " \
	"    'input_rate', m.input_rate, 'consumer_lag', m.consumer_lag, 'watermark', m.watermark, " \
	"    'watermark_delay_seconds', extract(epoch FROM clock_timestamp() - m.watermark)::float8, " \
	"    'last_checkpoint_epoch', m.last_checkpoint_epoch, " \
	"    'last_checkpoint_at', m.last_checkpoint_at, 'last_checkpoint_ms', m.last_checkpoint_ms, " \
	"    'state_bytes', m.state_bytes))"
#define SUMMARY_FROM_SQL " FROM mailer.jobs j JOIN mailer.metrics m ON m.name = j.name"

#define JOBS_SQL \
	"SELECT json_build_object('generated_at', clock_timestamp(), " \
	"         'jobs', coalesce(json_agg(" SUMMARY_SQL " ORDER BY j.name), '[]'))::text" \
	SUMMARY_FROM_SQL

#define JOB_SQL \
	"SELECT j.job_id, j.spec::text, " SUMMARY_SQL "::text, " \
	"       (SELECT coalesce(json_agg(json_build_object('subtask', p.subtask, 'topic', p.topic, " \
	"                 'partition', p.partition, 'position', p.position, 'end_offset', p.end_offset, " \
	"                 'lag', p.lag, 'records_in', p.records_in, 'watermark', p.watermark, " \
	"                 'idle', p.idle, 'ahead', p.ahead, 'offsets_skipped', p.offsets_skipped) " \
	"               ORDER BY p.subtask, p.topic, p.partition), '[]')::text " \
	"          FROM mailer.partition_metrics p WHERE p.name = j.name), " \
	"       (SELECT coalesce(json_agg(json_build_object('subtask', s.subtask, 'pid', s.pid, " \
	"                 'state', s.state, 'records_in', s.records_in, 'records_out', s.records_out, " \
	"                 'last_error', s.last_error) ORDER BY s.subtask), '[]')::text " \
	"          FROM mailer.subtasks s WHERE s.name = j.name), " \
	"       " TOPOLOGY_SQL "::text" \
	SUMMARY_FROM_SQL " WHERE j.name = $1"
#define Anum_job_id			1
#define Anum_job_spec		2
#define Anum_job_summary	3
#define Anum_job_partitions 4
#define Anum_job_subtasks	5
#define Anum_job_topology	6

#define DESCRIBE_SQL "SELECT mailer.describe_job($1::jsonb)"

/* describe_job's plan of a job's spec, kept while the spec stays the same. */
typedef struct JobPlanText
{
	int64		job_id;
	uint64		spec_hash;		/* of the stored spec the plan describes */
	size_t		spec_len;
	char	   *plan;
} JobPlanText;

static HttpQuery jobs_query = {JOBS_SQL};
static HttpQuery job_query = {JOB_SQL, 1};
static HttpQuery describe_query = {DESCRIBE_SQL, 1};

static List *plan_cache = NIL;	/* of JobPlanText, in TopMemoryContext */

/*
 * Bounded whatever jobs come and go, and however long their specs (a role
 * that may create jobs must not grow this process): at most this many
 * plans, the least recently asked for goes first, each cut to at most
 * PLAN_MAX_BYTES.  The cache keeps a hash of the spec, never the spec.
 */
#define PLAN_CACHE_SIZE 64
#define PLAN_MAX_BYTES	(64 * 1024)

static const char *cached_plan(int64 job_id, const char *spec);
static char *describe(const char *spec);
static void append_histogram(StringInfo out, Oid ext_oid, int64 job_id);
static void append_history(StringInfo out, Oid ext_oid, int64 job_id);

void
api_json_jobs(StringInfo out)
{
	bool		isnull;

	/* Not installed in mailer.database: no job. */
	if (!OidIsValid(get_extension_oid(MAILER_EXTENSION, true)))
	{
		appendStringInfoString(out, "{\"jobs\": []}");
		return;
	}
	SPI_connect();
	http_query_run(&jobs_query, NULL);
	appendStringInfoString(out, TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[0],
																  SPI_tuptable->tupdesc, 1, &isnull)));
	SPI_finish();
}

bool
api_json_job(const char *name, StringInfo out)
{
	Oid			ext_oid = get_extension_oid(MAILER_EXTENSION, true);
	Datum		values[1];
	HeapTuple	row;
	TupleDesc	desc;
	int64		job_id;
	char	   *summary;
	const char *plan;
	bool		isnull;

	if (!OidIsValid(ext_oid))
		return false;
	SPI_connect();
	/* The name only ever a parameter: no SQL is made from it. */
	values[0] = CStringGetTextDatum(name);
	http_query_run(&job_query, values);
	if (SPI_processed == 0)
	{
		SPI_finish();
		return false;
	}
	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	job_id = DatumGetInt64(SPI_getbinval(row, desc, Anum_job_id, &isnull));

	/* The summary's object, left open for the detail's fields. */
	summary = SPI_getvalue(row, desc, Anum_job_summary);
	Assert(summary[strlen(summary) - 1] == '}');
	appendBinaryStringInfo(out, summary, strlen(summary) - 1);
	appendStringInfoString(out, ", \"plan\": ");
	plan = cached_plan(job_id, SPI_getvalue(row, desc, Anum_job_spec));
	if (plan != NULL)
		escape_json(out, plan);
	else
		appendStringInfoString(out, "null");
	appendStringInfo(out, ", \"topology\": %s", SPI_getvalue(row, desc, Anum_job_topology));
	appendStringInfo(out, ", \"partitions\": %s", SPI_getvalue(row, desc, Anum_job_partitions));
	appendStringInfo(out, ", \"subtasks\": %s", SPI_getvalue(row, desc, Anum_job_subtasks));
	appendStringInfoString(out, ", \"checkpoint_duration\": ");
	append_histogram(out, ext_oid, job_id);
	appendStringInfoString(out, ", \"history\": ");
	append_history(out, ext_oid, job_id);
	appendStringInfoChar(out, '}');
	SPI_finish();
	return true;
}

static const char *
cached_plan(int64 job_id, const char *spec)
{
	size_t		spec_len = strlen(spec);
	uint64		spec_hash = hash_bytes_extended((const unsigned char *) spec, spec_len, 0);
	ListCell   *lc;
	JobPlanText *entry = NULL;
	MemoryContext old;
	char	   *plan;

	foreach(lc, plan_cache)
	{
		JobPlanText *c = lfirst(lc);

		if (c->job_id == job_id && c->spec_hash == spec_hash && c->spec_len == spec_len)
		{
			/* The most recently asked for goes last; the list lives as long as the cache. */
			plan_cache = foreach_delete_current(plan_cache, lc);
			old = MemoryContextSwitchTo(TopMemoryContext);
			plan_cache = lappend(plan_cache, c);
			MemoryContextSwitchTo(old);
			return c->plan;
		}
	}

	/*
	 * Not cached: describe it.  A refusal is not cached (it may pass: a
	 * lock, a table made again), and the cache changes only once the plan
	 * is in hand, so that an error on the way leaves it whole.
	 */
	plan = describe(spec);
	if (plan == NULL)
		return NULL;
	if (strlen(plan) > PLAN_MAX_BYTES)
	{
		int			cut = pg_mbcliplen(plan, strlen(plan), PLAN_MAX_BYTES);

		plan = psprintf("%.*s\n... (the plan is cut at %d bytes)", cut, plan, PLAN_MAX_BYTES);
	}
	/* The job's plan of an older spec is replaced; else, when full, the least recently asked for. */
	foreach(lc, plan_cache)
	{
		JobPlanText *c = lfirst(lc);

		if (c->job_id == job_id)
		{
			entry = c;
			plan_cache = foreach_delete_current(plan_cache, lc);
			break;
		}
	}
	if (entry == NULL && list_length(plan_cache) >= PLAN_CACHE_SIZE)
	{
		entry = linitial(plan_cache);
		plan_cache = list_delete_first(plan_cache);
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	if (entry != NULL)
		pfree(entry->plan);
	else
		entry = palloc(sizeof(JobPlanText));
	entry->job_id = job_id;
	entry->spec_hash = spec_hash;
	entry->spec_len = spec_len;
	entry->plan = pstrdup(plan);
	plan_cache = lappend(plan_cache, entry);
	MemoryContextSwitchTo(old);
	return entry->plan;
}

/*
 * describe_job's text, or NULL when it refuses the spec (its sink table
 * was dropped since, say): the rest of the detail still answers.  In a
 * subtransaction, so that its error is rolled back alone.
 */
static char *
describe(const char *spec)
{
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Datum		values[1] = {CStringGetTextDatum(spec)};
	char	   *volatile plan = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(context);
	PG_TRY();
	{
		http_query_run(&describe_query, values);
		if (SPI_processed == 1)
		{
			char	   *text = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

			MemoryContextSwitchTo(context);
			plan = text ? pstrdup(text) : NULL;
		}
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(context);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *error;

		MemoryContextSwitchTo(context);
		error = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(context);
		CurrentResourceOwner = owner;

		/*
		 * A cancel, a timeout or a lock waited for is the request's failure,
		 * not the spec's: the request fails (500), as any other would.
		 */
		if (error->sqlerrcode == ERRCODE_QUERY_CANCELED ||
			error->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(error);
		ereport(DEBUG1, (errmsg("mailer http worker: no plan for a job: %s", error->message)));
		plan = NULL;
	}
	PG_END_TRY();
	return plan;
}

/* The job's checkpoint durations, summed over its subtasks. */
static void
append_histogram(StringInfo out, Oid ext_oid, int64 job_id)
{
	const double *bounds = job_histogram_bounds_seconds;
	SlotHistograms *slots;
	int			n = slot_histograms_read(ext_oid, job_id, &slots);
	HistogramCounts sum = {0};

	for (int s = 0; s < n; s++)
		histogram_counts_add(&sum, &slots[s].checkpoint_duration);
	appendStringInfoString(out, "{\"bounds\": [");
	for (int b = 0; b < JOB_HISTOGRAM_BUCKETS - 1; b++)
		appendStringInfo(out, "%s%g", b > 0 ? ", " : "", bounds[b]);
	appendStringInfoString(out, "], \"counts\": [");
	for (int b = 0; b < JOB_HISTOGRAM_BUCKETS; b++)
		appendStringInfo(out, "%s" UINT64_FORMAT, b > 0 ? ", " : "", sum.cumulative[b]);
	appendStringInfo(out, "], \"count\": " UINT64_FORMAT ", \"sum\": %.6f}", sum.count, sum.sum_seconds);
}

/* One array of a history: a field of every sample, null where negative when nullable. */
#define APPEND_SERIES(out, samples, n, key, expr, nullable) \
	do { \
		appendStringInfoString(out, ", \"" key "\": ["); \
		for (int i_ = 0; i_ < (n); i_++) \
		{ \
			const JobHistorySample *s_ = &(samples)[i_]; \
			int64		v_ = (expr); \
			if (i_ > 0) \
				appendStringInfoString(out, ", "); \
			if ((nullable) && v_ < 0) \
				appendStringInfoString(out, "null"); \
			else \
				appendStringInfo(out, INT64_FORMAT, v_); \
		} \
		appendStringInfoChar(out, ']'); \
	} while (0)

/* The job's last minutes, a sample a second, oldest first, as parallel arrays. */
static void
append_history(StringInfo out, Oid ext_oid, int64 job_id)
{
	JobHistorySample *samples;
	int			n = job_history_read(ext_oid, job_id, &samples);

	appendStringInfoString(out, "{\"interval_seconds\": 1");
	APPEND_SERIES(out, samples, n, "at", s_->at, false);
	APPEND_SERIES(out, samples, n, "records_in", s_->records_in, false);
	APPEND_SERIES(out, samples, n, "records_out", s_->records_out, false);
	APPEND_SERIES(out, samples, n, "records_dead_lettered", s_->records_dead_lettered, false);
	APPEND_SERIES(out, samples, n, "records_late", s_->records_late, false);
	APPEND_SERIES(out, samples, n, "consumer_lag", s_->consumer_lag, true);
	APPEND_SERIES(out, samples, n, "last_checkpoint_ms", s_->last_checkpoint_ms, true);
	APPEND_SERIES(out, samples, n, "restarts", s_->restarts, false);
	/* In seconds, as the summary gives it. */
	appendStringInfoString(out, ", \"watermark_delay_seconds\": [");
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoString(out, ", ");
		if (samples[i].watermark_delay_ms < 0)
			appendStringInfoString(out, "null");
		else
			appendStringInfo(out, "%.3f", samples[i].watermark_delay_ms / 1000.0);
	}
	appendStringInfoString(out, "]}");
}
