/*
 * guard.h
 *		Run a step over items 0..n-1 so that one failing item costs only
 *		itself: the items run in a subtransaction; when one raises an
 *		error, the subtransaction is rolled back, the failure is reported
 *		for that item, and the rest run in a new subtransaction.
 *
 * Only errors caused by an item's data are isolated this way (see
 * guard_is_data_error).  Errors about the environment (a privilege, a
 * missing object, a deadlock) or the server (out of memory, cancel,
 * shutdown, I/O, internal errors) and errors raised by the failure callback
 * propagate: they fail the whole run.
 */
#ifndef GUARD_H
#define GUARD_H

/*
 * Run fn(arg) in a subtransaction; roll back and return the error when it
 * raises one, NULL when it succeeds; errors about the server propagate.
 * The caller decides about the others.  Runs in ctx.
 */
extern ErrorData *guard_try(void (*fn) (void *arg), void *arg, MemoryContext ctx);

/* As guard_try, but every error is returned, the server's too. */
extern ErrorData *guard_catch(void (*fn) (void *arg), void *arg, MemoryContext ctx);

/* A class 22, 23, 21 or 54 error, or one a user's function raised (P0001, P0004). */
extern bool guard_is_data_error(ErrorData *edata);

typedef void (*GuardedStep) (void *arg, int i);
typedef void (*GuardedFailure) (void *arg, int i, ErrorData *edata);

/* An error's message, with its detail when it has one: what a dead letter says. */
extern char *guard_error_text(ErrorData *edata);

/* Steps run in ctx; results the step keeps must live elsewhere or in ctx. */
extern void guard_each(int n, GuardedStep step, GuardedFailure failed, void *arg,
					   MemoryContext ctx);

#endif							/* GUARD_H */
