/*
 * mailer.h
 *		Settings and small definitions shared by every part of mailer.
 */
#ifndef MAILER_H
#define MAILER_H

#include "postgres.h"

#define MAILER_SCHEMA "mailer"

/* GUCs, defined in mailer.c */
extern char *mailer_database;
extern int	mailer_max_jobs;
extern int	mailer_batch_size;
extern int	mailer_max_buffered_rows;
extern int	mailer_restart_backoff_min_ms;
extern int	mailer_restart_backoff_max_ms;

/* True when the library was loaded through shared_preload_libraries. */
extern bool mailer_preloaded;

/* Raise an error telling the user to preload the library, if it is not. */
extern void mailer_require_preload(void);

#endif							/* MAILER_H */
