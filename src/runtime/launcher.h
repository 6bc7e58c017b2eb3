/*
 * launcher.h
 *		The launcher background worker: keeps running job workers in line
 *		with mailer.jobs.
 */
#ifndef LAUNCHER_H
#define LAUNCHER_H

/* Called from _PG_init while preloading. */
extern void launcher_register(void);

extern PGDLLEXPORT void launcher_main(Datum main_arg);

#endif							/* LAUNCHER_H */
