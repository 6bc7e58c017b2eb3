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

#include "guard.h"

static bool
is_data_error(ErrorData *edata)
{
	switch (ERRCODE_TO_CATEGORY(edata->sqlerrcode))
	{
		case ERRCODE_INSUFFICIENT_RESOURCES:
		case ERRCODE_OPERATOR_INTERVENTION:
		case ERRCODE_SYSTEM_ERROR:
		case ERRCODE_INTERNAL_ERROR:
		case ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE:
			return false;
		default:
			return true;
	}
}

char *
error_text(ErrorData *edata)
{
	if (edata->detail == NULL)
		return edata->message;
	return psprintf("%s: %s", edata->message, edata->detail);
}

void
guard_each(int n, GuardedStep step, GuardedFailure failed, void *arg, MemoryContext ctx)
{
	ResourceOwner owner = CurrentResourceOwner;
	MemoryContext old = MemoryContextSwitchTo(ctx);
	int			next = 0;

	while (next < n)
	{
		ErrorData  *edata = NULL;

		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(ctx);
		PG_TRY();
		{
			for (; next < n; next++)
				step(arg, next);
			ReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(ctx);
			CurrentResourceOwner = owner;
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(ctx);
			edata = CopyErrorData();
			FlushErrorState();
			RollbackAndReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(ctx);
			CurrentResourceOwner = owner;
		}
		PG_END_TRY();

		if (edata)
		{
			if (!is_data_error(edata))
				ReThrowError(edata);
			failed(arg, next, edata);
			next++;
		}
	}
	MemoryContextSwitchTo(old);
}
