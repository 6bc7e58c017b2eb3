/*
 * counter_marks.h
 *		What /metrics last said of each job's counters, so that it never says
 *		less (counter_marks.c).
 */
#ifndef COUNTER_MARKS_H
#define COUNTER_MARKS_H

/* Counters of one job that are kept: at most this many per job. */
#define COUNTER_MARKS_PER_JOB 32

/*
 * Start a scrape of the installation ext_oid (InvalidOid: none): marks of
 * jobs this scrape does not name are forgotten at its end, and all of them
 * when the installation is another (job ids start again at 1).
 */
extern void counter_marks_begin(Oid ext_oid);

/* The job's counter number i: the greater of value and what was said before. */
extern int64 counter_marks_apply(int64 job_id, int i, int64 value);

/* End a scrape: forget the jobs it did not name (dropped). */
extern void counter_marks_end(void);

#endif							/* COUNTER_MARKS_H */
