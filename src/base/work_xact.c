/*
 * work_xact.c
 *		The transaction a job worker does a piece of its work in
 *		(work_xact.h).
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/work_xact.h"

/* The timeout that ticks while a work transaction is open, and how often. */
static TimeoutId work_timer;
static int	work_timer_tick_ms;

void
work_xact_set_timer(TimeoutId id, int tick_ms)
{
	work_timer = id;
	work_timer_tick_ms = tick_ms;
}

void
work_xact_begin(void)
{
	MemoryContext ctx = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();

	/*
	 * Read committed, whatever default_transaction_isolation the owner's
	 * role or the database sets: the subtasks of a job work at the same
	 * time on disjoint rows of shared tables, and under serializable the
	 * predicate locks of their index scans would make them fail each
	 * other's commits.  No snapshot is taken yet, so it may still change.
	 */
	XactIsoLevel = XACT_READ_COMMITTED;
	PushActiveSnapshot(GetTransactionSnapshot());
	MemoryContextSwitchTo(ctx);
	/* Work in progress: a SIGTERM now gives it mailer.termination_grace to end. */
	enable_timeout_every(work_timer,
						 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), work_timer_tick_ms),
						 work_timer_tick_ms);
}

void
work_xact_abort(void)
{
	MemoryContext ctx = CurrentMemoryContext;

	AbortCurrentTransaction();
	MemoryContextSwitchTo(ctx);
	disable_timeout(work_timer, false);
}

void
work_xact_end(void)
{
	MemoryContext ctx = CurrentMemoryContext;

	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(ctx);
	disable_timeout(work_timer, false);
}

/*
 * Prepare it for two-phase commit under gid instead: its effects stay
 * invisible and its locks held until someone commits or rolls back the
 * prepared transaction.
 */
void
work_xact_prepare(const char *gid)
{
	MemoryContext ctx = CurrentMemoryContext;

	PopActiveSnapshot();
	/* PREPARE TRANSACTION ends a transaction block: make this one a block first. */
	BeginTransactionBlock();
	CommitTransactionCommand();
	StartTransactionCommand();
	if (!PrepareTransactionBlock(gid))
		elog(ERROR, "could not prepare transaction \"%s\"", gid);
	CommitTransactionCommand();
	MemoryContextSwitchTo(ctx);
	disable_timeout(work_timer, false);
}
