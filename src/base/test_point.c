/*
 * test_point.c
 *		Points where a test holds a process (test_point.h).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/varlena.h"

#include "base/test_point.h"

char	   *mailer_test_pause_at = NULL;

static bool
point_named(const char *name)
{
	char	   *list;
	List	   *names;
	ListCell   *lc;
	bool		found = false;

	if (mailer_test_pause_at == NULL || mailer_test_pause_at[0] == '\0')
		return false;
	list = pstrdup(mailer_test_pause_at);
	if (!SplitIdentifierString(list, ',', &names))
		return false;
	foreach(lc, names)
		found |= strcmp((char *) lfirst(lc), name) == 0;
	list_free(names);
	pfree(list);
	return found;
}

void
test_point_wait(const char *name)
{
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	if (!point_named(name))
		return;
	ereport(LOG,
			(errmsg("mailer test point %s reached", name),
			 errhidestmt(true)));
	while (point_named(name))
	{
		CHECK_FOR_INTERRUPTS();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}
	ereport(LOG,
			(errmsg("mailer test point %s released", name),
			 errhidestmt(true)));
}
