/*
 * launcher.h
 *		The launcher background worker: keeps running job workers in line
 *		with mailer.jobs.
 */
#ifndef LAUNCHER_H
#define LAUNCHER_H

/* _PG_init registers it while preloading: a static worker, "mailer launcher". */
extern PGDLLEXPORT void launcher_main(Datum main_arg);

#endif							/* LAUNCHER_H */
