/*
 * test_point.h
 *		Named points in mailer's protocols where a test can hold a process.
 *
 * Races (two workers of one job, a stop during a start) and crashes at a
 * given step are tested deterministically: the test names a point in the
 * superuser-only setting mailer.test_pause_at and reloads the
 * configuration; a process reaching that point logs "mailer test point
 * <name> reached" and waits there, answering interrupts, until the point is
 * removed from the setting.  The test waits for the log line, then acts
 * (kills the process, races another call) and releases it.  With the
 * setting empty, as in production, a point costs one comparison.
 */
#ifndef TEST_POINT_H
#define TEST_POINT_H

#include "postmaster/interrupt.h"

extern char *mailer_test_pause_at;

extern void test_point_wait(const char *name);

/*
 * Hold here while a test names this point in mailer.test_pause_at.  A
 * reload the process has not taken yet is taken first: a point set while
 * the worker was busy (a recovery's first publish) must not pass unseen.
 */
#define TEST_POINT(name) \
	do { \
		if ((mailer_test_pause_at != NULL && mailer_test_pause_at[0] != '\0') || \
			ConfigReloadPending) \
			test_point_wait(name); \
	} while (0)

#endif							/* TEST_POINT_H */
