/*
 * epoch_commit.c
 *		Two-phase commit of a parallel job's epochs (epoch_commit.h).
 *
 * Every subtask writes its share of epoch E (its sink rows, dead letters,
 * state snapshot and checkpoint row) in a transaction of its own.
 * Subtasks 1..P-1 PREPARE theirs under a name that says job, epoch and
 * subtask; subtask 0 waits until all are prepared, then COMMITs its own:
 * that commit, which holds subtask 0's checkpoint row, is the decision.
 * Then it commits the prepared ones.  Crash analysis:
 *
 * - before the decision: the prepared shares are rolled back by whoever
 *   resolves them (no row of subtask 0 for E);
 * - after it: they are committed by whoever resolves them;
 * - resolving happens before a job's subtasks start (subtask 0 does it,
 *   once no subtask of an earlier run is left) and in the launcher for jobs
 *   that have no worker (stopped, failed, dropped), so no prepared
 *   transaction outlives a run for long.
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#include "postgres.h"

#include "access/twophase.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"

#include "base/mailer.h"
#include "base/test_point.h"
#include "base/work_xact.h"
#include "jobs/catalog.h"
#include "runtime/epoch_commit.h"
#include "runtime/subtasks.h"

#define GID_PREFIX "mailer"

/*
 * A share's name: whose (installation, job, epoch, subtask), and a random
 * nonce that only the subtask and subtask 0 know (it travels in shared
 * memory), so that no other role can take the name first and make the
 * PREPARE fail (gids are cluster-wide, and pg_prepared_xacts is public).
 */
static char *
gid_of(Oid ext_oid, int64 job_id, int64 epoch, int subtask, uint64 nonce)
{
	return psprintf(GID_PREFIX "_%u_" INT64_FORMAT "_" INT64_FORMAT "_%d_%016" INT64_MODIFIER "x",
					ext_oid, job_id, epoch, subtask, nonce);
}

static void
sleep_a_little(void)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 100,
					 PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * Subtask k's slot, once subtasks_check has found every subtask running.
 * Looked up each time: a subtask that exits frees its slot, which another
 * job may take.
 */
static JobSlot *
live_subtask(Job *job, int k)
{
	subtasks_check(job);
	return job_slots_subtask(job->slot, k);
}

/*
 * Shares are prepared, and committed, as the job's owner: a trigger or
 * function that changed the role for the session would leave them to no
 * one who may commit them.
 */
static void
require_owner(Job *job)
{
	if (GetUserId() != job->owner)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("the checkpoint's transaction changed the current role"),
				 errhint("Do not change the role in a trigger or function the job calls.")));
}

static void
commit_as_coordinator(Job *job, int64 epoch)
{
	require_owner(job);
	for (int k = 1; k < job->parallelism; k++)
	{
		while (pg_atomic_read_u64(&live_subtask(job, k)->prepared_epoch) < (uint64) epoch)
			sleep_a_little();
	}
	TEST_POINT("epoch_before_decision");
	work_xact_end();
	TEST_POINT("epoch_after_decision");
	for (int k = 1; k < job->parallelism; k++)
	{
		JobSlot    *slot = live_subtask(job, k);
		char	   *gid;

		pg_read_barrier();
		gid = gid_of(job->ext_oid, job->job_id, epoch, k, slot->prepared_nonce);
		StartTransactionCommand();
		FinishPreparedTransaction(gid, true);
		CommitTransactionCommand();
	}
	pg_atomic_write_u64(&job->slot->committed_epoch, epoch);
	for (int k = 1; k < job->parallelism; k++)
	{
		JobSlot    *slot = job_slots_subtask(job->slot, k);

		if (slot)
			job_slot_wake(slot);
	}
}

static void
prepare_as_subtask(Job *job, int64 epoch)
{
	uint64		nonce;

	require_owner(job);
	if (!pg_strong_random(&nonce, sizeof(nonce)))
		elog(ERROR, "could not generate a random name for a prepared transaction");
	work_xact_prepare(gid_of(job->ext_oid, job->job_id, epoch, job->subtask, nonce));
	TEST_POINT("epoch_after_prepare");
	job->slot->prepared_nonce = nonce;
	pg_write_barrier();
	pg_atomic_write_u64(&job->slot->prepared_epoch, epoch);
	job_slot_wake(job->coordinator);
	while (pg_atomic_read_u64(&job->coordinator->committed_epoch) < (uint64) epoch)
	{
		/* Committed just before subtask 0 exited (a last epoch) is committed. */
		if (!subtasks_coordinator_alive(job) &&
			pg_atomic_read_u64(&job->coordinator->committed_epoch) < (uint64) epoch)
			subtasks_check(job);
		sleep_a_little();
	}
}

void
epoch_commit(Job *job, int64 epoch)
{
	if (job->parallelism == 1)
		work_xact_end();
	else if (job->subtask == 0)
		commit_as_coordinator(job, epoch);
	else
		prepare_as_subtask(job, epoch);
}

/*
 * Whether the job has a worker that may still commit: subtask 0 running,
 * or registered by the launcher this round.  Its slot kept through a
 * restart's backoff or a stop is not enough: its shares would wait.
 */
static bool
job_has_worker(int64 job_id, Oid ext_oid)
{
	JobSlot    *slot = job_slots_find(job_id, ext_oid);
	bool		has;

	if (slot == NULL)
		return false;
	SpinLockAcquire(&slot->mutex);
	has = slot->pid != 0 || slot->registered;
	SpinLockRelease(&slot->mutex);
	return has;
}

/* One prepared share and what was decided for it. */
typedef struct Pending
{
	char	   *gid;
	int64		job_id;
	bool		commit;
} Pending;

/* The prepared shares of the installation's jobs (or of job_id), by job, with their decisions. */
static List *
read_shares(Oid ext_oid, int64 job_id)
{
	List	   *shares = NIL;
	Oid			types[2] = {TEXTOID, INT8OID};
	Datum		values[2] = {CStringGetTextDatum(psprintf(GID_PREFIX "_%u", ext_oid)),
	Int64GetDatum(job_id)};
	MemoryContext ctx = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	/* Not to deadlock with a DROP EXTENSION (catalog_lock_extension); dropped, it has no shares. */
	if (!catalog_lock_extension(ext_oid))
	{
		CommitTransactionCommand();
		MemoryContextSwitchTo(ctx);
		return NIL;
	}
	PushActiveSnapshot(GetTransactionSnapshot());
	MemoryContextSwitchTo(ctx);
	SPI_connect();
	/* A share is committed when subtask 0's row of its epoch is. */
	catalog_exec("SELECT p.gid, p.job_id, EXISTS (SELECT FROM " MAILER_SCHEMA ".checkpoints c "
				 "  WHERE c.job_id OPERATOR(pg_catalog.=) p.job_id "
				 "  AND c.epoch OPERATOR(pg_catalog.=) p.epoch AND c.subtask OPERATOR(pg_catalog.=) 0) "
				 "FROM (SELECT x.gid, x.owner, "
				 "        pg_catalog.split_part(x.gid, '_', 3)::pg_catalog.int8 AS job_id, "
				 "        pg_catalog.split_part(x.gid, '_', 4)::pg_catalog.int8 AS epoch "
				 "      FROM pg_catalog.pg_prepared_xacts x "
				 "      WHERE x.database OPERATOR(pg_catalog.=) pg_catalog.current_database() "
				 "      AND x.gid OPERATOR(pg_catalog.~) ('^' OPERATOR(pg_catalog.||) $1 "
				 "          OPERATOR(pg_catalog.||) '_[0-9]{1,18}_[0-9]{1,18}_[0-9]{1,4}_[0-9a-f]{16}$') "
				 "      OFFSET 0) p "
				 "LEFT JOIN " MAILER_SCHEMA ".job j ON j.job_id OPERATOR(pg_catalog.=) p.job_id "
				 "WHERE ($2 OPERATOR(pg_catalog.=) 0 OR p.job_id OPERATOR(pg_catalog.=) $2) "
				 /* Shares are the job owner's: a look-alike another role prepared is not ours. */
				 "AND (j.job_id IS NULL OR p.owner OPERATOR(pg_catalog.=) pg_catalog.pg_get_userbyid(j.owner)) "
				 "ORDER BY p.job_id",
				 2, types, values, NULL, true);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(ctx);
		Pending    *p = palloc(sizeof(Pending));

		p->gid = catalog_text(i, 1);
		p->job_id = DatumGetInt64(catalog_value(i, 2, NULL));
		p->commit = DatumGetBool(catalog_value(i, 3, NULL));
		shares = lappend(shares, p);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(ctx);
	return shares;
}

/* Settle a job's shares, per decisions read now. */
static void
settle_job(Oid ext_oid, int64 job_id)
{
	MemoryContext ctx = CurrentMemoryContext;
	ListCell   *lc;

	foreach(lc, read_shares(ext_oid, job_id))
	{
		Pending    *p = lfirst(lc);

		StartTransactionCommand();
		FinishPreparedTransaction(p->gid, p->commit);
		CommitTransactionCommand();
		MemoryContextSwitchTo(ctx);
		ereport(LOG,
				(errmsg("mailer %s the prepared share \"%s\" of an epoch",
						p->commit ? "committed" : "rolled back", p->gid)));
	}
}

void
epoch_resolve_prepared(Oid ext_oid, int64 job_id)
{
	int64		last = 0;
	ListCell   *lc;

	/* Subtask 0 of the job, before it starts: no one else can decide its epochs now. */
	if (job_id != 0)
	{
		settle_job(ext_oid, job_id);
		return;
	}

	/*
	 * The launcher: the jobs that have shares and no worker.  Their
	 * decisions are read only after that is known (settle_job): a worker
	 * alive a moment ago may have decided its epoch since, but once it has
	 * gone only the launcher starts another.  A job with a worker is left
	 * to it.
	 */
	foreach(lc, read_shares(ext_oid, 0))
	{
		Pending    *p = lfirst(lc);

		if (p->job_id == last)
			continue;
		last = p->job_id;
		if (!job_has_worker(p->job_id, ext_oid))
			settle_job(ext_oid, p->job_id);
	}
}

bool
epoch_has_prepared(Oid ext_oid, int64 job_id)
{
	Oid			types[2] = {TEXTOID, INT8OID};
	Datum		values[2] = {CStringGetTextDatum(psprintf(GID_PREFIX "_%u_" INT64_FORMAT "_", ext_oid, job_id)),
	Int64GetDatum(job_id)};
	bool		found;

	SPI_connect();
	/* The owner's only: a look-alike another role prepared holds nothing of the job's. */
	catalog_exec("SELECT FROM pg_catalog.pg_prepared_xacts x, " MAILER_SCHEMA ".job j "
				 "WHERE x.database OPERATOR(pg_catalog.=) pg_catalog.current_database() "
				 "AND pg_catalog.starts_with(x.gid, $1) AND j.job_id OPERATOR(pg_catalog.=) $2 "
				 "AND x.owner OPERATOR(pg_catalog.=) pg_catalog.pg_get_userbyid(j.owner)",
				 2, types, values, NULL, true);
	found = SPI_processed > 0;
	SPI_finish();
	return found;
}
