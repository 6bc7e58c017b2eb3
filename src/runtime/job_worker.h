/*
 * job_worker.h
 *		The background worker that runs one job.
 */
#ifndef JOB_WORKER_H
#define JOB_WORKER_H

#include "storage/dsm.h"

/* What the launcher hands a worker, in bgw_extra. */
typedef struct JobWorkerArgs
{
	int64		job_id;
	Oid			owner;
	Oid			database;
	int			slot;
	uint32		generation;		/* the slot's generation when the launcher started it */
	int			subtask;		/* 0: started by the launcher; else by subtask 0 */
	dsm_handle	exchange;		/* for subtasks 1..P-1: the queues subtask 0 made */
} JobWorkerArgs;

extern PGDLLEXPORT void job_worker_main(Datum main_arg);

#endif							/* JOB_WORKER_H */
