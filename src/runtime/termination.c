/*
 * termination.c
 *		Stop requests and the SIGTERM grace of a job worker (termination.h).
 *
 * A SIGTERM sets ShutdownRequestPending: the worker sees it between
 * batches and stops with a final checkpoint.  Work in progress (a batch, a
 * checkpoint: a work transaction) has mailer.termination_grace to end
 * first, counted by a timer that ticks while the transaction is open; past
 * that, or at a second SIGTERM, the work is ended as die() ends a backend's
 * statement, at its next CHECK_FOR_INTERRUPTS.
 */
#include "postgres.h"

#include <time.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/timeout.h"

#include "base/mailer.h"
#include "base/work_xact.h"
#include "runtime/termination.h"

/* How often the grace timer ticks. */
#define TERM_TICK_MS		500

/*
 * The postmaster signals a child twice, its pid and its process group
 * (signal_child), so one fast shutdown can run the handler twice: a repeat
 * this soon after the first SIGTERM is the same request, not a second one.
 */
#define SIGTERM_REPEAT_MS	1000

static volatile sig_atomic_t term_ticks = 0;
static int64 first_sigterm_ms = 0;

static void handle_sigterm(SIGNAL_ARGS);
static void term_tick(void);
static void end_work_now(void);

void
termination_install_handler(void)
{
	pqsignal(SIGTERM, handle_sigterm);
}

void
termination_start_timer(void)
{
	work_xact_set_timer(RegisterTimeout(USER_TIMEOUT, term_tick), TERM_TICK_MS);
}

bool
termination_signalled(void)
{
	return ShutdownRequestPending;
}

void
termination_restart_grace(void)
{
	term_ticks = 0;
}

void
job_pause_briefly(void)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1000,
					 PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * PostgreSQL's shutdown request, and one thing more: a second SIGTERM, a
 * second or more after the first, does not wait for the work to end.
 */
static void
handle_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;
	struct timespec now;
	int64		now_ms;

	/* clock_gettime is async-signal-safe. */
	clock_gettime(CLOCK_MONOTONIC, &now);
	now_ms = (int64) now.tv_sec * 1000 + now.tv_nsec / 1000000;
	if (!ShutdownRequestPending)
		first_sigterm_ms = now_ms;
	else if (now_ms - first_sigterm_ms >= SIGTERM_REPEAT_MS)
		end_work_now();
	errno = save_errno;
	SignalHandlerForShutdownRequest(postgres_signal_arg);
}

/*
 * Ticks while a work transaction is open: once a SIGTERM has waited
 * mailer.termination_grace for the work to end, end it.  (Signal context.)
 */
static void
term_tick(void)
{
	if (ShutdownRequestPending &&
		++term_ticks >= Max(mailer_termination_grace_ms / TERM_TICK_MS, 1))
		end_work_now();
}

/*
 * As die() does: the next CHECK_FOR_INTERRUPTS, in a lock wait, a sleep or
 * the executor, ends the worker with FATAL; the transaction rolls back.
 */
static void
end_work_now(void)
{
	ProcDiePending = true;
	InterruptPending = true;
	SetLatch(MyLatch);
}
