/*
 * job_control_xact.c
 *		The transaction of a SQL function that controls a job.
 *
 * The launcher acts on what create_job, start_job, stop_job, drop_job and
 * restore_job did only once their transaction commits: it is woken then.
 * A stop request is made at once, in shared memory (the worker must stop
 * before stop_job returns): an abort withdraws it.  Such a transaction
 * cannot be prepared, as what it asked lives in this backend.
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"

#include "api/job_control.h"
#include "jobs/job_slots.h"

static bool xact_callback_registered = false;
static bool wake_launcher_at_commit = false;
static bool controlled_jobs = false;	/* this transaction created, started, stopped, ... a job */
static List *stops_to_undo = NIL;	/* (int64 *) job ids whose stop request an abort withdraws */
static Oid	stops_ext_oid = InvalidOid;	/* the installation those jobs are of */

static void job_control_register_callback(void);
static void job_control_xact_callback(XactEvent event, void *arg);
static void withdraw_stops(void);

static void
job_control_register_callback(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(job_control_xact_callback, NULL);
		xact_callback_registered = true;
	}
}

void
job_control_note(void)
{
	job_control_register_callback();
	controlled_jobs = true;
}

void
job_control_wake_launcher_after_commit(void)
{
	job_control_note();
	wake_launcher_at_commit = true;
}

void
job_control_remember_stop(int64 job_id, Oid ext_oid)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	int64	   *id = palloc(sizeof(int64));

	*id = job_id;
	stops_to_undo = lappend(stops_to_undo, id);
	stops_ext_oid = ext_oid;
	MemoryContextSwitchTo(old);
}

bool
job_control_stopped_here(int64 job_id)
{
	ListCell   *lc;

	foreach(lc, stops_to_undo)
		if (*(int64 *) lfirst(lc) == job_id)
			return true;
	return false;
}

static void
job_control_xact_callback(XactEvent event, void *arg)
{
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
				withdraw_stops();
			break;
		default:
			return;
	}
	wake_launcher_at_commit = false;
	controlled_jobs = false;
	stops_to_undo = NIL;
	stops_ext_oid = InvalidOid;
}

/* The transaction aborted: the workers it asked to stop run on. */
static void
withdraw_stops(void)
{
	ListCell   *lc;

	foreach(lc, stops_to_undo)
	{
		JobSlot    *slot = job_slot_lock(*(int64 *) lfirst(lc), stops_ext_oid);

		if (slot)
		{
			slot->stop_requested = false;
			job_slot_unlock(slot);
		}
	}
	job_slots_wake_launcher();
}
