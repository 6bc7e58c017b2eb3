/*
 * guard.h
 *		Run a step over items 0..n-1 so that one failing item costs only
 *		itself: the items run in a subtransaction; when one raises an
 *		error, the subtransaction is rolled back, the failure is reported
 *		for that item, and the rest run in a new subtransaction.
 *
 * Only errors about the data are isolated this way.  Errors about the
 * server (out of memory, cancel, shutdown, I/O, internal errors) and
 * errors raised by the failure callback propagate.
 */
#ifndef GUARD_H
#define GUARD_H

/*
 * Run fn(arg) in a subtransaction; roll back and return the error when it
 * raises one about the data, NULL when it succeeds.  Runs in ctx.
 */
extern ErrorData *guard_try(void (*fn) (void *arg), void *arg, MemoryContext ctx);

typedef void (*GuardedStep) (void *arg, int i);
typedef void (*GuardedFailure) (void *arg, int i, ErrorData *edata);

/* An error's message, with its detail when it has one: what a dead letter says. */
extern char *error_text(ErrorData *edata);

/* Steps run in ctx; results the step keeps must live elsewhere or in ctx. */
extern void guard_each(int n, GuardedStep step, GuardedFailure failed, void *arg,
					   MemoryContext ctx);

#endif							/* GUARD_H */
