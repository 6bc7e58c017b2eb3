/*
 * launcher.c
 *		The launcher: one background worker, connected to mailer.database,
 *		that keeps the running job workers in line with mailer.job.
 *
 * Each round it reads the jobs, looks at the workers it started, records
 * in mailer.job_status why a worker stopped, restarts failed workers with
 * exponential backoff, starts the jobs that should run and asks the ones
 * that should not to stop.  SQL functions wake it through its latch after
 * they commit; workers wake it when their state changes; otherwise it
 * looks again every second.
 *
 * A round is three steps, each over what read_jobs read: after a server
 * restart, recover_after_restart marks the jobs whose worker stopped
 * abruptly; tend_slots looks after the slots of the jobs that have one;
 * start_waiting_jobs gives a slot and a worker to the jobs that should run
 * and have none.
 *
 * Design: docs/ARCHITECTURE.md, "The launcher".
 */
#include "postgres.h"

#include "access/twophase.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "base/guard.h"
#include "base/mailer.h"
#include "base/test_point.h"
#include "jobs/catalog.h"
#include "jobs/job_slots.h"
#include "jobs/job_state.h"
#include "runtime/job_worker.h"
#include "runtime/epoch_commit.h"
#include "runtime/launcher.h"
#include "state/state.h"

/* A job as the launcher reads it each round (read_jobs). */
typedef struct LauncherJob
{
	int64		job_id;
	char	   *name;
	Oid			owner;
	bool		want_running;
	JobState	state;
	bool		last_checkpoint_final;
	int			failures;		/* consecutive failed runs, for the backoff */
	TimestampTz changed_at;		/* when the state was last recorded */
	bool		has_slot;
} LauncherJob;

/* The columns of read_jobs' statement. */
#define Anum_launcher_job_id			1
#define Anum_launcher_job_name			2
#define Anum_launcher_job_owner			3
#define Anum_launcher_job_want_running	4
#define Anum_launcher_job_state			5
#define Anum_launcher_job_final			6
#define Anum_launcher_job_failures		7
#define Anum_launcher_job_changed_at	8

/* Whether the job wants to run, as committed: one boolean column. */
#define WANTS_RUNNING_SQL \
	"SELECT desired_state OPERATOR(pg_catalog.=) 'running' FROM " MAILER_SCHEMA ".job " \
	"WHERE job_id OPERATOR(pg_catalog.=) $1"
#define Anum_wants_running				1

/* What the launcher remembers of each slot, beyond shared memory. */
typedef struct LauncherSlot
{
	BackgroundWorkerHandle *handle;
	bool		adopted;		/* a worker started by an earlier launcher */
	int64		epoch_when_running;	/* a checkpoint after it means the worker was healthy */
	bool		recorded_running;
	TimestampTz retry_at;		/* after its worker found the job locked: not before */
	char		recorded_error[JOB_SLOT_ERROR_LEN];	/* a running worker's last, as recorded */
	/* Done in shared memory only once the round's transaction commits: */
	bool		exit_recorded;	/* its worker's exit is recorded: forget it */
	bool		free_slot;		/* the slot is no job's any more */
} LauncherSlot;

static LauncherSlot *lslots;
static bool first_round = true;
/* SIGTERM acts as die() while true: from the start (connecting, adopting slots) and in each round. */
static volatile sig_atomic_t in_round = true;

static void launcher_sigterm(SIGNAL_ARGS);
static void adopt_slots(void);
static void reconcile(long *timeout_ms);
static void settle_prepared(Oid ext_oid);
static void recover_after_restart(List *jobs, Oid ext_oid);
static void tend_slots(List *jobs, Oid ext_oid, TimestampTz now, long *timeout_ms);
static void tend_live_worker(int i, LauncherJob *job, bool stop_requested);
static void tend_exited_worker(int i, LauncherJob *job, bool stop_requested, TimestampTz now,
							   long *timeout_ms);
static void start_waiting_jobs(List *jobs, Oid ext_oid, TimestampTz now, long *timeout_ms);
static void remove_orphan_state(List *jobs);
static List *read_jobs(void);
static LauncherJob *find_job(List *jobs, int64 job_id);
static bool handle_exit(int i, LauncherJob *job);
static void start_worker(int i, LauncherJob *job);
static bool set_status(int64 job_id, JobState state, int pid, int add_restarts,
					   const char *error, int failures);
static bool exec_own_subxact(int64 job_id, const char *what, const char *sql, int nargs,
							 Oid *types, Datum *values, const char *nulls, bool *result);
static bool wants_running_result(void);
static void round_committed(void);
static void round_aborted(void);
static bool may_start(LauncherJob *job, TimestampTz now, long *timeout_ms);
static void stop_all_workers(void);
static void forget_worker(int i);
static bool worker_alive(int i);
static bool waiting_error(JobSlot *slot, char *recorded);
static void ask_to_stop(JobSlot *slot);
static bool stop_in_progress(JobSlot *slot);
static bool job_wants_to_run(int64 job_id);
static long backoff_ms(int failures);

/*
 * SIGTERM.  Between rounds: the shutdown request that the main loop checks
 * (ShutdownRequestPending).  While the launcher connects, adopts the slots
 * or runs a round, as die(): a lock wait or a test point there ends at once,
 * the round's transaction rolls back and the launcher exits.
 */
static void
launcher_sigterm(SIGNAL_ARGS)
{
	if (in_round)
		die(postgres_signal_arg);
	else
		SignalHandlerForShutdownRequest(postgres_signal_arg);
}

void
launcher_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, launcher_sigterm);
	BackgroundWorkerUnblockSignals();
	/* A reload signalled before the handler was set is lost: read the configuration now. */
	ProcessConfigFile(PGC_SIGHUP);

	BackgroundWorkerInitializeConnection(mailer_database, NULL, 0);
	pgstat_report_appname("mailer launcher");
	/* Never wait long on a row a user's transaction holds: try again next round. */
	SetConfigOption("lock_timeout", "2s", PGC_SUSET, PGC_S_OVERRIDE);

	lslots = MemoryContextAllocZero(TopMemoryContext, sizeof(LauncherSlot) * mailer_shared->nslots);
	adopt_slots();

	for (;;)
	{
		long		timeout_ms = 1000;

		in_round = true;

		/*
		 * Exit 1, as die() would: the postmaster starts a launcher again
		 * unless it is shutting down.
		 */
		if (ShutdownRequestPending)
			proc_exit(1);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		PG_TRY();
		{
			reconcile(&timeout_ms);
		}
		PG_CATCH();
		{
			/* Report, roll back, and try again in a moment. */
			EmitErrorReport();
			FlushErrorState();
			AbortCurrentTransaction();
			round_aborted();
			timeout_ms = 1000;
		}
		PG_END_TRY();

		in_round = false;
		/* A SIGTERM that came during the round. */
		CHECK_FOR_INTERRUPTS();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(timeout_ms, 10), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * If only the launcher restarted, its workers still run: adopt them and
 * watch their pid.  Slots without a worker are forgotten, and a worker
 * registered for one but not started yet must not claim it when it
 * starts: a new generation tells it the slot is no longer its own.
 */
static void
adopt_slots(void)
{
	LWLockAcquire(mailer_shared->lock, LW_EXCLUSIVE);
	mailer_shared->launcher_pid = MyProcPid;
	mailer_shared->launcher_latch = &MyProc->procLatch;
	for (int i = 0; i < mailer_shared->nslots; i++)
	{
		JobSlot    *slot = &mailer_shared->slots[i];

		if (slot->subtask > 0)
			continue;
		SpinLockAcquire(&slot->mutex);
		if (slot->job_id != 0 && slot->pid != 0)
			lslots[i].adopted = true;
		else if (slot->job_id != 0 && slot->exit_kind != JOB_EXIT_NONE)
		{
			/* A worker's exit the last launcher did not record: record it. */
			lslots[i].adopted = true;
			slot->registered = false;
			slot->generation++;
		}
		else
		{
			slot->job_id = 0;
			slot->registered = false;
			slot->generation++;
		}
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(mailer_shared->lock);
}

/* One round, in one transaction. */
static void
reconcile(long *timeout_ms)
{
	List	   *jobs;
	TimestampTz now = GetCurrentTimestamp();
	Oid			ext_oid;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	/*
	 * Locked until the round commits: a round reads several of its tables
	 * in one statement, and meeting a DROP EXTENSION that had locked some of
	 * them, it deadlocked with it, and the drop could be the one to fail
	 * (docs/ARCHITECTURE.md, "The launcher").
	 */
	ext_oid = catalog_lock_installed_extension();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (!OidIsValid(ext_oid))
	{
		stop_all_workers();
		state_remove_orphans(NULL, 0);
		PopActiveSnapshot();
		CommitTransactionCommand();
		/* No jobs survive without the extension: none to resume later. */
		first_round = false;
		*timeout_ms = 5000;
		return;
	}
	SPI_connect();
	if (!catalog_version_matches())
	{
		/*
		 * New binaries over an older catalog: a worker would read tables
		 * that lack what it expects.  Jobs wait for ALTER EXTENSION UPDATE.
		 */
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
		*timeout_ms = 1000;
		return;
	}
	jobs = read_jobs();

	if (first_round)
		recover_after_restart(jobs, ext_oid);
	tend_slots(jobs, ext_oid, now, timeout_ms);
	start_waiting_jobs(jobs, ext_oid, now, timeout_ms);
	remove_orphan_state(jobs);

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	round_committed();
	first_round = false;
	settle_prepared(ext_oid);
}

/*
 * A parallel job that stopped between its subtasks' prepare and the
 * commit, and is not running again (stopped, failed, dropped), must not
 * leave its prepared transactions holding back vacuum and locks: settle
 * them per the epoch's decision (epoch_commit.c).  A failure here (one is
 * being settled by someone else) waits for the next round.
 */
static void
settle_prepared(Oid ext_oid)
{
	MemoryContext ctx = CurrentMemoryContext;

	if (max_prepared_xacts == 0)
		return;
	PG_TRY();
	{
		epoch_resolve_prepared(ext_oid, 0);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(ctx);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		MemoryContextSwitchTo(ctx);
	}
	PG_END_TRY();
}

/*
 * After a server restart: a job that was running and did not stop cleanly
 * crashed.
 */
static void
recover_after_restart(List *jobs, Oid ext_oid)
{
	ListCell   *lc;

	foreach(lc, jobs)
	{
		LauncherJob *job = lfirst(lc);
		JobSlot    *slot = job_slot_lock(job->job_id, ext_oid);

		if (slot != NULL)
		{
			job_slot_unlock(slot);
			continue;
		}
		if (job->want_running && !job->last_checkpoint_final && job->state == JOB_STATE_RUNNING)
		{
			/* Counted as a failure too: a job that crashes the server backs off. */
			job->failures++;
			job->changed_at = GetCurrentTimestamp();
			job->state = JOB_STATE_RESTARTING;
			set_status(job->job_id, JOB_STATE_RESTARTING, 0, 1,
					   "the server or the job worker stopped abruptly; the job resumes from its last checkpoint",
					   job->failures);
		}
	}
}

/*
 * The slots the launcher knows of: record what their workers do, ask the
 * workers of jobs that should not run to stop, record the exits and start
 * a worker again where the job should run on.
 */
static void
tend_slots(List *jobs, Oid ext_oid, TimestampTz now, long *timeout_ms)
{
	for (int i = 0; i < mailer_shared->nslots; i++)
	{
		JobSlot    *slot = &mailer_shared->slots[i];
		LauncherJob *job;
		bool		stop_requested;

		/* A parallel job's subtasks 1..P-1 are its subtask 0's to start and watch. */
		if (slot->job_id == 0 || slot->subtask > 0)
			continue;
		/* A worker of a dropped installation is no job's: it is asked to stop. */
		job = slot->ext_oid == ext_oid ? find_job(jobs, slot->job_id) : NULL;
		if (job)
			job->has_slot = true;
		SpinLockAcquire(&slot->mutex);
		stop_requested = slot->stop_requested;
		SpinLockRelease(&slot->mutex);

		if (worker_alive(i))
			tend_live_worker(i, job, stop_requested);
		else
			tend_exited_worker(i, job, stop_requested, now, timeout_ms);
	}
}

/* The slot's worker runs: record its state, or ask it to stop. */
static void
tend_live_worker(int i, LauncherJob *job, bool stop_requested)
{
	JobSlot    *slot = &mailer_shared->slots[i];

	/* Dropped, or stopped by some other way than stop_job: ask it to stop. */
	if (job == NULL || (!job->want_running && !stop_requested))
		ask_to_stop(slot);
	else if (!lslots[i].recorded_running && slot->live_state == JOB_LIVE_RUNNING)
	{
		if (set_status(job->job_id, JOB_STATE_RUNNING, slot->pid, 0, NULL, -1))
		{
			lslots[i].recorded_running = true;
			lslots[i].epoch_when_running = slot->last_checkpoint_epoch;
		}
	}
	else if (waiting_error(slot, lslots[i].recorded_error))
	{
		/*
		 * What a running worker waited for is the job's last error, even
		 * once the wait is over (its state says what is true now).
		 */
		if (!set_status(job->job_id, job->state, slot->pid, 0, lslots[i].recorded_error, -1))
			lslots[i].recorded_error[0] = '\0';
	}
	else if (lslots[i].recorded_running && job->failures > 0 &&
			 slot->last_checkpoint_epoch > lslots[i].epoch_when_running)
	{
		/* It has committed a checkpoint since it started: healthy again. */
		if (set_status(job->job_id, JOB_STATE_RUNNING, slot->pid, 0, NULL, 0))
			job->failures = 0;
	}
}

/*
 * The slot has no worker (any more): record the last one's exit, then free
 * the slot or start a worker again.
 */
static void
tend_exited_worker(int i, LauncherJob *job, bool stop_requested, TimestampTz now,
				   long *timeout_ms)
{
	JobSlot    *slot = &mailer_shared->slots[i];

	if ((lslots[i].handle || lslots[i].adopted) && !lslots[i].exit_recorded)
	{
		/*
		 * The exit of a worker that a stop_job or drop_job not yet
		 * committed stopped is recorded once that has ended: until then the
		 * job's rows may be locked by it.  The worker is gone.
		 */
		if (stop_requested && stop_in_progress(slot))
		{
			SpinLockAcquire(&slot->mutex);
			slot->registered = false;
			SpinLockRelease(&slot->mutex);
			ConditionVariableBroadcast(&slot->progress_cv);
			return;
		}
		/* Not recorded (its row is locked): the same exit next round. */
		if (!handle_exit(i, job))
			return;
		lslots[i].exit_recorded = true;
	}

	if (job && job->want_running && stop_requested)
	{
		if (stop_in_progress(slot))
			return;				/* a stop_job in progress: wait for it to commit or abort */

		/*
		 * The stop_job ended after we read the jobs, or a start_job came
		 * after it: the request is done with, and what the job wants now
		 * decides.  (Waiting on the request instead would wait forever for
		 * a job started again before we looked.)
		 */
		SpinLockAcquire(&slot->mutex);
		slot->stop_requested = false;
		SpinLockRelease(&slot->mutex);
		job->want_running = job_wants_to_run(job->job_id);
	}
	if (job == NULL || !job->want_running)
	{
		if (job && !set_status(job->job_id, job_state_after_stop(job->state), 0, 0, NULL, 0))
			return;
		lslots[i].free_slot = true;
		return;
	}
	if (job_state_is_terminal(job->state))
	{
		lslots[i].free_slot = true;
		return;
	}
	if (lslots[i].retry_at > now)
		*timeout_ms = Min(*timeout_ms, TimestampDifferenceMilliseconds(now, lslots[i].retry_at));
	else if (may_start(job, now, timeout_ms))
		start_worker(i, job);
}

/* Jobs that should run and have no worker yet: a slot and a worker each. */
static void
start_waiting_jobs(List *jobs, Oid ext_oid, TimestampTz now, long *timeout_ms)
{
	ListCell   *lc;

	foreach(lc, jobs)
	{
		LauncherJob *job = lfirst(lc);
		int			free_slot;

		if (job->has_slot || !job->want_running || job_state_is_terminal(job->state) ||
			!may_start(job, now, timeout_ms))
			continue;
		TEST_POINT("launcher_before_slot");
		free_slot = job_slots_claim(job->job_id, ext_oid);
		if (free_slot < 0)
		{
			set_status(job->job_id, JOB_STATE_STARTING, 0, 0,
					   psprintf("no free job slot: mailer.max_jobs (%d) jobs are running", mailer_max_jobs), -1);
			continue;
		}
		memset(&lslots[free_slot], 0, sizeof(LauncherSlot));
		start_worker(free_slot, job);
	}
}

/* Remove the state files of jobs that no longer exist. */
static void
remove_orphan_state(List *jobs)
{
	int64	   *live_ids = palloc(sizeof(int64) * (list_length(jobs) + 1));
	int			nlive = 0;
	ListCell   *lc;

	foreach(lc, jobs)
		live_ids[nlive++] = ((LauncherJob *) lfirst(lc))->job_id;
	state_remove_orphans(live_ids, nlive);
}

/*
 * The round's records are committed: forget the exits they recorded and
 * free the slots of jobs that no longer run.  Before the commit, a round
 * that fails would have lost them: it finds them again instead.
 */
static void
round_committed(void)
{
	for (int i = 0; i < mailer_shared->nslots; i++)
	{
		JobSlot    *slot = &mailer_shared->slots[i];

		if (lslots[i].exit_recorded)
		{
			SpinLockAcquire(&slot->mutex);
			slot->exit_kind = JOB_EXIT_NONE;
			slot->live_state = JOB_LIVE_NONE;
			/* Also for a worker that never started, which could not say so itself. */
			slot->registered = false;
			SpinLockRelease(&slot->mutex);
			ConditionVariableBroadcast(&slot->progress_cv);
			forget_worker(i);
		}
		if (lslots[i].free_slot)
		{
			LWLockAcquire(mailer_shared->lock, LW_EXCLUSIVE);
			slot->job_id = 0;
			LWLockRelease(mailer_shared->lock);
			lslots[i].free_slot = false;
		}
	}
}

/* The round rolled back: what it recorded is to be done again. */
static void
round_aborted(void)
{
	for (int i = 0; i < mailer_shared->nslots; i++)
	{
		lslots[i].exit_recorded = false;
		lslots[i].free_slot = false;
	}
}

static List *
read_jobs(void)
{
	List	   *jobs = NIL;

	/* Columns: Anum_launcher_job_* */
	catalog_exec("SELECT j.job_id, j.name, j.owner::pg_catalog.oid, "
				 "j.desired_state OPERATOR(pg_catalog.=) 'running', s.state, "
				 /* stopped cleanly: a final checkpoint since the current worker was recorded */
				 "coalesce((SELECT c.final AND c.committed_at OPERATOR(pg_catalog.>=) s.changed_at "
				 "  FROM mailer.checkpoints c "
				 "  WHERE c.job_id OPERATOR(pg_catalog.=) j.job_id AND c.subtask OPERATOR(pg_catalog.=) 0 ORDER BY c.epoch DESC LIMIT 1), false), "
				 "s.failures, s.changed_at "
				 "FROM mailer.job j JOIN mailer.job_status s USING (job_id) ORDER BY j.job_id",
				 0, NULL, NULL, NULL, true);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		LauncherJob *job = palloc0(sizeof(LauncherJob));

		job->job_id = DatumGetInt64(catalog_value(r, Anum_launcher_job_id, NULL));
		job->name = catalog_text(r, Anum_launcher_job_name);
		job->owner = DatumGetObjectId(catalog_value(r, Anum_launcher_job_owner, NULL));
		job->want_running = DatumGetBool(catalog_value(r, Anum_launcher_job_want_running, NULL));
		job->state = job_state_from_name(catalog_text(r, Anum_launcher_job_state));
		job->last_checkpoint_final = DatumGetBool(catalog_value(r, Anum_launcher_job_final, NULL));
		job->failures = DatumGetInt32(catalog_value(r, Anum_launcher_job_failures, NULL));
		job->changed_at = DatumGetTimestampTz(catalog_value(r, Anum_launcher_job_changed_at, NULL));
		jobs = lappend(jobs, job);
	}
	return jobs;
}

static LauncherJob *
find_job(List *jobs, int64 job_id)
{
	ListCell   *lc;

	foreach(lc, jobs)
	{
		LauncherJob *job = lfirst(lc);

		if (job->job_id == job_id)
			return job;
	}
	return NULL;
}

/*
 * A worker we started has exited: record why, and plan what comes next.
 * False when the record could not be written (the job's row is locked):
 * the slot keeps the exit for the next round.  The slot's exit is cleared
 * once the round commits (round_committed).
 */
static bool
handle_exit(int i, LauncherJob *job)
{
	JobSlot    *slot = &mailer_shared->slots[i];
	JobExitKind kind;
	char		error[JOB_SLOT_ERROR_LEN];
	bool		stop_requested;
	bool		healthy;
	int			failures;

	TEST_POINT("launcher_handle_exit");
	SpinLockAcquire(&slot->mutex);
	kind = slot->exit_kind;
	stop_requested = slot->stop_requested;
	strlcpy(error, slot->error, sizeof(error));
	SpinLockRelease(&slot->mutex);
	/* A worker that committed a checkpoint was healthy: the backoff starts over. */
	healthy = lslots[i].recorded_running && slot->last_checkpoint_epoch > lslots[i].epoch_when_running;
	if (job == NULL)
		return true;
	failures = healthy ? 0 : job->failures;

	switch (kind)
	{
		case JOB_EXIT_FINISHED:
			if (!set_status(job->job_id, JOB_STATE_FINISHED, 0, 0, NULL, 0))
				return false;
			job->state = JOB_STATE_FINISHED;
			break;
		case JOB_EXIT_FAILED:
			if (!set_status(job->job_id, JOB_STATE_FAILED, 0, 0, error, 0))
				return false;
			job->state = JOB_STATE_FAILED;
			break;
		case JOB_EXIT_STOPPED:
			if (job->want_running && !stop_requested)
			{
				/* Terminated by someone else (pg_terminate_backend): run again now. */
				if (!set_status(job->job_id, JOB_STATE_RESTARTING, 0, 1, "the job worker was terminated",
								failures))
					return false;
				job->state = JOB_STATE_RESTARTING;
				job->changed_at = 0;
			}
			else if (!set_status(job->job_id, job->want_running ? job->state : JOB_STATE_STOPPED, 0, 0, NULL, 0))
				return false;
			break;
		case JOB_EXIT_REWIND:
			/* Back to its checkpoint to take a barrier cut: no failure, start again now. */
			lslots[i].retry_at = 0;
			break;
		case JOB_EXIT_BUSY:
			/*
			 * restore_job or drop_job held the job's lock for a moment: no
			 * failure, nothing to record; try again a little later.
			 */
			lslots[i].retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															  mailer_restart_backoff_min_ms);
			break;
		case JOB_EXIT_ERROR:
		case JOB_EXIT_NONE:
			failures++;
			if (!set_status(job->job_id, JOB_STATE_RESTARTING, 0, 1,
							kind == JOB_EXIT_ERROR && error[0] ? error : "the job worker exited unexpectedly",
							failures))
				return false;
			job->changed_at = GetCurrentTimestamp();
			job->state = JOB_STATE_RESTARTING;
			break;
	}
	job->failures = failures;
	return true;
}

/* A restarting job waits out its backoff: restart_backoff_min, doubling per failure. */
static bool
may_start(LauncherJob *job, TimestampTz now, long *timeout_ms)
{
	TimestampTz due;

	if (job->state != JOB_STATE_RESTARTING || job->failures == 0)
		return true;
	due = TimestampTzPlusMilliseconds(job->changed_at, backoff_ms(job->failures));
	if (now >= due)
		return true;
	*timeout_ms = Min(*timeout_ms, TimestampDifferenceMilliseconds(now, due));
	return false;
}

static void
start_worker(int i, LauncherJob *job)
{
	BackgroundWorker worker;
	JobWorkerArgs args;
	BackgroundWorkerHandle *handle;
	MemoryContext old;
	JobSlot    *slot = &mailer_shared->slots[i];

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	worker.bgw_notify_pid = MyProcPid;
	worker.bgw_main_arg = Int32GetDatum(i);
	strlcpy(worker.bgw_library_name, MAILER_EXTENSION, BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "job_worker_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "mailer job %s", job->name);
	strlcpy(worker.bgw_type, "mailer job", BGW_MAXLEN);
	args.job_id = job->job_id;
	args.owner = job->owner;
	args.database = MyDatabaseId;
	args.slot = i;

	TEST_POINT("launcher_before_start");

	/*
	 * A job whose owner role was dropped can never connect: failed, not
	 * retried for good.  (A role that lost LOGIN may get it back: retried.)
	 */
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(job->owner)))
	{
		if (set_status(job->job_id, JOB_STATE_FAILED, 0, 0,
					   psprintf("the job's owner role (oid %u) was dropped: no worker can run the job; "
								"a superuser drops it with mailer.drop_job('%s')", job->owner, job->name), 0))
			job->state = JOB_STATE_FAILED;
		return;
	}

	/*
	 * A stop_job may have run to its end since this round read the jobs,
	 * before the job had a slot to find: read what the job wants now, and
	 * lock its row until the round commits.  A stop_job that comes later
	 * waits for that to update the row, and by then finds the slot with
	 * its registered worker and waits for it.  A row locked by a stop_job
	 * or drop_job in progress: not now, the next round decides.
	 */
	{
		Oid			type = INT8OID;
		Datum		value = Int64GetDatum(job->job_id);
		bool		wants = false;

		if (!exec_own_subxact(job->job_id, "read the desired state",
							  WANTS_RUNNING_SQL " FOR SHARE NOWAIT",
							  1, &type, &value, NULL, &wants) || !wants)
			return;
	}

	/*
	 * A stop_job may have asked the job to stop since this round read it:
	 * then start nothing, and leave the request for the next round.  Else
	 * the slot has a registered worker from now on, so a stop_job that
	 * comes later waits for that worker.
	 */
	SpinLockAcquire(&slot->mutex);
	if (slot->stop_requested)
	{
		SpinLockRelease(&slot->mutex);
		return;
	}
	slot->exit_kind = JOB_EXIT_NONE;
	slot->live_state = JOB_LIVE_NONE;
	slot->registered = true;
	args.generation = ++slot->generation;
	SpinLockRelease(&slot->mutex);
	memcpy(worker.bgw_extra, &args, sizeof(args));

	old = MemoryContextSwitchTo(TopMemoryContext);
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		MemoryContextSwitchTo(old);
		SpinLockAcquire(&slot->mutex);
		slot->registered = false;
		SpinLockRelease(&slot->mutex);
		job->failures++;
		job->changed_at = GetCurrentTimestamp();
		set_status(job->job_id, JOB_STATE_RESTARTING, 0, 0,
				   "could not start a background worker: raise max_worker_processes", job->failures);
		return;
	}
	MemoryContextSwitchTo(old);
	/* A new worker: the last one's exit, recorded in this round, is done with. */
	forget_worker(i);
	lslots[i].handle = handle;
	if (job->state != JOB_STATE_RUNNING)
		set_status(job->job_id, job->state == JOB_STATE_RESTARTING ? JOB_STATE_RESTARTING : JOB_STATE_STARTING,
				   0, 0, NULL, -1);
}

/*
 * Record a job's state; failures: the new count of consecutive failures,
 * -1 unchanged.  False when it could not be written: the job's row is
 * locked (a drop_job not committed yet) or the like.
 */
static bool
set_status(int64 job_id, JobState state, int pid, int add_restarts, const char *error,
		   int failures)
{
	Oid			types[6] = {INT8OID, TEXTOID, INT4OID, INT4OID, TEXTOID, INT4OID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = Int64GetDatum(job_id);
	values[1] = CStringGetTextDatum(job_state_name(state));
	values[2] = Int32GetDatum(pid);
	nulls[2] = pid == 0 ? 'n' : ' ';
	values[3] = Int32GetDatum(add_restarts);
	values[4] = error ? CStringGetTextDatum(error) : (Datum) 0;
	nulls[4] = error ? ' ' : 'n';
	values[5] = Int32GetDatum(failures);
	nulls[5] = failures < 0 ? 'n' : ' ';
	return exec_own_subxact(job_id, "record the state",
							"UPDATE mailer.job_status SET state = $2, pid = $3, "
							"restarts = restarts OPERATOR(pg_catalog.+) $4, "
							"last_error = coalesce($5, last_error), "
							"last_error_at = CASE WHEN $5 IS NULL THEN last_error_at ELSE pg_catalog.now() END, "
							"failures = coalesce($6, failures), changed_at = pg_catalog.now() "
							"WHERE job_id OPERATOR(pg_catalog.=) $1 "
							"AND (state, pid, $4, $5, failures) IS DISTINCT FROM ($2, $3, 0, NULL, coalesce($6, failures)) "
							/* a worker that was seen running may have finished since: finished stays */
							"AND NOT (state OPERATOR(pg_catalog.=) 'finished' AND $2 OPERATOR(pg_catalog.=) 'running')",
							6, types, values, nulls, NULL);
}

/*
 * Run one statement about one job in a subtransaction of its own: an error
 * (a row another transaction holds past lock_timeout) is logged and costs
 * only this job's step this round, never the round.  result, if given:
 * wants_running_result of a WANTS_RUNNING_SQL statement.
 */
typedef struct OwnSubxact
{
	const char *sql;
	int			nargs;
	Oid		   *types;
	Datum	   *values;
	const char *nulls;
	bool	   *result;
} OwnSubxact;

static void
run_own_subxact(void *arg)
{
	OwnSubxact *st = (OwnSubxact *) arg;

	catalog_exec(st->sql, st->nargs, st->types, st->values, st->nulls, false);
	if (st->result)
		*st->result = wants_running_result();
}

/* The answer of a WANTS_RUNNING_SQL statement: false without a row. */
static bool
wants_running_result(void)
{
	bool		isnull = true;

	return SPI_processed == 1 &&
		DatumGetBool(catalog_value(0, Anum_wants_running, &isnull)) && !isnull;
}

static bool
exec_own_subxact(int64 job_id, const char *what, const char *sql, int nargs,
				 Oid *types, Datum *values, const char *nulls, bool *result)
{
	OwnSubxact	st = {sql, nargs, types, values, nulls, result};
	ErrorData  *edata = guard_catch(run_own_subxact, &st, CurrentMemoryContext);

	if (edata == NULL)
		return true;
	ereport(LOG,
			(errcode(edata->sqlerrcode),
			 errmsg("mailer launcher could not %s of job " INT64_FORMAT ", trying again: %s",
					what, job_id, edata->message)));
	FreeErrorData(edata);
	return false;
}

/* The extension is gone: ask every worker to stop, forget every slot. */
static void
stop_all_workers(void)
{
	for (int i = 0; i < mailer_shared->nslots; i++)
	{
		JobSlot    *slot = &mailer_shared->slots[i];

		if (slot->job_id == 0 || slot->subtask > 0)
			continue;
		if (worker_alive(i))
		{
			ask_to_stop(slot);
			continue;
		}
		forget_worker(i);
		LWLockAcquire(mailer_shared->lock, LW_EXCLUSIVE);
		SpinLockAcquire(&slot->mutex);
		slot->registered = false;
		SpinLockRelease(&slot->mutex);
		slot->job_id = 0;
		LWLockRelease(mailer_shared->lock);
	}
}

/* The launcher's memory of the slot's worker, gone. */
static void
forget_worker(int i)
{
	if (lslots[i].handle)
		pfree(lslots[i].handle);
	lslots[i].handle = NULL;
	lslots[i].adopted = false;
	lslots[i].recorded_running = false;
	lslots[i].exit_recorded = false;
}

static bool
worker_alive(int i)
{
	pid_t		pid;

	if (lslots[i].handle)
	{
		BgwHandleStatus status = GetBackgroundWorkerPid(lslots[i].handle, &pid);

		return status == BGWH_STARTED || status == BGWH_NOT_YET_STARTED;
	}
	return lslots[i].adopted && mailer_shared->slots[i].pid != 0;
}

/*
 * A running worker's error (why it waits or waited), if it is new: copied
 * to recorded.  A wait shorter than a round is recorded too: the worker
 * keeps the text.  An exiting worker's error is handle_exit's to record.
 */
static bool
waiting_error(JobSlot *slot, char *recorded)
{
	bool		changed;

	SpinLockAcquire(&slot->mutex);
	changed = slot->exit_kind == JOB_EXIT_NONE && slot->error[0] != '\0' &&
		strcmp(slot->error, recorded) != 0;
	if (changed)
		strlcpy(recorded, slot->error, JOB_SLOT_ERROR_LEN);
	SpinLockRelease(&slot->mutex);
	return changed;
}

/* The worker takes a final checkpoint and exits when it sees this. */
static void
ask_to_stop(JobSlot *slot)
{
	SpinLockAcquire(&slot->mutex);
	job_slot_request_stop(slot, InvalidTransactionId);
	SpinLockRelease(&slot->mutex);
}

/* Whether the stop_job that asked the slot's worker to stop has yet to commit or abort. */
static bool
stop_in_progress(JobSlot *slot)
{
	TransactionId xid;

	SpinLockAcquire(&slot->mutex);
	xid = slot->stop_xid;
	SpinLockRelease(&slot->mutex);
	return TransactionIdIsValid(xid) && TransactionIdIsInProgress(xid);
}

/* The job's desired state as committed now, not as of the round's snapshot. */
static bool
job_wants_to_run(int64 job_id)
{
	Oid			type = INT8OID;
	Datum		value = Int64GetDatum(job_id);

	/* Not read-only: the statement takes a snapshot of its own. */
	catalog_exec(WANTS_RUNNING_SQL, 1, &type, &value, NULL, false);
	return wants_running_result();
}

static long
backoff_ms(int failures)
{
	double		ms = mailer_restart_backoff_min_ms;

	for (int i = 1; i < failures && ms < mailer_restart_backoff_max_ms; i++)
		ms *= 2;
	return (long) Min(ms, (double) mailer_restart_backoff_max_ms);
}
