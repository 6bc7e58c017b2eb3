/*
 * signals.h
 *		Signal masks around calls that start library threads.
 *
 * Design: docs/ARCHITECTURE.md, "Threads and signals".
 */
#ifndef MAILER_SIGNALS_H
#define MAILER_SIGNALS_H

#include <signal.h>

/*
 * Around a call that starts library threads (rd_kafka_new, rocksdb_open):
 * block every signal so the threads inherit a full mask and no signal meant
 * for the worker lands on them; then restore the worker's mask.
 */
extern void mailer_block_signals(sigset_t *saved);
extern void mailer_restore_signals(sigset_t *saved);

#endif							/* MAILER_SIGNALS_H */
