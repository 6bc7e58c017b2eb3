/*
 * timer_index.h
 *		The keyed stage's window timers, in memory: per kind ('F' fire,
 *		'P' purge) the timers by granule of due time, each named by its due
 *		time and its "tail" (the group key and the window start, as in a
 *		state key).  window.c rebuilds them from the window entries on
 *		restore; the state backend holds none.
 */
#ifndef TIMER_INDEX_H
#define TIMER_INDEX_H

#include "nodes/pg_list.h"
#include "utils/timestamp.h"

typedef struct TimerIndex TimerIndex;

/* A due timer, as timer_index_due lists it. */
typedef struct DueTimer
{
	TimestampTz when;
	const char *tail;
	int			len;
} DueTimer;

/* Where timer_index_truncate takes the bucket of a timer added back to. */
typedef struct TimerMark
{
	char		kind;
	TimestampTz when;
	int			used;
} TimerMark;

extern TimerIndex *timer_index_create(MemoryContext context);

/* Add a timer, unless held already; *mark (when not NULL) is what undoes it. */
extern void timer_index_add(TimerIndex *ti, char kind, TimestampTz when, const char *tail,
							int len, TimerMark *mark);

/* Whether the index holds this timer (one due and listed is not held). */
extern bool timer_index_holds(TimerIndex *ti, char kind, TimestampTz when, const char *tail,
							  int len);

/* Undo additions, the latest first. */
extern void timer_index_truncate(TimerIndex *ti, const TimerMark *mark);

/*
 * The timers of a kind due at watermark, removed from the index, as a List
 * of DueTimer in the current memory context: in order of time, then of
 * tail bytes (that of the state keys timers had).
 */
extern List *timer_index_due(TimerIndex *ti, char kind, TimestampTz watermark);

/* Timers held (stale ones included), for tests and metrics. */
extern int64 timer_index_count(TimerIndex *ti);

#endif							/* TIMER_INDEX_H */
