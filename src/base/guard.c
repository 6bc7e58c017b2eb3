/*
 * guard.c
 *		Failure isolation per item, one subtransaction per run (guard.h).
 *
 * A subtransaction is the only safe way to go on after an error in SQL
 * code (a cast, a user's function): it releases what the failed code held.
 * One per batch, plus one per failure, costs little.
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "base/guard.h"

/* Errors about the server: no subtransaction may hide them. */
static bool
is_server_error(ErrorData *edata)
{
	switch (ERRCODE_TO_CATEGORY(edata->sqlerrcode))
	{
		case ERRCODE_INSUFFICIENT_RESOURCES:
		case ERRCODE_OPERATOR_INTERVENTION:
		case ERRCODE_SYSTEM_ERROR:
		case ERRCODE_INTERNAL_ERROR:
		case ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE:
			return true;
		default:
			return false;
	}
}

/*
 * Errors a record's own values cause: the same record fails again however
 * often it is retried, and other records do not.  Everything else (a
 * privilege, a missing object, a deadlock, a lost connection) is about the
 * environment and must fail the batch, to be retried once it is fixed.
 */
bool
guard_is_data_error(ErrorData *edata)
{
	switch (ERRCODE_TO_CATEGORY(edata->sqlerrcode))
	{
		case ERRCODE_DATA_EXCEPTION:
		case ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION:
		case ERRCODE_CARDINALITY_VIOLATION:
		case ERRCODE_PROGRAM_LIMIT_EXCEEDED:
			return true;
		default:
			/* A user's function refusing the record: RAISE EXCEPTION, ASSERT */
			return edata->sqlerrcode == ERRCODE_RAISE_EXCEPTION ||
				edata->sqlerrcode == ERRCODE_ASSERT_FAILURE;
	}
}

char *
guard_error_text(ErrorData *edata)
{
	if (edata->detail == NULL)
		return edata->message;
	return psprintf("%s: %s", edata->message, edata->detail);
}

ErrorData *
guard_try(void (*fn) (void *arg), void *arg, MemoryContext ctx)
{
	ErrorData  *edata = guard_catch(fn, arg, ctx);

	if (edata && is_server_error(edata))
		ReThrowError(edata);
	return edata;
}

ErrorData *
guard_catch(void (*fn) (void *arg), void *arg, MemoryContext ctx)
{
	ResourceOwner owner = CurrentResourceOwner;
	MemoryContext old = MemoryContextSwitchTo(ctx);
	ErrorData  *edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(ctx);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(ctx);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);
	CurrentResourceOwner = owner;
	return edata;
}

/* guard_each's items from 'next' on, in one go. */
typedef struct EachRun
{
	int			n;
	int			next;
	GuardedStep step;
	void	   *arg;
} EachRun;

static void
run_from_next(void *p)
{
	EachRun    *run = (EachRun *) p;

	for (; run->next < run->n; run->next++)
		run->step(run->arg, run->next);
}

void
guard_each(int n, GuardedStep step, GuardedFailure failed, void *arg, MemoryContext ctx)
{
	EachRun		run = {n, 0, step, arg};

	while (run.next < n)
	{
		ErrorData  *edata = guard_try(run_from_next, &run, ctx);

		if (edata)
		{
			MemoryContext old;

			if (!guard_is_data_error(edata))
				ReThrowError(edata);
			old = MemoryContextSwitchTo(ctx);

			failed(arg, run.next, edata);
			MemoryContextSwitchTo(old);
			run.next++;
		}
	}
}
