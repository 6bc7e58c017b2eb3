/*
 * subtasks.h
 *		A parallel job's subtasks 1..P-1: subtask 0 starts them, as a
 *		parallel query's leader starts its workers, and every subtask
 *		fails as soon as another has gone.
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#ifndef SUBTASKS_H
#define SUBTASKS_H

#include "runtime/job.h"
#include "runtime/job_worker.h"

/* Subtask 0, before it reads anything: no subtask of an earlier run is left. */
extern void subtasks_wait_for_previous(JobSlot *coordinator);

/* Subtask 0: claim the others' slots and start them on the queues made. */
extern void subtasks_start(const JobWorkerArgs *args, Job *job, dsm_handle exchange);

/* A subtask 1..P-1: subtask 0 of its run still runs. */
extern bool subtasks_coordinator_alive(Job *job);

/*
 * A subtask 1..P-1: ask subtask 0 of its run (not a later run's) to stop
 * the job (stop), or for an epoch (its buffers are full).
 */
extern void subtasks_ask(Job *job, bool stop);

/*
 * A subtask 1..P-1: subtask 0 ended the run on purpose without a last
 * epoch (a stop between barrier cuts, a rewind to one), so that what fails
 * now for want of it is no error.
 */
extern bool subtasks_run_ended(Job *job);

/* Set the latch of every subtask of the run, subtask 0's too. */
extern void subtasks_wake_all(Job *job);

/* ERROR when a subtask (or subtask 0) of the run has stopped. */
extern void subtasks_check(Job *job);

/* A subtask 1..P-1 that exits: its error to subtask 0's slot, its slot freed. */
extern void subtasks_release(JobSlot *slot);

#endif							/* SUBTASKS_H */
