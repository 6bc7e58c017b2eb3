/*
 * job_view.h
 *		A job's live state as the views and the history show it: one slot
 *		read at one moment, and a parallel job's subtasks summed into its
 *		coordinator's (job_view.c).
 */
#ifndef JOB_VIEW_H
#define JOB_VIEW_H

#include "jobs/job_slots.h"

/* What the views show of one slot, read at one moment. */
typedef struct JobView
{
	int64		job_id;
	int			subtask;
	pid_t		pid;
	JobLiveState live_state;
	JobWaitFor	waiting_for;
	bool		live;			/* a worker runs (or has just finished) */
	bool		no_error;		/* no live error to show */
	char		error[JOB_SLOT_ERROR_LEN];
	TimestampTz error_at;
	uint64		counters[JC_NUM_COUNTERS];
	double		input_rate;
	int64		last_checkpoint_epoch;
	TimestampTz last_checkpoint_at;
	int64		last_checkpoint_ms;
	TimestampTz watermark;
	int64		state_bytes;
	int64		consumer_lag;
	double		state_checkpoint_ms;
	double		state_restore_ms;
} JobView;

/* Read a slot; caller holds mailer_shared->lock. */
extern void job_view_read(JobSlot *slot, JobView *v);

/*
 * Add subtask sub to the job's view v (the coordinator's to start with):
 * counters, rate, lag and state size summed, the least watermark, and the
 * job waiting while one of its subtasks does.  The checkpoint is the
 * coordinator's: it commits the epoch for all.
 */
extern void job_view_add_subtask(JobView *v, const JobView *sub);

/* The whole job: its coordinator's slot with every subtask added; caller holds mailer_shared->lock. */
extern void job_view_read_job(JobSlot *coordinator, JobView *v);

#endif							/* JOB_VIEW_H */
