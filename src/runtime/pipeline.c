/*
 * pipeline.c
 *		The per-batch work of a job: decode each message, take its event
 *		time, run the stateless steps, then hand the results to the keyed
 *		stage or the sink.
 *
 * A batch runs under guard_each: a record that raises an error alone is
 * dead-lettered (or skipped, or fails the job, per on_error) and the batch
 * goes on with the next: a bad record never costs its neighbours.  Nothing
 * a record does reaches the sink or the keyed state before the record has
 * passed every stateless step.
 *
 * Design: docs/ARCHITECTURE.md, "From a Kafka message to a table row".
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "base/bytea.h"
#include "base/guard.h"
#include "base/mailer.h"
#include "operators/keyed.h"
#include "operators/watermark.h"
#include "plan/json_fields.h"
#include "runtime/accounting.h"
#include "runtime/pipeline.h"
#include "runtime/shuffle.h"

/* The values of a record's outputs, one row an output. */
typedef struct OutputRows
{
	Datum	  **values;
	bool	  **nulls;
} OutputRows;

/*
 * A batch runs in chunks of up to PIPELINE_CHUNK messages, in two passes
 * over each.  The first (prepare_message) decodes a message, takes its
 * event time and runs its stateless steps; for the keyed stage it also
 * evaluates the aggregates' arguments, makes the group keys and takes the
 * hash of the cache slot each record will use.  The second
 * (finish_message) hands the results to the keyed stage, the shuffle or the
 * sink, having the CPU fetch the cache slots and entries of the records a
 * few ahead (prefetch_ahead).  A keyed job had a cache miss on the slot and
 * another on the entry for every record, about a sixth of its CPU
 * (BENCHMARKS.md, issue 16).  The first pass changes no state, so its
 * failures are kept and reported by the second, in the messages' order:
 * dead letters, counters and on_error "fail" see the same as when each
 * message went through whole.
 *
 * A chunk ends early (next_item) after a message whose first pass failed,
 * so that no later message's first pass runs before that failure is
 * reported: an error that is not the record's, which fails the batch at
 * once, must not overtake it.  It also ends once its messages have made
 * PIPELINE_CHUNK outputs (flat_map), so that a chunk holds no more records
 * than one message may make (mailer.max_outputs_per_record) plus a chunk.
 */
#define PIPELINE_CHUNK 64
#define PREFETCH_AHEAD 4

/* What the first pass made of a message, for the second. */
typedef struct Prepared
{
	List	   *outputs;		/* the finished records; NIL when filtered */
	bool		filtered;
	TimestampTz event_time;
	ErrorData  *error;			/* the first pass failed: thrown again by the second */
	const char *stage;			/* where it failed */
	/* The keyed stage's share, per output: */
	OutputRows	args;			/* the aggregates' arguments */
	StringInfoData *groups;		/* group keys (a parallel job's shuffle makes its own) */
	uint32		slot_hash;		/* the first output's cache hash (keyed_slot_hash), 0: none */
} Prepared;

typedef struct BatchRun
{
	Job		   *job;
	SourceMessage *msgs;
	int			n;
	int			current;		/* the message being processed, -1 when none */
	/* guard_each's items, message by message (next_item): */
	int			item;			/* the item being run, -1 before the first */
	int			chunk_start;	/* the current chunk's first message */
	int			chunk_len;		/* its messages through the first pass */
	int			chunk_outputs;	/* the outputs they made */
	int			finished;		/* -1: in the first pass; else its messages through the second */
	Prepared	prepared[PIPELINE_CHUNK];	/* of the current chunk */
} BatchRun;

static void prepare_message(Job *job, SourceMessage *msg, Prepared *p);
static void finish_message(Job *job, SourceMessage *msg, Prepared *p);
static void decode_message(Job *job, SourceMessage *msg, Record *rec);
static TimestampTz event_time_of(Job *job, SourceMessage *msg, Record *rec);
static void prepare_keyed(Job *job, Prepared *p);
static ShuffleRoute add_to_windows(Job *job, SourceMessage *msg, Prepared *p);
static void add_to_sink(Job *job, SourceMessage *msg, List *outputs);
static void run_steps(Job *job, Record *rec, int from, List **outputs, bool *filtered,
					  int *made);

/*
 * The message of guard_each's item i, which follows item i - 1 (done or
 * failed): a chunk's messages for the first pass, then the same messages
 * for the second, chunk after chunk.  Every message is an item in each
 * pass, so a run has 2 * n items however its chunks end.
 */
static int
next_item(BatchRun *run, int i, bool *first_pass)
{
	if (i != run->item)
	{
		Assert(i == run->item + 1);
		run->item = i;
		if (run->finished < 0 && run->chunk_len > 0)
		{
			Prepared   *last = &run->prepared[run->chunk_len - 1];

			run->chunk_outputs += list_length(last->outputs);
			if (last->error || run->chunk_len == PIPELINE_CHUNK ||
				run->chunk_outputs >= PIPELINE_CHUNK ||
				run->chunk_start + run->chunk_len == run->n)
				run->finished = 0;
		}
		else if (run->finished >= 0 && ++run->finished == run->chunk_len)
		{
			run->chunk_start += run->chunk_len;
			run->chunk_len = 0;
			run->chunk_outputs = 0;
			run->finished = -1;
		}
		if (run->finished < 0)
			run->chunk_len++;
	}
	*first_pass = run->finished < 0;
	return run->chunk_start + (*first_pass ? run->chunk_len - 1 : run->finished);
}

/*
 * Before the second pass adds the chunk's record o: each link of the
 * chain its lookup reads (keyed_prefetch) for the record that many records
 * ahead of it, the cache slot 2 * PREFETCH_AHEAD ahead, the entry it
 * points to PREFETCH_AHEAD ahead, whose slot has come in meanwhile, and a
 * session window's later links one, two and three records ahead.  The
 * first record of a chunk asks for those before them too.  (Slots asked
 * for in the first pass were gone from the CPU's caches again by the
 * second.)
 */
static void
prefetch_ahead(BatchRun *run, int o, int len)
{
	static const int ahead[KEYED_PREFETCH_LINKS] = {2 * PREFETCH_AHEAD, PREFETCH_AHEAD, 3, 2, 1};
	Prepared   *prepared = run->prepared;
	int			links = keyed_prefetch_links(run->job->keyed);

	for (int link = 0; link < links; link++)
	{
		for (int k = o == 0 ? 0 : o + ahead[link]; k <= o + ahead[link] && k < len; k++)
			if (prepared[k].slot_hash != 0 && prepared[k].error == NULL)
				keyed_prefetch(run->job->keyed, prepared[k].slot_hash, link);
	}
}

static void
run_item(void *arg, int i)
{
	BatchRun   *run = (BatchRun *) arg;
	bool		first_pass;
	int			m = next_item(run, i, &first_pass);
	int			start = run->chunk_start;
	Prepared   *p = &run->prepared[m - start];
	MemoryContext old;

	run->current = m;
	/*
	 * A chunk's work takes memory for that chunk only: what outlives it is
	 * copied where it goes (the sink's buffer, the keyed stage's cache, the
	 * outbox, dead letters).  The same few blocks serve every chunk, where
	 * a batch's worth of them would be faulted in afresh after each
	 * checkpoint's trim.
	 */
	if (first_pass && m == start)
		MemoryContextReset(run->job->record_context);
	old = MemoryContextSwitchTo(run->job->record_context);
	if (first_pass)
		prepare_message(run->job, &run->msgs[m], p);
	else
	{
		if (run->job->keyed)
			prefetch_ahead(run, m - start, run->chunk_len);
		finish_message(run->job, &run->msgs[m], p);
	}
	MemoryContextSwitchTo(old);
}

static void
item_failed(void *arg, int i, ErrorData *edata)
{
	BatchRun   *run = (BatchRun *) arg;
	bool		first_pass;
	int			m = next_item(run, i, &first_pass);
	int			start = run->chunk_start;

	/* A set-returning function may have been left mid-set. */
	ReScanExprContext(run->job->rt->econtext);
	if (first_pass)
	{
		/* edata lives in the batch's context (guard_each's) */
		run->prepared[m - start].error = edata;
		run->prepared[m - start].stage = run->job->stage;
		return;
	}
	if (run->job->keyed)
		keyed_abort_record(run->job->keyed);
	job_record_failed(run->job, &run->msgs[m], run->job->stage, guard_error_text(edata));
}

void
pipeline_process(Job *job, SourceMessage *msgs, int n)
{
	/*
	 * Too large for the stack (a chunk's Prepared), and not in the batch's
	 * context: a parallel job's shuffle_flush takes in the other subtasks'
	 * records between chunks, resetting that context after each message
	 * (shuffle_drain), while this batch goes on.  One worker runs one
	 * batch at a time, for one job at a time, so one run serves them all.
	 */
	static BatchRun *run = NULL;

	if (run == NULL)
		run = MemoryContextAlloc(TopMemoryContext, sizeof(BatchRun));

	run->job = job;
	run->current = -1;
	job->counters[JC_RECORDS_IN] += n;
	if (job->record_context == NULL)
		job->record_context = AllocSetContextCreate(job->job_context, "mailer record",
													0, 64 * 1024, ALLOCSET_DEFAULT_MAXSIZE);
	watermark_sync_partitions(job->watermarks, job->source);
	watermark_heard(job->watermarks, msgs, n);
	PG_TRY();
	{
		/*
		 * A parallel job sends what it routed away every so many records,
		 * so that an outbox stays small whatever the batch size.
		 */
		int			chunk = job->shuffle ? SHUFFLE_CHUNK : n;

		for (int start = 0; start < n; start += chunk)
		{
			run->msgs = msgs + start;
			run->n = Min(chunk, n - start);
			run->item = -1;
			run->chunk_start = run->chunk_len = run->chunk_outputs = 0;
			run->finished = -1;
			guard_each(2 * run->n, run_item, item_failed, run, job->batch_context);
			run->current = -1;
			if (job->shuffle)
				shuffle_flush(job);
		}
	}
	PG_CATCH();
	{
		/*
		 * An error that is not the record's (see guard_is_data_error) fails
		 * the batch and is retried.  When the same record meets it at every
		 * retry, the operator needs that record's position: last_error
		 * shows it.  Failing per on_error names the record already.
		 */
		int			current = run->current;

		if (current >= 0 && !job->failing)
		{
			SourceMessage *msg = &run->msgs[current];
			ErrorData  *edata;

			MemoryContextSwitchTo(job->batch_context);
			edata = CopyErrorData();
			FlushErrorState();
			edata->message = psprintf("record at %s partition %d offset " INT64_FORMAT " failed at %s: %s",
									  job->source->topic_names[msg->topic], msg->partition,
									  msg->offset, job->stage, edata->message);
			ReThrowError(edata);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextReset(job->record_context);
	MemoryContextReset(job->batch_context);
	ResetExprContext(job->rt->econtext);
	ResetExprContext(job->out_rt->econtext);
}

/*
 * The first pass over a message: every stage that changes nothing.  An
 * error here is kept for the second pass (item_failed).
 */
static void
prepare_message(Job *job, SourceMessage *msg, Prepared *p)
{
	Record	   *rec = record_alloc(job->plan->schema);
	int			made = 0;

	memset(p, 0, sizeof(Prepared));
	p->event_time = DT_NOBEGIN;
	job->stage = "decode";
	decode_message(job, msg, rec);
	job->stage = "event_time";
	rec->event_time = event_time_of(job, msg, rec);
	run_steps(job, rec, 0, &p->outputs, &p->filtered, &made);
	p->event_time = rec->event_time;
	if (p->outputs != NIL && job->plan->aggregated)
		prepare_keyed(job, p);
}

/* The second pass: the message's records into the keyed stage or the sink. */
static void
finish_message(Job *job, SourceMessage *msg, Prepared *p)
{
	if (p->error)
	{
		job->stage = p->stage;
		ReThrowError(p->error);
	}
	if (p->outputs == NIL && p->filtered)
		job->counters[JC_RECORDS_FILTERED]++;
	else if (job->plan->aggregated)
	{
		ShuffleRoute route = add_to_windows(job, msg, p);

		/* Another subtask owns the key: it counts the record. */
		if (route == SHUFFLE_LATE)
			job_record_late(job, msg, p->event_time);
		else if (route != SHUFFLE_SENT)
			job->counters[JC_RECORDS_ACCEPTED]++;
	}
	else
	{
		add_to_sink(job, msg, p->outputs);
		job->counters[JC_RECORDS_ACCEPTED]++;
	}

	/*
	 * Only a record that came through its steps tells the time: one that
	 * failed (a dead letter) might carry any event time at all.  Filtered
	 * and late records count: they are valid input.
	 */
	if (!TIMESTAMP_NOT_FINITE(p->event_time))
		watermark_observe(job->watermarks, msg->topic, msg->partition, p->event_time);
}

/* The record's event time: the spec's event_time, else the message's timestamp. */
static TimestampTz
event_time_of(Job *job, SourceMessage *msg, Record *rec)
{
	bool		isnull;
	Datum		d;
	TimestampTz t;

	if (job->plan->event_time == NULL)
	{
		/* Only a window needs an event time; other jobs take messages without one. */
		if (TIMESTAMP_NOT_FINITE(msg->timestamp) && job->plan->window)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("the message has no timestamp and the job has no event_time")));
		return msg->timestamp;
	}
	d = expr_eval(job->plan->event_time, job->rt, rec, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event_time is NULL")));
	t = DatumGetTimestampTz(d);
	if (TIMESTAMP_NOT_FINITE(t))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("event_time is not finite")));
	return t;
}

/* An array of n rows of width values, allocated in the current context. */
static OutputRows
output_rows_alloc(int n, int width)
{
	OutputRows	rows;

	rows.values = palloc(sizeof(Datum *) * n);
	rows.nulls = palloc(sizeof(bool *) * n);
	for (int i = 0; i < n; i++)
	{
		rows.values[i] = palloc(sizeof(Datum) * width);
		rows.nulls[i] = palloc(sizeof(bool) * width);
	}
	return rows;
}

/*
 * The keyed stage's share of a record that changes nothing: every output's
 * aggregate arguments (so that one that fails changes no state) and group
 * key, and the first one's cache hash (for prefetch_ahead).
 */
static void
prepare_keyed(Job *job, Prepared *p)
{
	int			n = list_length(p->outputs);
	StringInfoData key;

	job->stage = "aggregate";
	p->args = output_rows_alloc(n, Max(job->plan->naggs, 1));
	for (int i = 0; i < n; i++)
		keyed_eval_args(job->keyed, list_nth(p->outputs, i), p->args.values[i], p->args.nulls[i]);
	if (job->shuffle)
		return;
	/*
	 * One buffer makes the keys; each but a lone one is copied out at its
	 * size: a flat_map's many outputs would otherwise hold a buffer's 1 kB
	 * each.
	 */
	p->groups = palloc(sizeof(StringInfoData) * n);
	initStringInfo(&key);
	for (int i = 0; i < n; i++)
	{
		keyed_group_key(job->keyed, list_nth(p->outputs, i), &key);
		if (n == 1)
			p->groups[0] = key;
		else
		{
			p->groups[i].data = palloc(key.len + 1);
			memcpy(p->groups[i].data, key.data, key.len + 1);
			p->groups[i].len = key.len;
			p->groups[i].maxlen = key.len + 1;
			p->groups[i].cursor = 0;
		}
	}
	p->slot_hash = keyed_slot_hash(job->keyed, p->groups[0].data, p->groups[0].len,
								  ((Record *) linitial(p->outputs))->event_time);
}

/*
 * The rest of it: its outputs' arguments into their keys' windows.
 * SHUFFLE_LATE: the record was too late for any window; SHUFFLE_SENT: a
 * parallel job's other subtask owns its key.  (A parallel job has no
 * flat_map before its aggregate: one output.)
 */
static ShuffleRoute
add_to_windows(Job *job, SourceMessage *msg, Prepared *p)
{
	int			n = list_length(p->outputs);
	bool		in_a_window = false;

	job->stage = "aggregate";
	if (job->shuffle)
	{
		Assert(n == 1);
		return shuffle_route(job, msg, linitial(p->outputs), p->args.values[0], p->args.nulls[0]);
	}
	/* Several outputs: one that fails (an overflow) undoes the others. */
	if (n > 1)
		keyed_begin_record(job->keyed);
	for (int i = 0; i < n; i++)
		in_a_window |= keyed_add_group(job->keyed, p->groups[i].data, p->groups[i].len,
									   ((Record *) list_nth(p->outputs, i))->event_time,
									   p->args.values[i], p->args.nulls[i]);
	if (n > 1)
		keyed_end_record(job->keyed);
	return in_a_window ? SHUFFLE_ADDED : SHUFFLE_LATE;
}

/* A stateless job's share of a record: its outputs, cast, into the sink's buffer. */
static void
add_to_sink(Job *job, SourceMessage *msg, List *outputs)
{
	int			n = list_length(outputs);
	OutputRows	rows = output_rows_alloc(n, job->plan->sink_width);

	/* Cast every output first: a cast that fails sends nothing on. */
	job->stage = "sink";
	for (int i = 0; i < n; i++)
	{
		Record	   *rec = list_nth(outputs, i);

		if (rec->pending && rec->pending[FIELD_VALUE] && job->plan->json_fields->sink_reads_value)
			json_field_build(rec, FIELD_VALUE);
	}
	for (int i = 0; i < n; i++)
		sink_project(job->sink, job->out_rt, list_nth(outputs, i), rows.values[i], rows.nulls[i]);
	for (int i = 0; i < n; i++)
		sink_buffer_add(job->sink, rows.values[i], rows.nulls[i],
						job->source->topic_names[msg->topic], msg->partition, msg->offset);
}

static void
check_text(const char *what, const char *data, int len)
{
	if (memchr(data, '\0', len) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("%s contains a zero byte", what)));
	(void) pg_verify_mbstr(GetDatabaseEncoding(), data, len, false);
}

static void
decode_message(Job *job, SourceMessage *msg, Record *rec)
{
	RecordSchema *schema = job->plan->schema;

	if (msg->unreadable)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("%s", msg->unreadable),
				 errhint("Read the message from its source at the position the error names.")));
	if (msg->key)
	{
		check_text("message key", msg->key, msg->key_len);
		rec->values[FIELD_KEY] = PointerGetDatum(cstring_to_text_with_len(msg->key, msg->key_len));
		rec->isnull[FIELD_KEY] = false;
	}
	if (msg->value == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("message has no value (a tombstone)")));
	switch (job->spec->source.format)
	{
		case FORMAT_JSON:
			check_text("message value", msg->value, msg->value_len);
			if (job->plan->json_fields)
			{
				/* Built later, if at all (json_fields.h). */
				rec->isnull[FIELD_VALUE] = true;
				json_fields_extract(job->plan->json_fields, msg->value, msg->value_len, rec);
				break;
			}
			rec->values[FIELD_VALUE] = DirectFunctionCall1(jsonb_in,
														   CStringGetDatum(pnstrdup(msg->value, msg->value_len)));
			rec->isnull[FIELD_VALUE] = false;
			break;
		case FORMAT_TEXT:
			check_text("message value", msg->value, msg->value_len);
			rec->values[FIELD_VALUE] = PointerGetDatum(cstring_to_text_with_len(msg->value, msg->value_len));
			rec->isnull[FIELD_VALUE] = false;
			break;
		case FORMAT_BYTES:
			rec->values[FIELD_VALUE] = PointerGetDatum(mailer_bytea(msg->value, msg->value_len));
			rec->isnull[FIELD_VALUE] = false;
			break;
	}
	rec->values[FIELD_TOPIC] = job->topic_datums[msg->topic];
	rec->isnull[FIELD_TOPIC] = false;
	rec->values[FIELD_PARTITION] = Int32GetDatum(msg->partition);
	rec->isnull[FIELD_PARTITION] = false;
	rec->values[FIELD_OFFSET] = Int64GetDatum(msg->offset);
	rec->isnull[FIELD_OFFSET] = false;
	rec->values[FIELD_TIMESTAMP] = TimestampTzGetDatum(msg->timestamp);
	rec->isnull[FIELD_TIMESTAMP] = TIMESTAMP_NOT_FINITE(msg->timestamp);
	if (schema->fields[FIELD_HEADERS].referenced)
	{
		Jsonb	   *headers = job->source->ops->headers(job->source, msg);

		rec->values[FIELD_HEADERS] = JsonbPGetDatum(headers);
		rec->isnull[FIELD_HEADERS] = headers == NULL;
	}
}

/*
 * The stateless steps from 'from' on; finished records go to outputs.
 * 'made' counts the records flat_map steps made from the input record.
 */
static void
run_steps(Job *job, Record *rec, int from, List **outputs, bool *filtered, int *made)
{
	JobPlan    *plan = job->plan;

	for (int i = from; i < plan->nsteps; i++)
	{
		StatelessStep *st = plan->steps[i];
		bool		isnull;
		Datum		d;

		job->stage = step_kind_names[st->kind];
		switch (st->kind)
		{
			case STEP_FILTER:
				d = expr_eval(st->expr, job->rt, rec, &isnull);
				if (isnull || !DatumGetBool(d))
				{
					*filtered = true;
					return;
				}
				break;
			case STEP_MAP:
			case STEP_KEY_BY:
				{
					Datum	   *values = palloc(sizeof(Datum) * st->nexprs);
					bool	   *nulls = palloc(sizeof(bool) * st->nexprs);

					/* Every field of the step sees the record as it was before it. */
					for (int j = 0; j < st->nexprs; j++)
					{
						values[j] = expr_eval(st->exprs[j], job->rt, rec, &nulls[j]);
						if (nulls[j] && st->kind == STEP_KEY_BY)
							ereport(ERROR,
									(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
									 errmsg("key field \"%s\" is NULL",
											plan->schema->fields[st->slots[j]].name)));
					}
					for (int j = 0; j < st->nexprs; j++)
					{
						rec->values[st->slots[j]] = values[j];
						rec->isnull[st->slots[j]] = nulls[j];
					}
				}
				break;
			case STEP_FLAT_MAP:
				for (;;)
				{
					bool		done;
					Record	   *out;

					/* One record may make a set of any size: stay stoppable. */
					CHECK_FOR_INTERRUPTS();
					d = expr_eval_set(st->expr, job->rt, rec, &isnull, &done);
					if (done)
						break;

					/*
					 * Unbounded output (generate_series over a huge count)
					 * would exhaust memory, an error that is not the
					 * record's, and so come back at every restart: make it
					 * the record's own error, a dead letter.
					 */
					if (++(*made) > mailer_max_outputs_per_record)
						ereport(ERROR,
								(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
								 errmsg("%s (flat_map) made more than %d records from one input record",
										st->path, mailer_max_outputs_per_record),
								 errdetail("The limit is mailer.max_outputs_per_record."),
								 errhint("Filter such records out before the flat_map, or raise mailer.max_outputs_per_record.")));
					out = record_copy(plan->schema, rec);

					/*
					 * A set function that materializes its set (a tuplestore)
					 * returns values in the set's memory, freed when the set
					 * ends, before the record goes on to its second pass.
					 */
					if (!isnull)
						d = datumCopy(d, plan->schema->fields[st->slots[0]].typbyval,
									  plan->schema->fields[st->slots[0]].typlen);
					out->values[st->slots[0]] = d;
					out->isnull[st->slots[0]] = isnull;
					run_steps(job, out, i + 1, outputs, filtered, made);
					job->stage = step_kind_names[st->kind];
				}
				return;
			case STEP_WINDOW:
			case STEP_AGGREGATE:
				break;
		}
	}
	*outputs = lappend(*outputs, rec);
}
