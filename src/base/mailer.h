/*
 * mailer.h
 *		Settings and small definitions shared by every part of mailer.
 */
#ifndef MAILER_H
#define MAILER_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* The extension's name: also its library's, its shared memory's and its settings' prefix. */
#define MAILER_EXTENSION "mailer"

/* The schema of mailer's tables and functions (mailer.control fixes it). */
#define MAILER_SCHEMA "mailer"

/* Microseconds from the Unix epoch to PostgreSQL's (2000-01-01). */
#define UNIX_OFFSET_US ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

/* The most subtasks a job may have (mailer.max_parallelism_per_job's maximum). */
#define MAILER_MAX_PARALLELISM 64

/* GUCs, defined in mailer.c */
extern char *mailer_database;
extern int	mailer_max_jobs;
extern int	mailer_batch_size;
extern int	mailer_max_buffered_rows;
extern int	mailer_restart_backoff_min_ms;
extern int	mailer_restart_backoff_max_ms;
extern int	mailer_state_cache_entries;
extern int	mailer_memory_fold_checkpoints;
extern int	mailer_termination_grace_ms;
extern int	mailer_test_dead_letter_bytes;
extern int	mailer_max_outputs_per_record;
extern int	mailer_aggregate_state_limit_kb;
extern int	mailer_max_parallelism_per_job;
extern int	mailer_http_port;
extern char *mailer_http_address;
extern char *mailer_http_token;

#endif							/* MAILER_H */
