/*
 * termination.h
 *		How a job worker is asked to stop (stop_job, SIGTERM) and the grace a
 *		SIGTERM gives the work in progress.
 */
#ifndef TERMINATION_H
#define TERMINATION_H

#include "jobs/job_slots.h"

/* Handle SIGTERM; before the worker unblocks signals. */
extern void termination_install_handler(void);

/* Count the grace while work transactions are open; once connected. */
extern void termination_start_timer(void);

/* A SIGTERM came. */
extern bool termination_signalled(void);

/* The final checkpoint after a stop request has a grace of its own. */
extern void termination_restart_grace(void);

/* A second's wait (less when the latch is set) before looking again. */
extern void job_pause_briefly(void);

#endif							/* TERMINATION_H */
