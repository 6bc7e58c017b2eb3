/*
 * signals.c
 *		Signal masks around calls that start library threads (signals.h).
 */
#include "postgres.h"

#include <pthread.h>

#include "base/signals.h"

void
mailer_block_signals(sigset_t *saved)
{
	sigset_t	all;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, saved);
}

void
mailer_restore_signals(sigset_t *saved)
{
	pthread_sigmask(SIG_SETMASK, saved, NULL);
}
