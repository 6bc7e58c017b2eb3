/*
 * api.c
 *		The SQL functions that define and control jobs (mailer.create_job
 *		and friends).
 *
 * They run as the caller: a spec is validated with the caller's privileges
 * and the caller becomes the owner.  They write mailer's tables through
 * catalog.c, and wake the launcher once their transaction commits, so the
 * launcher never acts on a change that was rolled back.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "base/mailer.h"
#include "jobs/catalog.h"
#include "jobs/job_slots.h"
#include "plan/plan.h"
#include "plan/spec.h"
#include "base/test_point.h"

PG_FUNCTION_INFO_V1(mailer_create_job);
PG_FUNCTION_INFO_V1(mailer_describe_job);
PG_FUNCTION_INFO_V1(mailer_start_job);
PG_FUNCTION_INFO_V1(mailer_stop_job);
PG_FUNCTION_INFO_V1(mailer_drop_job);
PG_FUNCTION_INFO_V1(mailer_restore_job);
PG_FUNCTION_INFO_V1(mailer_wait_job);

static bool wake_launcher_at_commit = false;
static bool reading_spec = false;	/* a spec (maybe with secrets) is the statement's text */
static emit_log_hook_type prev_emit_log_hook = NULL;
static bool xact_callback_registered = false;
static List *stops_to_undo = NIL;	/* (int64 *) job ids whose stop request an abort withdraws */
static bool controlled_jobs = false;	/* this transaction created, started, stopped, ... a job */
static Oid	stops_ext_oid = InvalidOid;	/* the installation those jobs are of */

static void api_xact_callback(XactEvent event, void *arg);
static void hide_spec_statement(ErrorData *edata);
static void begin_reading_spec(void);
static void wake_launcher_after_commit(void);
static void note_job_control(void);
static void check_job_name(const char *name);
static void request_stop_and_wait(JobRow *job, long timeout_ms);
static void wait_for_launcher_to_settle(JobRow *job, bool starting, long timeout_ms);
static long interval_to_ms(Interval *iv);
static void exec_job_update(const char *sql, int64 job_id);
static bool lock_job(JobRow *job, Oid ext_oid, long timeout_ms);

Datum
mailer_create_job(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Jsonb	   *spec_doc = PG_GETARG_JSONB_P(1);
	JobSpec    *spec;
	Jsonb	   *redacted;
	Jsonb	   *secrets;
	HeapTuple	role;
	bool		can_login;
	bool		isnull;
	int64		job_id;
	Oid			types[5] = {TEXTOID, OIDOID, JSONBOID, TEXTOID, JSONBOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	begin_reading_spec();
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

	spec = spec_parse(spec_doc);
	spec->source.kafka.owner = GetUserId();
	spec_doc = plan_pin_sink(spec_doc, plan_compile(spec, true));

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
	job_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();

	wake_launcher_after_commit();
	reading_spec = false;
	PG_RETURN_INT64(job_id);
}

Datum
mailer_describe_job(PG_FUNCTION_ARGS)
{
	Jsonb	   *spec_doc = PG_GETARG_JSONB_P(0);
	JobSpec    *spec;
	JobPlan    *plan;
	text	   *result;

	begin_reading_spec();
	spec = spec_parse(spec_doc);
	/* Judged as if the caller created the job: nothing reaches librdkafka otherwise. */
	spec->source.kafka.owner = GetUserId();
	plan = plan_compile(spec, true);
	result = cstring_to_text(plan_describe(plan));
	reading_spec = false;
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
	wake_launcher_after_commit();
	PG_RETURN_TEXT_P(cstring_to_text(strcmp(job->desired_state, "running") == 0 &&
									 strcmp(job->state, "stopped") != 0 &&
									 strcmp(job->state, "finished") != 0 &&
									 strcmp(job->state, "failed") != 0 ?
									 job->state : "starting"));
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
	wake_launcher_after_commit();
	PG_RETURN_TEXT_P(cstring_to_text(strcmp(job->state, "finished") == 0 ||
									 strcmp(job->state, "failed") == 0 ?
									 job->state : "stopped"));
}

Datum
mailer_drop_job(PG_FUNCTION_ARGS)
{
	JobRow	   *job = catalog_get_job_by_name(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);

	mailer_require_preload();
	catalog_check_owner(job, "drop");
	request_stop_and_wait(job, 60 * 1000L);
	/* No worker of the job runs from here on: none could write after the rows are gone. */
	if (!lock_job(job, get_extension_oid("mailer", false), 60 * 1000L))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("job \"%s\" cannot be dropped while a worker of it runs", job->name),
				 errhint("Try again in a moment.")));
	/* Checkpoints, dead letters and state rows go with it; the launcher removes its files. */
	exec_job_update("DELETE FROM mailer.job WHERE job_id OPERATOR(pg_catalog.=) $1", job->job_id);
	exec_job_update("DELETE FROM mailer.memory_state WHERE job_id OPERATOR(pg_catalog.=) $1", job->job_id);
	wake_launcher_after_commit();
	PG_RETURN_INT64(job->job_id);
}

Datum
mailer_restore_job(PG_FUNCTION_ARGS)
{
	JobRow	   *job = catalog_get_job_by_name(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	int64		epoch = PG_GETARG_INT64(1);
	Oid			types[2] = {INT8OID, INT8OID};
	Datum		values[2];
	bool		worker_alive = false;
	bool		isnull;
	char	   *retained;
	Oid			ext_oid;

	mailer_require_preload();
	catalog_check_owner(job, "restore");
	if (strcmp(job->desired_state, "stopped") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("job \"%s\" must be stopped to be restored", job->name),
				 errhint("SELECT mailer.stop_job('%s') first.", job->name)));
	wait_for_launcher_to_settle(job, false, 60 * 1000L);
	ext_oid = get_extension_oid("mailer", false);
	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	{
		JobSlot    *slot = job_slots_find(job->job_id, ext_oid);

		if (slot)
		{
			SpinLockAcquire(&slot->mutex);
			worker_alive = slot->pid != 0 || slot->registered;
			SpinLockRelease(&slot->mutex);
		}
	}
	LWLockRelease(mailer_shared->lock);

	/*
	 * Hold the job's lock until we commit: a worker that starts meanwhile
	 * (a start_job racing with us) exits at once, instead of taking a final
	 * checkpoint of what it read before the rewind.
	 */
	note_job_control();
	if (worker_alive || !lock_job(job, ext_oid, 0))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("job \"%s\" must be stopped to be restored", job->name),
				 errhint("SELECT mailer.stop_job('%s') first.", job->name)));

	values[0] = Int64GetDatum(job->job_id);
	values[1] = Int64GetDatum(epoch);
	SPI_connect();
	catalog_exec("SELECT pg_catalog.string_agg(epoch::pg_catalog.text, ', ' ORDER BY epoch), "
				 "pg_catalog.bool_or(epoch OPERATOR(pg_catalog.=) $2) "
				 "FROM mailer.checkpoints WHERE job_id OPERATOR(pg_catalog.=) $1",
				 2, types, values, NULL, false);
	retained = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)) || isnull)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job \"%s\" has no retained checkpoint " INT64_FORMAT, job->name, epoch),
				 retained ? errhint("Retained epochs: %s.", retained) :
				 errhint("The job has no checkpoint yet.")));

	/*
	 * Forget everything after the epoch: replaying from it produces those
	 * dead letters, state versions and checkpoints again.  The worker
	 * removes newer RocksDB checkpoints when it recovers.
	 */
	catalog_exec("DELETE FROM mailer.checkpoints WHERE job_id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.>) $2",
				 2, types, values, NULL, false);
	catalog_exec("DELETE FROM mailer.dead_letters WHERE job_id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.>) $2",
				 2, types, values, NULL, false);
	catalog_exec("DELETE FROM mailer.memory_state WHERE job_id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.>) $2",
				 2, types, values, NULL, false);
	catalog_exec("UPDATE mailer.job_status SET state = 'stopped', changed_at = pg_catalog.now() "
				 "WHERE job_id OPERATOR(pg_catalog.=) $1", 1, types, values, NULL, false);
	SPI_finish();
	PG_RETURN_INT64(epoch);
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
	char	   *state = NULL;
	Oid			ext_oid = get_extension_oid("mailer", false);

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
		if (strcmp(job->desired_state, "stopped") == 0 ||
			strcmp(job->state, "finished") == 0 || strcmp(job->state, "failed") == 0)
		{
			/* The launcher may not have recorded a stop yet: desired_state says it. */
			state = strcmp(job->state, "finished") == 0 || strcmp(job->state, "failed") == 0 ?
				job->state : "stopped";
			break;
		}

		LWLockAcquire(mailer_shared->lock, LW_SHARED);
		slot = job_slots_find(job->job_id, ext_oid);
		if (slot)
		{
			SpinLockAcquire(&slot->mutex);
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
			SpinLockRelease(&slot->mutex);
		}
		LWLockRelease(mailer_shared->lock);
		if (answered)
		{
			state = finished ? "finished" : "running";
			break;
		}
		TEST_POINT("wait_job_waiting");

		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (remaining <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("job \"%s\" did not commit its available input within %ld ms", name, timeout_ms),
					 errdetail("The job is %s.", job->state),
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
	PG_RETURN_TEXT_P(cstring_to_text(state));
}

/*
 * Helpers
 */

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
 * Take the job's lock (job_lock_try) until the transaction ends, waiting
 * up to timeout_ms for a worker of the job to release it.
 */
static bool
lock_job(JobRow *job, Oid ext_oid, long timeout_ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	while (!job_lock_try(ext_oid, job->job_id, false))
	{
		if (TimestampDifferenceExceeds(deadline, GetCurrentTimestamp(), 0))
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	return true;
}

static void
check_job_name(const char *name)
{
	size_t		len = strlen(name);
	bool		ok = len > 0 && len < NAMEDATALEN;

	for (const char *p = name; ok && *p; p++)
		ok = isalnum((unsigned char) *p) || *p == '_' || *p == '-' || *p == '.';
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid job name \"%s\"", name),
				 errhint("A job name has 1 to 63 letters, digits, '_', '-' or '.'.")));
}

/*
 * Ask the job's worker to take a final checkpoint and exit, and wait until
 * it has.  If our transaction aborts, the request is withdrawn and the
 * launcher lets the job run on.
 */
static void
request_stop_and_wait(JobRow *job, long timeout_ms)
{
	JobSlot    *slot;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	MemoryContext old;
	Oid			ext_oid = get_extension_oid("mailer", false);

	LWLockAcquire(mailer_shared->lock, LW_SHARED);
	slot = job_slots_find(job->job_id, ext_oid);
	if (slot)
	{
		TransactionId xid = GetTopTransactionId();

		SpinLockAcquire(&slot->mutex);
		slot->stop_requested = true;
		slot->stop_xid = xid;
		if (slot->latch)
			SetLatch(slot->latch);
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(mailer_shared->lock);
	if (slot == NULL)
		return;

	old = MemoryContextSwitchTo(TopTransactionContext);
	{
		int64	   *id = palloc(sizeof(int64));

		*id = job->job_id;
		stops_to_undo = lappend(stops_to_undo, id);
	}
	stops_ext_oid = ext_oid;
	MemoryContextSwitchTo(old);
	wake_launcher_after_commit();

	for (;;)
	{
		bool		alive;
		long		remaining;

		/* A worker registered but not started yet could still run: wait for it too. */
		SpinLockAcquire(&slot->mutex);
		alive = slot->job_id == job->job_id && slot->ext_oid == ext_oid &&
			(slot->pid != 0 || slot->registered);
		SpinLockRelease(&slot->mutex);
		if (!alive)
			break;
		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (remaining <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("job \"%s\" did not stop within %ld ms", job->name, timeout_ms),
					 errhint("Its final checkpoint may be slow; try again with a longer timeout: mailer.stop_job('%s', '5 minutes').",
							 job->name)));
		(void) ConditionVariableTimedSleep(&slot->progress_cv, Min(remaining, 1000),
										   PG_WAIT_EXTENSION);
		CHECK_FOR_INTERRUPTS();
	}
	ConditionVariableCancelSleep();
}

/*
 * A worker that has exited leaves its slot as it was until the launcher has
 * recorded why it exited.  Were start_job to commit first, the launcher
 * would then record the old exit over it ('finished' or 'failed': the job
 * never starts again) or, after a stop, could not tell the stop request
 * left in the slot from a stop_job still in progress and would keep the
 * slot, with no worker, for good.  So wait for the launcher here, before
 * writing anything it would have to wait for.  A stop requested in this
 * very transaction cannot finish before it commits: starting the job again
 * withdraws it.  restore_job waits the same way for a worker's exit to be
 * recorded (or the launcher would write 'finished' over the restored job's
 * 'stopped'), but leaves stop requests alone.
 */
static void
wait_for_launcher_to_settle(JobRow *job, bool starting, long timeout_ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	Oid			ext_oid = get_extension_oid("mailer", false);
	ListCell   *lc;
	bool		ours = false;

	foreach(lc, stops_to_undo)
		if (starting && *(int64 *) lfirst(lc) == job->job_id)
			ours = true;

	for (;;)
	{
		JobSlot    *slot;
		bool		leftover = false;

		LWLockAcquire(mailer_shared->lock, LW_SHARED);
		slot = job_slots_find(job->job_id, ext_oid);
		if (slot)
		{
			SpinLockAcquire(&slot->mutex);
			if (ours)
				slot->stop_requested = false;
			/*
			 * A worker that has finished is about to exit: that exit, too.
			 * Before a restore, so is one registered and not started yet.
			 */
			leftover = slot->live_state == JOB_LIVE_FINISHED ||
				(!starting && slot->registered) ||
				(slot->pid == 0 &&
				 ((starting && slot->stop_requested) || slot->live_state != JOB_LIVE_NONE ||
				  slot->exit_kind != JOB_EXIT_NONE));
			SpinLockRelease(&slot->mutex);
		}
		LWLockRelease(mailer_shared->lock);
		if (!leftover)
			return;
		if (TimestampDifferenceExceeds(deadline, GetCurrentTimestamp(), 0))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("job \"%s\" cannot be %s yet", job->name, starting ? "started" : "restored"),
					 errdetail("Its last worker has exited but the launcher has not recorded it, or a stop of the job has not committed."),
					 errhint("Commit any transaction that stops the job, check that the mailer launcher runs, then try again.")));
		job_slots_wake_launcher();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * While create_job or describe_job runs, the statement's text may hold
 * secrets (source.options): errors raised meanwhile are logged without it.
 */
void
api_install_hooks(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = hide_spec_statement;
}

static void
hide_spec_statement(ErrorData *edata)
{
	if (reading_spec)
		edata->hide_stmt = true;
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

static void
begin_reading_spec(void)
{
	reading_spec = true;
	/* The abort callback resets the flag when an error ends the statement. */
	if (!xact_callback_registered)
	{
		RegisterXactCallback(api_xact_callback, NULL);
		xact_callback_registered = true;
	}
}

static void
wake_launcher_after_commit(void)
{
	note_job_control();
	wake_launcher_at_commit = true;
}

/*
 * This transaction controls a job: what it asked of the launcher and the
 * workers lives in this backend until it ends, so it may not be prepared.
 */
static void
note_job_control(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(api_xact_callback, NULL);
		xact_callback_registered = true;
	}
	controlled_jobs = true;
}

static void
api_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (controlled_jobs)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that has created, started, stopped, restored or dropped a mailer job"),
						 errdetail("The launcher and the job's worker act on what mailer's functions did only once this session's transaction ends."),
						 errhint("Call mailer's job functions in a transaction of their own.")));
			return;
		case XACT_EVENT_PREPARE:
			/* Nothing to undo or wake from this session any more. */
			break;
		case XACT_EVENT_COMMIT:
			if (wake_launcher_at_commit && mailer_shared)
				job_slots_wake_launcher();
			break;
		case XACT_EVENT_ABORT:
			if (mailer_shared && stops_to_undo != NIL)
			{
				LWLockAcquire(mailer_shared->lock, LW_SHARED);
				foreach(lc, stops_to_undo)
				{
					JobSlot    *slot = job_slots_find(*(int64 *) lfirst(lc), stops_ext_oid);

					if (slot)
					{
						SpinLockAcquire(&slot->mutex);
						slot->stop_requested = false;
						SpinLockRelease(&slot->mutex);
					}
				}
				LWLockRelease(mailer_shared->lock);
				job_slots_wake_launcher();
			}
			break;
		default:
			return;
	}
	wake_launcher_at_commit = false;
	controlled_jobs = false;
	stops_to_undo = NIL;
	stops_ext_oid = InvalidOid;
	reading_spec = false;
}

static long
interval_to_ms(Interval *iv)
{
	int64		us = iv->time + (int64) iv->day * USECS_PER_DAY +
		(int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;

	return (long) Max(us / 1000, 0);
}
