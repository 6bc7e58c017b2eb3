/*
 * prometheus.c
 *		/metrics: mailer.jobs, mailer.metrics, mailer.partition_metrics and
 *		mailer.subtasks read by SPI, and the slots' histograms, in
 *		Prometheus's text exposition format (version 0.0.4).
 *
 * Each query names its columns after the labels and values the families
 * below read, so that one loop renders every family.  A value that is
 * NULL (no lag known, no watermark yet) leaves its series out: an absent
 * series is how Prometheus says "unknown".
 */
#include "postgres.h"

#include "commands/extension.h"
#include "executor/spi.h"
#include "utils/builtins.h"

#include "base/mailer.h"
#include "http/counter_marks.h"
#include "http/http_xact.h"
#include "http/prometheus.h"
#include "http/slot_histograms.h"

/* One row per job: its labels, and a column per value. */
#define JOBS_SQL \
	"SELECT j.job_id, j.name AS job, j.state, " \
	"       (j.state IN ('running', 'waiting') AND j.pid IS NOT NULL)::int AS up, " \
	"       (j.state = 'waiting')::int AS waiting, 1 AS current, " \
	"       (j.last_error IS NOT NULL)::int AS has_error, j.restarts, j.parallelism, " \
	"       m.records_in, m.records_accepted, m.records_out, m.records_filtered, " \
	"       m.records_dead_lettered, m.records_skipped, m.records_late, " \
	"       m.input_rate, m.consumer_lag, m.state_bytes, " \
	"       extract(epoch FROM clock_timestamp() - m.watermark)::float8 AS watermark_delay, " \
	"       extract(epoch FROM coalesce(m.last_checkpoint_at, j.created_at))::float8 AS last_checkpoint, " \
	"       extract(epoch FROM j.last_error_at)::float8 AS last_error_at, " \
	"       c.last_cut_epoch, c.cuts_skipped, c.cuts_partial, c.cut_records_malformed, " \
	"       c.cut_held_seconds, c.cut_rewinds, c.cut_holding_epoch " \
	"  FROM mailer.jobs j JOIN mailer.metrics m ON m.name = j.name " \
	/* barrier cuts' series for the jobs that checkpoint at cuts only */ \
	"  LEFT JOIN mailer.metrics c ON c.name = j.name " \
	"       AND j.spec -> 'source' ->> 'barrier_group' IS NOT NULL " \
	" ORDER BY j.name"
#define Anum_jobs_job_id 1
#define Anum_jobs_name	2

#define PARTITIONS_SQL \
	"SELECT name AS job, subtask, topic, partition, records_in, lag, offsets_skipped, " \
	"       extract(epoch FROM clock_timestamp() - watermark)::float8 AS watermark_delay " \
	"  FROM mailer.partition_metrics ORDER BY 1, 2, 3, 4"

/* The subtasks of parallel jobs only: a job of one has its job series. */
#define SUBTASKS_SQL \
	"SELECT s.name AS job, s.subtask, s.records_in, s.records_out, " \
	"       (s.pid IS NOT NULL AND s.state IN ('running', 'waiting'))::int AS up " \
	"  FROM mailer.subtasks s JOIN mailer.job j ON j.name = s.name " \
	" WHERE coalesce((j.spec ->> 'parallelism')::int, 1) > 1 " \
	" ORDER BY 1, 2"

#define MAX_LABELS 4

typedef struct Family
{
	const char *name;
	const char *type;
	const char *help;
	const char *column;			/* the value's column */
	const char *labels[MAX_LABELS]; /* the labels' columns, named as the labels */
} Family;

#define JOB_LABELS {"job"}
#define PARTITION_LABELS {"job", "subtask", "topic", "partition"}
#define SUBTASK_LABELS {"job", "subtask"}

static const Family job_families[] = {
	{"mailer_records_in_total", "counter", "Records read from the job's source.", "records_in", JOB_LABELS},
	{"mailer_records_accepted_total", "counter", "Records that passed the job's steps.", "records_accepted", JOB_LABELS},
	{"mailer_records_out_total", "counter", "Rows or records the job's sink wrote.", "records_out", JOB_LABELS},
	{"mailer_records_filtered_total", "counter", "Records a filter step dropped.", "records_filtered", JOB_LABELS},
	{"mailer_records_dead_lettered_total", "counter", "Records that failed a step and became dead letters.", "records_dead_lettered", JOB_LABELS},
	{"mailer_records_skipped_total", "counter", "Records that failed a step and were skipped (on_error: skip).", "records_skipped", JOB_LABELS},
	{"mailer_records_late_total", "counter", "Records that came after their window closed.", "records_late", JOB_LABELS},
	{"mailer_job_restarts_total", "counter", "Times the launcher restarted the job's worker after a failure.", "restarts", JOB_LABELS},
	{"mailer_job_up", "gauge", "1 when the job's worker runs (state running or waiting), else 0.", "up", JOB_LABELS},
	{"mailer_job_waiting", "gauge", "1 when the job waits on an outside fault (state waiting).", "waiting", JOB_LABELS},
	{"mailer_job_state", "gauge", "1 for the job's current state.", "current", {"job", "state"}},
	{"mailer_job_last_error", "gauge", "1 when the job has a last error (mailer.jobs.last_error, kept after it recovered), else 0.", "has_error", JOB_LABELS},
	{"mailer_job_parallelism", "gauge", "Subtasks of the job.", "parallelism", JOB_LABELS},
	{"mailer_consumer_lag", "gauge", "Records in the source's partitions not read yet.", "consumer_lag", JOB_LABELS},
	{"mailer_watermark_delay_seconds", "gauge", "How far the job's watermark is behind the clock.", "watermark_delay", JOB_LABELS},
	{"mailer_state_bytes", "gauge", "Bytes of the job's keyed state.", "state_bytes", JOB_LABELS},
	{"mailer_input_rate", "gauge", "Records read per second, smoothed.", "input_rate", JOB_LABELS},
	{"mailer_last_checkpoint_timestamp_seconds", "gauge", "When the job's newest checkpoint committed, or, before its first, when it was created (Unix time): alert on its age to catch a stuck job.", "last_checkpoint", JOB_LABELS},
	{"mailer_job_last_error_timestamp_seconds", "gauge", "When the job's last error happened (Unix time); absent when it has none.", "last_error_at", JOB_LABELS},
	{"mailer_cuts_skipped_total", "counter", "Barrier cuts the job skipped: its last checkpoint was past their markers.", "cuts_skipped", JOB_LABELS},
	{"mailer_cuts_partial_total", "counter", "Partial barrier cuts of the job's group seen (skipped); counted again by each worker.", "cuts_partial", JOB_LABELS},
	{"mailer_cut_records_malformed_total", "counter", "Records of the barrier topic that were not of the cut format (skipped); counted again by each worker.", "cut_records_malformed", JOB_LABELS},
	{"mailer_cut_rewinds_total", "counter", "Times the job went back to its checkpoint to take a barrier cut it had read past.", "cut_rewinds", JOB_LABELS},
	{"mailer_last_cut_epoch", "gauge", "The epoch of the last barrier cut the job checkpointed at.", "last_cut_epoch", JOB_LABELS},
	{"mailer_cut_holding_epoch", "gauge", "The barrier cut the job is held at now; absent when none.", "cut_holding_epoch", JOB_LABELS},
	{"mailer_cut_held_seconds", "gauge", "Seconds the job was held at barrier cuts in all, from learning of each to its checkpoint.", "cut_held_seconds", JOB_LABELS},
};

static const Family partition_families[] = {
	{"mailer_partition_records_in_total", "counter", "Records read from the partition. For a Kafka source the checkpoints carry it over restarts (after a crash it steps back to the last checkpoint's count); a generator's starts at 0 with each worker.", "records_in", PARTITION_LABELS},
	{"mailer_partition_consumer_lag", "gauge", "Records in the partition not read yet.", "lag", PARTITION_LABELS},
	{"mailer_partition_watermark_delay_seconds", "gauge", "How far the partition's watermark is behind the clock.", "watermark_delay", PARTITION_LABELS},
	{"mailer_partition_offsets_skipped_total", "counter", "Offsets deleted (retention) before the job read them.", "offsets_skipped", PARTITION_LABELS},
};

static const Family subtask_families[] = {
	{"mailer_subtask_records_in_total", "counter", "Records the subtask read.", "records_in", SUBTASK_LABELS},
	{"mailer_subtask_records_out_total", "counter", "Rows or records the subtask's sink wrote.", "records_out", SUBTASK_LABELS},
	{"mailer_subtask_up", "gauge", "1 when the subtask's worker runs.", "up", SUBTASK_LABELS},
};

static SPITupleTable *query(HttpQuery *query);

static HttpQuery jobs_query = {JOBS_SQL};
static HttpQuery partitions_query = {PARTITIONS_SQL};
static HttpQuery subtasks_query = {SUBTASKS_SQL};
static void render_families(StringInfo out, const Family *families, int n, SPITupleTable *rows,
							bool job_counters_go_up);
static void render_histograms(StringInfo out, SPITupleTable *jobs, Oid ext_oid);
static void render_histogram(StringInfo out, const char *name, const char *job, int subtask,
							 const HistogramCounts *h, const double *bounds);
static void append_header(StringInfo out, const char *name, const char *type, const char *help);
static void append_label_value(StringInfo out, const char *value);

void
prometheus_render(StringInfo out)
{
	Oid			ext_oid = get_extension_oid(MAILER_EXTENSION, true);
	SPITupleTable *jobs;

	/* Not installed in mailer.database: no job, so no series. */
	counter_marks_begin(ext_oid);
	if (!OidIsValid(ext_oid))
		return;
	SPI_connect();
	jobs = query(&jobs_query);
	render_families(out, job_families, lengthof(job_families), jobs, true);
	counter_marks_end();
	/* A subtask's and a partition's count for one run of a worker: they are reset, truly. */
	render_families(out, partition_families, lengthof(partition_families), query(&partitions_query), false);
	render_families(out, subtask_families, lengthof(subtask_families), query(&subtasks_query), false);
	render_histograms(out, jobs, ext_oid);
	SPI_finish();
}

static SPITupleTable *
query(HttpQuery *query)
{
	http_query_run(query, NULL);
	return SPI_tuptable;
}

/*
 * Each family whole (Prometheus wants a family's series together), header
 * first.  With job_counters_go_up, the rows are mailer.jobs' (their first
 * column the job id), and a counter is never said lower than before
 * (counter_marks.c).
 */
static void
render_families(StringInfo out, const Family *families, int n, SPITupleTable *rows,
				bool job_counters_go_up)
{
	TupleDesc	desc = rows->tupdesc;

	for (int f = 0; f < n; f++)
	{
		const Family *family = &families[f];
		int			column = SPI_fnumber(desc, family->column);
		int			labels[MAX_LABELS];
		int			nlabels = 0;

		for (; nlabels < MAX_LABELS && family->labels[nlabels] != NULL; nlabels++)
			labels[nlabels] = SPI_fnumber(desc, family->labels[nlabels]);
		append_header(out, family->name, family->type, family->help);
		for (uint64 r = 0; r < rows->numvals; r++)
		{
			HeapTuple	row = rows->vals[r];
			char	   *value = SPI_getvalue(row, desc, column);

			if (value == NULL)
				continue;
			if (job_counters_go_up && strcmp(family->type, "counter") == 0)
			{
				bool		isnull;
				int64		job_id = DatumGetInt64(SPI_getbinval(row, desc, Anum_jobs_job_id, &isnull));

				StaticAssertStmt(lengthof(job_families) <= COUNTER_MARKS_PER_JOB,
								 "a mark for each of a job's families");
				value = psprintf(INT64_FORMAT,
								 counter_marks_apply(job_id, f, pg_strtoint64(value)));
			}
			appendStringInfo(out, "%s{", family->name);
			for (int l = 0; l < nlabels; l++)
			{
				appendStringInfo(out, "%s%s=\"", l > 0 ? "," : "", family->labels[l]);
				append_label_value(out, SPI_getvalue(row, desc, labels[l]));
				appendStringInfoChar(out, '"');
			}
			/* float8's text, but for Prometheus's spelling of the infinities */
			appendStringInfo(out, "} %s\n",
							 strcmp(value, "Infinity") == 0 ? "+Inf" :
							 strcmp(value, "-Infinity") == 0 ? "-Inf" : value);
		}
	}
}

/* The histograms of the jobs the query found, by subtask. */
static void
render_histograms(StringInfo out, SPITupleTable *jobs, Oid ext_oid)
{
	const double *bounds = job_histogram_bounds_seconds;
	SlotHistograms *slots;
	int			n = slot_histograms_read(ext_oid, 0, &slots);
	char	  **names = palloc0(sizeof(char *) * Max(n, 1));

	for (int s = 0; s < n; s++)
		for (uint64 r = 0; r < jobs->numvals && names[s] == NULL; r++)
		{
			bool		isnull;
			Datum		id = SPI_getbinval(jobs->vals[r], jobs->tupdesc, Anum_jobs_job_id, &isnull);

			if (DatumGetInt64(id) == slots[s].job_id)
				names[s] = SPI_getvalue(jobs->vals[r], jobs->tupdesc, Anum_jobs_name);
		}

	append_header(out, "mailer_checkpoint_duration_seconds", "histogram",
				  "Wall time of each committed checkpoint, since the worker started.");
	for (int s = 0; s < n; s++)
		if (names[s] != NULL)
			render_histogram(out, "mailer_checkpoint_duration_seconds", names[s],
							 slots[s].subtask, &slots[s].checkpoint_duration, bounds);
	append_header(out, "mailer_produce_to_commit_latency_seconds", "histogram",
				  "From a record's Kafka timestamp to the commit of the checkpoint that has its output, since the worker started.");
	for (int s = 0; s < n; s++)
		if (names[s] != NULL)
			render_histogram(out, "mailer_produce_to_commit_latency_seconds", names[s],
							 slots[s].subtask, &slots[s].produce_to_commit, bounds);
}

static void
render_histogram(StringInfo out, const char *name, const char *job, int subtask,
				 const HistogramCounts *h, const double *bounds)
{
	StringInfoData labels;

	initStringInfo(&labels);
	appendStringInfoString(&labels, "job=\"");
	append_label_value(&labels, job);
	appendStringInfo(&labels, "\",subtask=\"%d\"", subtask);
	for (int b = 0; b < JOB_HISTOGRAM_BUCKETS; b++)
	{
		if (b < JOB_HISTOGRAM_BUCKETS - 1)
			appendStringInfo(out, "%s_bucket{%s,le=\"%g\"} " UINT64_FORMAT "\n",
							 name, labels.data, bounds[b], h->cumulative[b]);
		else
			appendStringInfo(out, "%s_bucket{%s,le=\"+Inf\"} " UINT64_FORMAT "\n",
							 name, labels.data, h->count);
	}
	appendStringInfo(out, "%s_sum{%s} %.6f\n", name, labels.data, h->sum_seconds);
	appendStringInfo(out, "%s_count{%s} " UINT64_FORMAT "\n", name, labels.data, h->count);
}

static void
append_header(StringInfo out, const char *name, const char *type, const char *help)
{
	appendStringInfo(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label's value, escaped as the format wants: backslash, quote, newline. */
static void
append_label_value(StringInfo out, const char *value)
{
	for (const char *p = value ? value : ""; *p; p++)
	{
		if (*p == '\\')
			appendStringInfoString(out, "\\\\");
		else if (*p == '"')
			appendStringInfoString(out, "\\\"");
		else if (*p == '\n')
			appendStringInfoString(out, "\\n");
		else
			appendStringInfoChar(out, *p);
	}
}
