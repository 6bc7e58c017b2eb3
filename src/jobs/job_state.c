/*
 * job_state.c
 *		Names of a job's states (job_state.h).
 */
#include "postgres.h"

#include "jobs/job_state.h"

static const char *const job_state_names[] = {
	[JOB_STATE_NONE] = NULL,
	[JOB_STATE_STARTING] = "starting",
	[JOB_STATE_RUNNING] = "running",
	[JOB_STATE_WAITING] = "waiting",
	[JOB_STATE_RESTARTING] = "restarting",
	[JOB_STATE_STOPPED] = "stopped",
	[JOB_STATE_FINISHED] = "finished",
	[JOB_STATE_FAILED] = "failed"
};

const char *
job_state_name(JobState state)
{
	Assert(state >= 0 && state < lengthof(job_state_names));
	return job_state_names[state];
}

JobState
job_state_from_name(const char *name)
{
	for (int s = JOB_STATE_NONE + 1; s < lengthof(job_state_names); s++)
		if (strcmp(job_state_names[s], name) == 0)
			return (JobState) s;
	/* The catalog's CHECK constraints allow no other name. */
	elog(ERROR, "unknown mailer job state \"%s\"", name);
	pg_unreachable();
}

bool
job_state_is_terminal(JobState state)
{
	return state == JOB_STATE_FINISHED || state == JOB_STATE_FAILED;
}

JobState
job_state_after_stop(JobState state)
{
	return job_state_is_terminal(state) ? state : JOB_STATE_STOPPED;
}
