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
	CUT_ROUND_GO_ON,			/* no cut reached: read and go on */
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

/* The cut the checkpoint being taken is at (every named partition at its marker), or 0. */
extern int64 cut_align_checkpoint_cut(Job *job);

/*
 * Inside the checkpoint's transaction, before its row: count the cut it is
 * at and write the cuts decided since the last one into mailer.job_cuts.
 */
extern void cut_align_record(Job *job, int64 epoch);

/* The checkpoint committed: read on past the cut's markers. */
extern void cut_align_committed(Job *job);

#endif							/* CUT_ALIGN_H */
