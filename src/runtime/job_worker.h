/*
 * job_worker.h
 *		The background worker that runs one job.
 */
#ifndef JOB_WORKER_H
#define JOB_WORKER_H

/* What the launcher hands a worker, in bgw_extra. */
typedef struct JobWorkerArgs
{
	int64		job_id;
	Oid			owner;
	Oid			database;
	int			slot;
	uint32		generation;		/* the slot's generation when the launcher started it */
} JobWorkerArgs;

extern PGDLLEXPORT void job_worker_main(Datum main_arg);

#endif							/* JOB_WORKER_H */
