/*
 * job_functions.c
 *		The SQL functions that define and control jobs (mailer.create_job,
 *		describe_job, start_job, stop_job, drop_job, restore_job, alter_job,
 *		wait_job).
 *
 * They run as the caller: a spec is validated with the caller's privileges
 * and the caller becomes the owner.  They write mailer's tables through
 * catalog.c, and wake the launcher once their transaction commits, so the
 * launcher never acts on a change that was rolled back.
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "api/job_control.h"
#include "base/mailer.h"
#include "base/test_point.h"
#include "jobs/catalog.h"
#include "jobs/job_slots.h"
#include "plan/plan.h"
#include "plan/spec.h"
#include "plan/spec_error.h"
#include "runtime/epoch_commit.h"

PG_FUNCTION_INFO_V1(mailer_create_job);
PG_FUNCTION_INFO_V1(mailer_describe_job);
PG_FUNCTION_INFO_V1(mailer_start_job);
PG_FUNCTION_INFO_V1(mailer_stop_job);
PG_FUNCTION_INFO_V1(mailer_drop_job);
PG_FUNCTION_INFO_V1(mailer_restore_job);
PG_FUNCTION_INFO_V1(mailer_wait_job);
PG_FUNCTION_INFO_V1(mailer_alter_job);

/* The column of create_job's statement. */
#define Anum_created_job_id			1

/* The columns of restore_job's statement. */
#define Anum_retained_epochs		1
#define Anum_retained_epoch_found	2

static void check_job_name(const char *name);
static int64 epoch_of_cut(JobRow *job, int64 cut_epoch);
static Jsonb *normalize_spec(Jsonb *spec_doc, bool check_settings);
static void require_stopped(JobRow *job, const char *what);
static long interval_to_ms(Interval *iv);
static void exec_job_update(const char *sql, int64 job_id);
static void wait_job_progress(const char *name, int64 job_id, Oid ext_oid, TimestampTz started);

/* How often mailer.wait_job says how far the job has come. */
#define WAIT_JOB_PROGRESS_MS		5000

Datum
mailer_create_job(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Jsonb	   *spec_doc = PG_GETARG_JSONB_P(1);
	Jsonb	   *redacted;
	Jsonb	   *secrets;
	HeapTuple	role;
	bool		can_login;
	int64		job_id;
	Oid			types[5] = {TEXTOID, OIDOID, JSONBOID, TEXTOID, JSONBOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	begin_reading_spec("create_job", name);
	mailer_require_preload();
	check_job_name(name);

	/* The worker logs in as the owner, so the owner must be able to. */
	role = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
	can_login = ((Form_pg_authid) GETSTRUCT(role))->rolcanlogin;
	ReleaseSysCache(role);
	if (!can_login)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" cannot own a job because it cannot log in",
						GetUserNameFromId(GetUserId(), false)),
				 errdetail("A job's worker connects as the job's owner."),
				 errhint("Create the job as a role with LOGIN, or ALTER ROLE ... LOGIN.")));

	if (catalog_get_job_by_name(name, true) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("job \"%s\" already exists", name),
				 errhint("Choose another name, or drop the job first with mailer.drop_job('%s').", name)));

	spec_doc = normalize_spec(spec_doc, true);

	redacted = spec_redact(spec_doc, &secrets);
	values[0] = CStringGetTextDatum(name);
	values[1] = ObjectIdGetDatum(GetUserId());
	values[2] = JsonbPGetDatum(redacted);
	values[3] = CStringGetTextDatum(namespace_search_path);
	values[4] = secrets ? JsonbPGetDatum(secrets) : (Datum) 0;
	if (secrets == NULL)
		nulls[4] = 'n';

	SPI_connect();
	PG_TRY();
	{
		catalog_exec("WITH j AS (INSERT INTO mailer.job (name, owner, spec, search_path) "
					 "VALUES ($1, $2::pg_catalog.regrole, $3, $4) RETURNING job_id), "
					 "s AS (INSERT INTO mailer.job_secret (job_id, secrets) "
					 "SELECT job_id, $5 FROM j WHERE $5 IS NOT NULL), "
					 "st AS (INSERT INTO mailer.job_status (job_id) SELECT job_id FROM j) "
					 "SELECT job_id FROM j",
					 5, types, values, nulls, false);
	}
	PG_CATCH();
	{
		/* Another create_job of the name committed after our check above. */
		if (geterrcode() == ERRCODE_UNIQUE_VIOLATION)
		{
			FlushErrorState();
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("job \"%s\" already exists", name),
					 errhint("Choose another name, or drop the job first with mailer.drop_job('%s').", name)));
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	job_id = DatumGetInt64(catalog_value(0, Anum_created_job_id, NULL));
	SPI_finish();

	job_control_wake_launcher_after_commit();
	end_reading_spec();
	PG_RETURN_INT64(job_id);
}

Datum
mailer_describe_job(PG_FUNCTION_ARGS)
{
	Jsonb	   *spec_doc = PG_GETARG_JSONB_P(0);
	JobSpec    *spec;
	JobPlan    *plan;
	text	   *result;

	begin_reading_spec("describe_job", NULL);
	spec = spec_parse(spec_doc);
	spec_check_settings(spec);
	/* Judged as if the caller created the job: nothing reaches librdkafka otherwise. */
	spec_set_owner(spec, GetUserId());
	plan = plan_compile(spec, true);
	result = cstring_to_text(plan_describe(plan));
	end_reading_spec();
	PG_RETURN_TEXT_P(result);
}

Datum
mailer_start_job(PG_FUNCTION_ARGS)
{
	JobRow	   *job = catalog_get_job_by_name(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);

	mailer_require_preload();
	catalog_check_owner(job, "start");
	wait_for_launcher_to_settle(job, true, 60 * 1000L);
	exec_job_update("UPDATE mailer.job SET desired_state = 'running' "
					"WHERE job_id OPERATOR(pg_catalog.=) $1", job->job_id);
	/* A finished, failed or stopped job runs again from its last checkpoint. */
	exec_job_update("UPDATE mailer.job_status SET state = 'starting', changed_at = pg_catalog.now() "
					"WHERE job_id OPERATOR(pg_catalog.=) $1 "
					"AND state OPERATOR(pg_catalog.=) ANY ('{stopped,finished,failed}')", job->job_id);
	job_control_wake_launcher_after_commit();
	/* A job that was meant to run and has not ended is what it was. */
	PG_RETURN_TEXT_P(cstring_to_text(job_state_name(job->desired_state == JOB_STATE_RUNNING &&
													job->state != JOB_STATE_STOPPED &&
													!job_state_is_terminal(job->state) ?
													job->state : JOB_STATE_STARTING)));
}

Datum
mailer_stop_job(PG_FUNCTION_ARGS)
{
	JobRow	   *job = catalog_get_job_by_name(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	long		timeout_ms = interval_to_ms(PG_GETARG_INTERVAL_P(1));

	mailer_require_preload();
	catalog_check_owner(job, "stop");
	exec_job_update("UPDATE mailer.job SET desired_state = 'stopped' "
					"WHERE job_id OPERATOR(pg_catalog.=) $1", job->job_id);
	request_stop_and_wait(job, timeout_ms);
	job_control_wake_launcher_after_commit();
	PG_RETURN_TEXT_P(cstring_to_text(job_state_name(job_state_after_stop(job->state))));
}

Datum
mailer_drop_job(PG_FUNCTION_ARGS)
{
	JobRow	   *job = catalog_get_job_by_name(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);

	mailer_require_preload();
	catalog_check_owner(job, "drop");
	request_stop_and_wait(job, 60 * 1000L);
	/* No worker of the job runs from here on: none could write after the rows are gone. */
	if (!job_lock_wait(job, get_extension_oid(MAILER_EXTENSION, false), 60 * 1000L))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("job \"%s\" cannot be dropped while a worker of it runs", job->name),
				 errhint("Try again in a moment.")));
	/* Checkpoints, dead letters and state rows go with it; the launcher removes its files. */
	exec_job_update("DELETE FROM mailer.job WHERE job_id OPERATOR(pg_catalog.=) $1", job->job_id);
	exec_job_update("DELETE FROM mailer.memory_state WHERE job_id OPERATOR(pg_catalog.=) $1", job->job_id);
	exec_job_update("DELETE FROM mailer.memory_undo WHERE job_id OPERATOR(pg_catalog.=) $1", job->job_id);
	exec_job_update("DELETE FROM mailer.memory_redo WHERE job_id OPERATOR(pg_catalog.=) $1", job->job_id);
	exec_job_update("DELETE FROM mailer.kafka_outbox WHERE job_id OPERATOR(pg_catalog.=) $1", job->job_id);
	job_control_wake_launcher_after_commit();
	PG_RETURN_INT64(job->job_id);
}

Datum
mailer_restore_job(PG_FUNCTION_ARGS)
{
	JobRow	   *job;
	int64		epoch;
	Oid			types[2] = {INT8OID, INT8OID};
	Datum		values[2];
	bool		isnull;
	char	   *retained;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) == PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("restore_job needs a job name and either an epoch or a cut epoch"),
				 errhint("Call mailer.restore_job(name, epoch) or mailer.restore_job(name, cut_epoch => e).")));
	job = catalog_get_job_by_name(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	mailer_require_preload();
	catalog_check_owner(job, "restore");
	require_stopped(job, "restored");

	values[0] = Int64GetDatum(job->job_id);
	SPI_connect();
	epoch = PG_ARGISNULL(1) ? epoch_of_cut(job, PG_GETARG_INT64(2)) : PG_GETARG_INT64(1);
	values[1] = Int64GetDatum(epoch);
	catalog_exec("SELECT pg_catalog.string_agg(epoch::pg_catalog.text, ', ' ORDER BY epoch), "
				 "pg_catalog.bool_or(epoch OPERATOR(pg_catalog.=) $2) "
				 "FROM mailer.checkpoints WHERE job_id OPERATOR(pg_catalog.=) $1 "
				 /* subtask 0's row is an epoch's commit decision: one per epoch */
				 "AND subtask OPERATOR(pg_catalog.=) 0",
				 2, types, values, NULL, false);
	retained = catalog_text(0, Anum_retained_epochs);
	if (!DatumGetBool(catalog_value(0, Anum_retained_epoch_found, &isnull)) || isnull)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job \"%s\" has no retained checkpoint " INT64_FORMAT, job->name, epoch),
				 retained ? errhint("Retained epochs: %s.", retained) :
				 errhint("The job has no checkpoint yet.")));

	/*
	 * Forget everything after the epoch: replaying from it produces those
	 * dead letters and checkpoints again.  The worker removes newer RocksDB
	 * checkpoints, and rewinds the memory state, when it recovers.
	 */
	catalog_exec("DELETE FROM mailer.checkpoints WHERE job_id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.>) $2",
				 2, types, values, NULL, false);
	catalog_exec("DELETE FROM mailer.dead_letters WHERE job_id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.>) $2",
				 2, types, values, NULL, false);
	catalog_exec("DELETE FROM mailer.job_cuts WHERE job_id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.>) $2",
				 2, types, values, NULL, false);

	/*
	 * A Kafka sink: the output of the forgotten epochs is made again, and
	 * published again (a consumer sees it twice).  A new generation makes
	 * the broker's epoch marker, which may be past the epoch, an old one,
	 * believed up to restored_to; the progress row, moved back with the
	 * job, decides past it (docs/ARCHITECTURE.md, "The Kafka sink").
	 */
	catalog_exec("DELETE FROM mailer.kafka_outbox WHERE job_id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.>) $2",
				 2, types, values, NULL, false);
	catalog_exec("UPDATE mailer.kafka_sink_progress SET generation = generation OPERATOR(pg_catalog.+) 1, "
				 "published_epoch = LEAST(published_epoch, $2), "
				 "restored_to = LEAST(coalesce(restored_to, $2), $2) WHERE job_id OPERATOR(pg_catalog.=) $1",
				 2, types, values, NULL, false);
	catalog_exec("UPDATE mailer.job_status SET state = 'stopped', changed_at = pg_catalog.now() "
				 "WHERE job_id OPERATOR(pg_catalog.=) $1", 1, types, values, NULL, false);
	SPI_finish();
	PG_RETURN_INT64(epoch);
}

/* The epoch of the job's retained checkpoint at a barrier cut; ERROR if there is none. */
static int64
epoch_of_cut(JobRow *job, int64 cut_epoch)
{
	Oid			types[2] = {INT8OID, INT8OID};
	Datum		values[2] = {Int64GetDatum(job->job_id), Int64GetDatum(cut_epoch)};
	bool		isnull;
	Datum		epoch;
	char	   *retained;

	catalog_exec("SELECT pg_catalog.string_agg(cut_epoch::pg_catalog.text, ', ' ORDER BY cut_epoch), "
				 "pg_catalog.max(epoch) FILTER (WHERE cut_epoch OPERATOR(pg_catalog.=) $2) "
				 "FROM mailer.checkpoints WHERE job_id OPERATOR(pg_catalog.=) $1 "
				 "AND subtask OPERATOR(pg_catalog.=) 0 AND cut_epoch IS NOT NULL",
				 2, types, values, NULL, false);
	retained = catalog_text(0, Anum_retained_epochs);
	epoch = catalog_value(0, Anum_retained_epoch_found, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job \"%s\" has no retained checkpoint at barrier cut " INT64_FORMAT, job->name, cut_epoch),
				 retained ? errhint("Retained cut epochs: %s.", retained) :
				 errhint("The job has no checkpoint at a barrier cut: only a job whose source has a \"barrier_group\" takes them, and \"checkpoint\": {\"retain_cuts\": N} keeps the newest N.")));
	return DatumGetInt64(epoch);
}

/*
 * Change a stopped job's spec.  Only the parallelism may change: the
 * workers move the state by key group when they next start.  The new spec
 * is judged as create_job judges one, as the caller; it is then compared
 * with the stored one, both normalized alike, parallelism aside.
 */
Datum
mailer_alter_job(PG_FUNCTION_ARGS)
{
	JobRow	   *job = catalog_get_job_by_name(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	Jsonb	   *spec_doc = PG_GETARG_JSONB_P(1);
	Jsonb	   *stored;
	Jsonb	   *secrets;
	Jsonb	   *parallelism;
	const char *parallelism_path[] = {"parallelism"};
	char	   *diff;
	Oid			types[2] = {INT8OID, JSONBOID};
	Datum		values[2];

	begin_reading_spec("alter_job", job->name);
	mailer_require_preload();
	catalog_check_owner(job, "alter");
	require_stopped(job, "altered");

	/* The stored spec with its secrets: a masked secret in the new one means unchanged. */
	stored = catalog_get_job(job->job_id, true, false)->spec;
	spec_doc = normalize_spec(spec_keep_masked(spec_doc, stored), true);
	stored = normalize_spec(stored, false);

	/* The parallelism is the one field that may differ. */
	parallelism = spec_jsonb_int(spec_parse(spec_doc)->parallelism);
	spec_doc = spec_jsonb_set(spec_doc, parallelism_path, 1, parallelism, true);
	stored = spec_jsonb_set(stored, parallelism_path, 1, parallelism, true);
	diff = spec_first_difference(stored, spec_doc);
	if (diff)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 spec_errmsg(diff, "differs from the spec of job \"%s\"", job->name),
				 errhint("Only \"parallelism\" can change on an existing job; create a new job for other changes.")));

	/* The secrets are those stored: equal, as compared above. */
	values[0] = Int64GetDatum(job->job_id);
	values[1] = JsonbPGetDatum(spec_redact(spec_doc, &secrets));
	SPI_connect();

	/*
	 * A Kafka sink's outbox rows belong to the subtask that wrote them, and
	 * only it publishes them, under its own transactional id.
	 */
	catalog_exec("SELECT 1 FROM mailer.kafka_outbox WHERE job_id OPERATOR(pg_catalog.=) $1 LIMIT 1",
				 1, types, values, NULL, true);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("job \"%s\" has output its Kafka sink has not published yet", job->name),
				 errdetail("mailer.kafka_sinks shows its pending records; each subtask publishes its own."),
				 errhint("Start the job until pending_records is 0 (the topic must be writable), stop it, then alter it.")));
	SPI_finish();
	SPI_connect();
	catalog_exec("UPDATE mailer.job SET spec = $2 WHERE job_id OPERATOR(pg_catalog.=) $1",
				 2, types, values, NULL, false);
	SPI_finish();
	end_reading_spec();
	PG_RETURN_VOID();
}

/*
 * Wait until the job's committed checkpoints cover all the input that was
 * there when we asked.  The worker answers: it reads the source's end
 * positions when it sees our ticket, and marks the ticket answered after a
 * checkpoint reaches them.
 */
Datum
mailer_wait_job(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	long		timeout_ms = interval_to_ms(PG_GETARG_INTERVAL_P(1));
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	JobRow	   *job = catalog_get_job_by_name(name, false);
	JobSlot    *ticket_slot = NULL;
	uint64		ticket = 0;
	JobState	state = JOB_STATE_NONE;
	Oid			ext_oid = get_extension_oid(MAILER_EXTENSION, false);
	TimestampTz started = GetCurrentTimestamp();
	TimestampTz next_progress = TimestampTzPlusMilliseconds(started, WAIT_JOB_PROGRESS_MS);

	mailer_require_preload();
	/* Waiting makes the job's worker query its source: the owner's business. */
	catalog_check_owner(job, "wait for");
	for (;;)
	{
		JobSlot    *slot;
		bool		answered = false;
		bool		finished = false;
		long		remaining;

		CHECK_FOR_INTERRUPTS();
		job = catalog_get_job(job->job_id, false, true);
		if (job == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("job \"%s\" was dropped while waiting", name),
					 errdetail("A mailer.drop_job of the job committed while mailer.wait_job waited for it."),
					 errhint("Create the job again with mailer.create_job to run it.")));
		if (job->desired_state == JOB_STATE_STOPPED || job_state_is_terminal(job->state))
		{
			/* The launcher may not have recorded a stop yet: desired_state says it. */
			state = job_state_after_stop(job->state);
			break;
		}

		slot = job_slot_lock(job->job_id, ext_oid);
		if (slot)
		{
			/*
			 * A new ticket for a slot new to us, or given anew to the job
			 * (its counters start again at 0): the old one would never be
			 * answered.
			 */
			if (ticket == 0 || ticket_slot != slot || slot->wait_requested < ticket)
			{
				ticket = ++slot->wait_requested;
				ticket_slot = slot;
				if (slot->latch)
					SetLatch(slot->latch);
			}
			answered = slot->wait_answered >= ticket;
			finished = slot->live_state == JOB_LIVE_FINISHED;
			job_slot_unlock(slot);
		}
		if (answered)
		{
			state = finished ? JOB_STATE_FINISHED : JOB_STATE_RUNNING;
			break;
		}
		TEST_POINT("wait_job_waiting");

		if (GetCurrentTimestamp() >= next_progress)
		{
			wait_job_progress(name, job->job_id, ext_oid, started);
			next_progress = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), WAIT_JOB_PROGRESS_MS);
		}
		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (remaining <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("job \"%s\" did not commit its available input within %ld ms", name, timeout_ms),
					 errdetail("The job is %s.", job_state_name(job->state)),
					 errhint("SELECT state, last_error FROM mailer.jobs WHERE name = '%s' says why; or wait longer: mailer.wait_job('%s', '5 minutes').",
							 name, name)));
		if (slot)
			(void) ConditionVariableTimedSleep(&slot->progress_cv, Min(remaining, 1000),
											   PG_WAIT_EXTENSION);
		else
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(remaining, 100), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
	ConditionVariableCancelSleep();
	PG_RETURN_TEXT_P(cstring_to_text(job_state_name(state)));
}

/*
 * Tell a person waiting in psql how far the job has come: the records its
 * subtasks have read, and the lag of their partitions where it is known.
 * Counts only, never a record.
 */
static void
wait_job_progress(const char *name, int64 job_id, Oid ext_oid, TimestampTz started)
{
	JobSlot    *coordinator;
	uint64		records_in = 0;
	int64		lag = -1;
	int			waited_s = (int) ((GetCurrentTimestamp() - started) / USECS_PER_SEC);

	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	coordinator = job_slots_find(job_id, ext_oid);
	for (int k = 0; coordinator != NULL && k < Max(coordinator->parallelism, 1); k++)
	{
		JobSlot    *slot = job_slots_subtask(coordinator, k);

		if (slot == NULL)
			continue;
		records_in += pg_atomic_read_u64(&slot->counters[JC_RECORDS_IN]);
		if (slot->consumer_lag >= 0)
			lag = Max(lag, 0) + slot->consumer_lag;
	}
	LWLockRelease(mailer_shared->lock);

	if (coordinator == NULL)
		ereport(NOTICE,
				(errcode(ERRCODE_SUCCESSFUL_COMPLETION),
				 errmsg("job \"%s\" has no worker yet (waited %d s)", name, waited_s)));
	else if (lag < 0)
		ereport(NOTICE,
				(errcode(ERRCODE_SUCCESSFUL_COMPLETION),
				 errmsg("job \"%s\": " UINT64_FORMAT " records read (waited %d s)",
						name, records_in, waited_s)));
	else
		ereport(NOTICE,
				(errcode(ERRCODE_SUCCESSFUL_COMPLETION),
				 errmsg("job \"%s\": " UINT64_FORMAT " records read, " INT64_FORMAT " behind (waited %d s)",
						name, records_in, lag, waited_s)));
}

static void
exec_job_update(const char *sql, int64 job_id)
{
	Oid			type = INT8OID;
	Datum		value = Int64GetDatum(job_id);

	SPI_connect();
	catalog_exec(sql, 1, &type, &value, NULL, false);
	SPI_finish();
}

/*
 * A spec as create_job stores it: judged as the caller's (ERROR when it is
 * invalid; check_settings: also against the server's settings now), with
 * the sink's table and mode and the key groups pinned.
 */
static Jsonb *
normalize_spec(Jsonb *spec_doc, bool check_settings)
{
	JobSpec    *spec = spec_parse(spec_doc);

	if (check_settings)
		spec_check_settings(spec);
	spec_set_owner(spec, GetUserId());
	spec_doc = plan_pin_sink(spec_doc, plan_compile(spec, true));
	return spec_pin_defaults(spec_doc, spec);
}

/*
 * ERROR unless the job is stopped and no worker of it runs; then hold the
 * job's lock until the transaction ends, so that a worker that starts
 * meanwhile (a start_job racing with us) exits at once instead of running
 * on what we rewrite.  what: "restored", "altered".
 */
static void
require_stopped(JobRow *job, const char *what)
{
	Oid			ext_oid;

	if (job->desired_state != JOB_STATE_STOPPED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("job \"%s\" must be stopped to be %s", job->name, what),
				 errhint("SELECT mailer.stop_job('%s') first.", job->name)));
	wait_for_launcher_to_settle(job, false, 60 * 1000L);
	ext_oid = get_extension_oid(MAILER_EXTENSION, false);
	job_control_note();
	if (job_worker_alive(job, ext_oid) || !job_lock_wait(job, ext_oid, 0))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("job \"%s\" must be stopped to be %s", job->name, what),
				 errhint("SELECT mailer.stop_job('%s') first.", job->name)));

	/*
	 * A parallel job's run that crashed inside a commit may have left
	 * prepared shares: rewriting its checkpoints before the launcher has
	 * settled them could orphan a share's row (docs/ARCHITECTURE.md, "One
	 * commit per epoch").
	 */
	if (epoch_has_prepared(ext_oid, job->job_id))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("job \"%s\" has a checkpoint still being committed", job->name),
				 errdetail("A subtask's share of an epoch is prepared (pg_prepared_xacts) and not settled yet."),
				 errhint("The launcher settles it within a few seconds; try again then.")));
}

static void
check_job_name(const char *name)
{
	size_t		len = strlen(name);
	bool		ok = len > 0 && len < NAMEDATALEN;

	for (const char *p = name; ok && *p; p++)
		ok = isalnum((unsigned char) *p) || *p == '_' || *p == '-' || *p == '.';
	/* A URL path folds these away: the job's page (/api/jobs/<name>) could not be reached. */
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		ok = false;
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid job name \"%s\"", name),
				 errhint("A job name has 1 to 63 letters, digits, '_', '-' or '.', and is not \".\" or \"..\".")));
}

static long
interval_to_ms(Interval *iv)
{
	int64		us = iv->time + (int64) iv->day * USECS_PER_DAY +
		(int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;

	return (long) Max(us / 1000, 0);
}
