/*
 * job_control.h
 *		What the SQL functions of api/ (job_functions.c) share: the
 *		transaction that controls a job, the stop protocol with the launcher
 *		and the workers, and the log hook that hides specs.
 */
#ifndef MAILER_JOB_CONTROL_H
#define MAILER_JOB_CONTROL_H

#include "jobs/catalog.h"

/* job_control_xact.c: what a transaction asked of the launcher and workers. */

/*
 * This transaction controls a job: what it asked of the launcher and the
 * workers lives in this backend until it ends, so it may not be prepared.
 */
extern void job_control_note(void);

/* The same, and wake the launcher once the transaction commits. */
extern void job_control_wake_launcher_after_commit(void);

/* A stop of the job (of installation ext_oid) that an abort withdraws. */
extern void job_control_remember_stop(int64 job_id, Oid ext_oid);

/* Did this transaction ask the job to stop? */
extern bool job_control_stopped_here(int64 job_id);

/* spec_logging.c: while a statement's text may hold a spec's secrets. */

/*
 * From here until end_reading_spec or the transaction's end, log errors
 * without the statement; pg_stat_activity shows the call of function
 * (mailer.<function>) on job_name (NULL: none) with its spec left out.
 */
extern void begin_reading_spec(const char *function, const char *job_name);
extern void end_reading_spec(void);

/* stop_protocol.c: how the SQL functions wait for the launcher and the workers. */

/*
 * Ask the job's worker to take a final checkpoint and exit, and wait up to
 * timeout_ms until it has.  If our transaction aborts, the request is
 * withdrawn and the launcher lets the job run on.
 */
extern void request_stop_and_wait(JobRow *job, long timeout_ms);

/*
 * Wait up to timeout_ms until the launcher has recorded the exit of the
 * job's last worker, before a start_job (starting) or restore_job writes
 * over what it would record.
 */
extern void wait_for_launcher_to_settle(JobRow *job, bool starting, long timeout_ms);

/*
 * Take the job's lock (job_lock_try) until the transaction ends, waiting
 * up to timeout_ms for a worker of the job to release it.
 */
extern bool job_lock_wait(JobRow *job, Oid ext_oid, long timeout_ms);

/* Whether a worker of the job runs, or was started and has not exited yet. */
extern bool job_worker_alive(JobRow *job, Oid ext_oid);

#endif							/* MAILER_JOB_CONTROL_H */
