/*
 * job_history.h
 *		STUB of the one-second history ring (helper "instr" writes the real
 *		file; the lead replaces this one with it at merge).  The interface
 *		is the contract's, so that the HTTP worker builds against it.
 */
#ifndef JOB_HISTORY_H
#define JOB_HISTORY_H

#include "utils/timestamp.h"

#define JOB_HISTORY_SECONDS 600

typedef struct JobHistorySample
{
	int64		at;				/* unix seconds */
	int64		records_in,
				records_out,
				records_dead_lettered,
				records_late;	/* cumulative, as mailer.metrics */
	int64		consumer_lag;	/* -1 unknown */
	int64		watermark_delay_ms; /* -1 no watermark */
	int64		last_checkpoint_ms; /* -1 none */
	int32		restarts;
	int32		state;			/* JobLiveState or -1 when no worker */
} JobHistorySample;

extern Size job_history_shmem_size(void);
extern void job_history_shmem_init(void);
extern void job_history_sample(TimestampTz now);
extern int	job_history_read(Oid ext_oid, int64 job_id, JobHistorySample **out);
/* The job's restart count as the catalog has it: the samples from now on carry it. */
extern void job_history_note_restarts(Oid ext_oid, int64 job_id, int32 restarts);

#endif							/* JOB_HISTORY_H */
