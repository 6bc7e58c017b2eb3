/*
 * job_history.h
 *		A one-second history of every running job for the dashboard's
 *		charts: a ring of samples per job in shared memory.
 *
 * The HTTP worker samples the job slots once a second and reads the rings
 * when it answers; nothing else writes them.  A ring per slot of
 * mailer.max_jobs, of JOB_HISTORY_SECONDS samples each: the memory is
 * fixed at server start (docs/ARCHITECTURE.md, "Shared memory: job slots").
 */
#ifndef JOB_HISTORY_H
#define JOB_HISTORY_H

#include "utils/timestamp.h"

#define JOB_HISTORY_SECONDS 600

typedef struct JobHistorySample
{
	int64		at;				/* unix seconds */
	/* cumulative, as mailer.metrics shows them */
	int64		records_in,
				records_out,
				records_dead_lettered,
				records_late;
	int64		consumer_lag;	/* -1 unknown */
	int64		watermark_delay_ms; /* -1 no watermark */
	int64		last_checkpoint_ms; /* -1 none */
	int32		restarts;		/* as job_history_note_restarts last said; 0 before */
	int32		state;			/* JobLiveState, or -1 when no worker */
} JobHistorySample;

/* Whether the server keeps the history: only where the HTTP worker runs. */
extern bool job_history_enabled(void);

extern Size job_history_shmem_size(void);
extern void job_history_request_locks(void);
extern void job_history_shmem_init(void);

/*
 * One sample per job with a slot (its subtasks summed into subtask 0's
 * job), at time now.  Called once a second by the HTTP worker; no SPI, no
 * allocation beyond a small array.
 */
extern void job_history_sample(TimestampTz now);

/*
 * Copy the job's samples, oldest first, into *out (palloc'd, up to
 * JOB_HISTORY_SECONDS); returns the count (0 and *out NULL when none).
 */
extern int	job_history_read(Oid ext_oid, int64 job_id, JobHistorySample **out);

/*
 * The job's restart count as the catalog has it (the slots do not know
 * it): the samples from now on carry it.  For the HTTP worker, which
 * reads mailer.jobs when it answers.
 */
extern void job_history_note_restarts(Oid ext_oid, int64 job_id, int32 restarts);

#endif							/* JOB_HISTORY_H */
