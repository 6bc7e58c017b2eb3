/*
 * mailer.h
 *		Settings and small definitions shared by every part of mailer.
 */
#ifndef MAILER_H
#define MAILER_H

#include "postgres.h"

#include <signal.h>

#define MAILER_SCHEMA "mailer"

/* Microseconds from 1970-01-01 (Unix) to 2000-01-01 (a timestamp's zero). */
#define UNIX_OFFSET_US ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

/* GUCs, defined in mailer.c */
extern char *mailer_database;
extern int	mailer_max_jobs;
extern int	mailer_batch_size;
extern int	mailer_max_buffered_rows;
extern int	mailer_restart_backoff_min_ms;
extern int	mailer_restart_backoff_max_ms;
extern int	mailer_state_cache_entries;
extern int	mailer_termination_grace_ms;
extern int	mailer_test_dead_letter_bytes;
extern int	mailer_max_outputs_per_record;

/* True when the library was loaded through shared_preload_libraries. */
extern bool mailer_preloaded;

/* Raise an error telling the user to preload the library, if it is not. */
extern void mailer_require_preload(void);

/*
 * Around a call that starts library threads (rd_kafka_new, rocksdb_open):
 * block every signal so the threads inherit a full mask and no signal meant
 * for the worker lands on them; then restore the worker's mask.
 */
extern void mailer_block_signals(sigset_t *saved);
extern void mailer_restore_signals(sigset_t *saved);

/* Hooks of the SQL API, installed by _PG_init (api.c). */
extern void api_install_hooks(void);

/* A bytea holding a copy of len bytes. */
extern bytea *mailer_bytea(const char *data, int len);

#endif							/* MAILER_H */
