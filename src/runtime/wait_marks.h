/*
 * wait_marks.h
 *		The worker's side of wait_job: a ticket marks the end of the input
 *		there is now, and is answered once everything up to that end is
 *		committed.
 */
#ifndef WAIT_MARKS_H
#define WAIT_MARKS_H

#include "runtime/job.h"

/* Take up a new wait_job ticket: mark the end of the input there is now. */
extern void wait_marks_take(Job *job);

/* Answer the tickets taken, if everything up to the marked end is committed. */
extern void wait_marks_answer(Job *job);

#endif							/* WAIT_MARKS_H */
