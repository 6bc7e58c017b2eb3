/*
 * job_state.h
 *		The one vocabulary of a job's state.
 *
 * The launcher records a job's state in mailer.job_status.state, a running
 * worker reports what it is doing in its slot (JobSlot.live_state), and the
 * SQL functions answer with a state.  All of them use the names of this
 * enum, as the catalog's CHECK constraint and the mailer.jobs view spell
 * them.  mailer.job.desired_state uses two of them (running, stopped).
 *
 * Design: docs/ARCHITECTURE.md, "Job states".
 */
#ifndef JOB_STATE_H
#define JOB_STATE_H

typedef enum JobState
{
	JOB_STATE_NONE = 0,			/* in a slot: no worker reports a state */
	JOB_STATE_STARTING,			/* launched (or to be), restoring its checkpoint */
	JOB_STATE_RUNNING,
	JOB_STATE_WAITING,			/* a worker's only: running, blocked on an outside fault */
	JOB_STATE_RESTARTING,		/* the catalog's only: its worker failed, backing off */
	JOB_STATE_STOPPED,
	JOB_STATE_FINISHED,			/* bounded source done, last checkpoint committed */
	JOB_STATE_FAILED			/* a failure the launcher does not retry */
} JobState;

/* The state's name, as SQL shows it (NULL for JOB_STATE_NONE). */
extern const char *job_state_name(JobState state);

/* The state of that name; ERROR for a name that is no state. */
extern JobState job_state_from_name(const char *name);

/* Finished or failed: only a start_job runs the job again. */
extern bool job_state_is_terminal(JobState state);

/*
 * A job's state once it has been stopped: a finished or failed job stays
 * so, any other is stopped.
 */
extern JobState job_state_after_stop(JobState state);

#endif							/* JOB_STATE_H */
