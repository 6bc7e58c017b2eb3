/*
 * epoch_commit.h
 *		One commit per epoch across a parallel job's subtasks: two-phase
 *		commit, with subtask 0's checkpoint row as the decision.
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#ifndef EPOCH_COMMIT_H
#define EPOCH_COMMIT_H

#include "runtime/job.h"

/*
 * End the checkpoint transaction of epoch: subtask 0 commits it once every
 * other subtask has prepared its own, then commits theirs; another subtask
 * prepares it and waits for that.  ERROR when a subtask has gone.
 */
extern void epoch_commit(Job *job, int64 epoch);

/*
 * Settle the prepared transactions left by subtasks of job_id (0: of
 * every job of the installation that has no worker): committed when the
 * decision (subtask 0's row of the epoch) committed, else rolled back.
 * Outside a transaction.
 */
extern void epoch_resolve_prepared(Oid ext_oid, int64 job_id);

/* Whether a share of the job's is still prepared (a SQL function waits for the settling). */
extern bool epoch_has_prepared(Oid ext_oid, int64 job_id);

#endif							/* EPOCH_COMMIT_H */
