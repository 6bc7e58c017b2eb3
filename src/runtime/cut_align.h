/*
 * cut_align.h
 *		Checkpoints at barrier cuts: each round of a job whose source has a
 *		barrier group picks the next cut, holds the source at its markers,
 *		and says when the checkpoint at the cut is due.
 *
 * Design: docs/ARCHITECTURE.md, "Barrier cuts".
 */
#ifndef CUT_ALIGN_H
#define CUT_ALIGN_H

#include "runtime/job.h"

typedef enum CutRound
{
	CUT_ROUND_GO_ON,			/* read and go on */
	CUT_ROUND_WAIT,				/* read nothing now (a parallel job's subtask waits on subtask 0) */
	CUT_ROUND_REWIND			/* read past a cut's marker: the worker restarts from its checkpoint */
} CutRound;

/* Whether the job checkpoints at barrier cuts. */
extern bool cut_align_enabled(Job *job);

/* At the worker's start: count the rewind that restarted it, if one did. */
extern void cut_align_start(Job *job);

/* A round's work on cuts, before and after the batch is read. */
extern CutRound cut_align_round(Job *job);

/* Whether interval checkpoints apply: not between cuts unless the spec asks. */
extern bool cut_align_interval_applies(Job *job);

/*
 * Whether a stop takes a last checkpoint: not between cuts, unless the
 * spec asks for checkpoints there (a stop there would pass the markers of
 * a cut not learned of yet).
 */
extern bool cut_align_stop_checkpoints(Job *job);

/* Every named partition is at its cut's marker: the checkpoint at the cut is due (subtask 0 asks for it). */
extern bool cut_align_due(Job *job);

/* Subtask 0, before it raises the barrier of epoch: whether that epoch is at the cut. */
extern void cut_align_mark_epoch(Job *job, int64 epoch);

/*
 * Inside the checkpoint's transaction, before its row: the cut it is at
 * (0: none), counted, and the cuts decided since the last one written into
 * mailer.job_cuts.
 */
extern int64 cut_align_record(Job *job, int64 epoch);

/* The checkpoint committed: read on past the cut's markers. */
extern void cut_align_committed(Job *job);

#endif							/* CUT_ALIGN_H */
