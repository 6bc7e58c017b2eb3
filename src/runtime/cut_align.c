/*
 * cut_align.c
 *		Checkpoints at barrier cuts (cut_align.h).
 *
 * A job whose Kafka source names a barrier group takes the lowest complete
 * cut above the last one it decided on, and holds the partitions the cut
 * names at their markers.  Once all are there, its next checkpoint is at
 * the cut: the positions are the markers, and the row carries the cut's
 * epoch.  A cut whose markers the last checkpoint is already past is
 * skipped.  A cut learned of after the job read past a marker (the cut's
 * record comes after the markers, and a caught-up job reads on meanwhile)
 * but not its last checkpoint is taken by going back to that checkpoint:
 * the worker exits, the launcher starts it again at once, and it holds at
 * the markers before it reads anything.
 *
 * In a parallel job subtask 0 decides for all.  It picks the cut and says
 * so in its slot; every subtask holds its own partitions at that cut's
 * markers and says in its own slot how far it is.  Subtask 0 judges the
 * cut on all of them as one job would: skipped if any subtask is past it
 * (or its reader saw the cut withdrawn), a rewind of the whole job if any
 * read past it, and once all are there, the next epoch it raises is at the
 * cut.  Subtasks let go of a cut once subtask 0 says it is decided, after
 * the epoch at it committed.
 *
 * Design: docs/ARCHITECTURE.md, "Barrier cuts".
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/mailer.h"
#include "base/test_point.h"
#include "jobs/catalog.h"
#include "jobs/job_slots.h"
#include "runtime/accounting.h"
#include "runtime/cut_align.h"
#include "runtime/subtasks.h"

/* mailer.job_cuts keeps the decisions on this many cuts more than checkpoint.retain_cuts. */
#define CUTS_LISTED_BEYOND_RETAINED 1000

/* A cut decided since the last checkpoint, for mailer.job_cuts. */
typedef struct DecidedCut
{
	int64		epoch;
	TimestampTz triggered_at;
	TimestampTz completed_at;
	bool		checkpointed;	/* false: skipped */
} DecidedCut;

/* A subtask's judgement in its slot: a CutHold, or this. */
#define CUT_JUDGED_WITHDRAWN	(-1)	/* its reader saw the cut withdrawn or replaced */

typedef struct CutAlign
{
	BarrierCut	cut;			/* the cut held at, copied; epoch 0: none */
	uint64		digest;			/* barrier_cut_digest of its markers */
	bool		reached;		/* every named partition (of every subtask) is at its marker */
	TimestampTz held_since;		/* when the job learned of the cut */
	int64		recorded;		/* the cut of the checkpoint being taken, 0 none */
	DecidedCut *decided;
	int			ndecided;
	int			capacity;
	uint64		late_counted;	/* of the source's late cuts, those in cuts_skipped */
} CutAlign;

static void take_cut(Job *job, CutAlign *align, const BarrierCut *cut);
static void decide(Job *job, CutAlign *align, bool checkpointed);
static void drop_cut(Job *job, CutAlign *align);
static bool is_other_subtask(Job *job);
static CutRound other_subtask_round(Job *job, CutAlign *align);
static CutHold judge_all(Job *job, CutAlign *align, CutHold own, const char **why);
static void publish_decision(Job *job, CutAlign *align);
static void publish_judgement(Job *job, int64 epoch, uint64 digest, int judgement);

bool
cut_align_enabled(Job *job)
{
	return job->spec->source.type == SOURCE_KAFKA && job->spec->source.kafka.barrier_group != NULL;
}

void
cut_align_start(Job *job)
{
	uint32		rewinds;

	if (!cut_align_enabled(job))
		return;
	job->cut_align = MemoryContextAllocZero(job->job_context, sizeof(CutAlign));
	/* The rewind that restarted the worker, counted once its checkpoint commits. */
	SpinLockAcquire(&job->slot->mutex);
	rewinds = job->slot->cut_rewinds_unsaved;
	SpinLockRelease(&job->slot->mutex);
	job->counters[JC_CUT_REWINDS] += rewinds;
	/* The subtasks read nothing until they know the last cut decided on. */
	if (job->parallelism > 1 && job->subtask == 0)
		publish_decision(job, job->cut_align);
}

CutRound
cut_align_round(Job *job)
{
	CutAlign   *align = job->cut_align;
	Source	   *src = job->source;
	uint64		partial,
				malformed,
				late;
	bool		read_past = false;

	if (align == NULL)
		return CUT_ROUND_GO_ON;
	if (is_other_subtask(job))
		return other_subtask_round(job, align);
	for (;;)
	{
		CutHold		hold;
		const char *why = "its last checkpoint is past the cut's markers";

		read_past = false;
		if (align->cut.epoch == 0)
		{
			const BarrierCut *next = src->ops->next_cut(src, job->counters[JC_CUT_DECIDED_EPOCH]);

			if (next == NULL)
				break;
			take_cut(job, align, next);
			if (job->parallelism > 1)
				publish_decision(job, align);
		}
		hold = src->ops->hold_at_cut(src, &align->cut);
		/* Past a marker: read no further while the other subtasks judge the cut. */
		read_past = hold == CUT_HOLD_READ_PAST;
		if (job->parallelism > 1)
			hold = judge_all(job, align, hold, &why);
		switch (hold)
		{
			case CUT_HOLD_WAITING:
				align->reached = false;
				break;
			case CUT_HOLD_REACHED:
				if (!align->reached)
					TEST_POINT("cut_reached");
				align->reached = true;
				break;
			case CUT_HOLD_BEHIND:
				ereport(LOG,
						(errmsg("job \"%s\" skips barrier cut " INT64_FORMAT " of group \"%s\": %s",
								job->name, align->cut.epoch, job->spec->source.kafka.barrier_group, why)));
				job->counters[JC_CUTS_SKIPPED]++;
				decide(job, align, false);
				drop_cut(job, align);
				if (job->parallelism > 1)
					publish_decision(job, align);
				continue;
			case CUT_HOLD_READ_PAST:
				ereport(LOG,
						(errmsg("job \"%s\" read past the markers of barrier cut " INT64_FORMAT " before it learned of the cut: it goes back to checkpoint " INT64_FORMAT " to take it",
								job->name, align->cut.epoch, job->epoch)));
				TEST_POINT("cut_rewind");
				SpinLockAcquire(&job->slot->mutex);
				job->slot->cut_rewinds_unsaved++;
				SpinLockRelease(&job->slot->mutex);
				return CUT_ROUND_REWIND;
		}
		break;
	}
	src->ops->cut_counts(src, &partial, &malformed, &late);
	/* A cut that came after a later one was decided on is skipped too. */
	job->counters[JC_CUTS_SKIPPED] += late - align->late_counted;
	align->late_counted = late;
	job->counters[JC_CUTS_PARTIAL] = partial;
	job->counters[JC_CUT_RECORDS_MALFORMED] = malformed;
	job->counters[JC_CUT_HOLDING_EPOCH] = align->cut.epoch;
	job_publish_counters(job);
	return read_past ? CUT_ROUND_WAIT : CUT_ROUND_GO_ON;
}

bool
cut_align_interval_applies(Job *job)
{
	return job->cut_align == NULL || job->spec->checkpoint_between_cuts;
}

bool
cut_align_stop_checkpoints(Job *job)
{
	return cut_align_interval_applies(job) || cut_align_due(job);
}

bool
cut_align_due(Job *job)
{
	CutAlign   *align = job->cut_align;

	return align && align->reached && !is_other_subtask(job);
}

void
cut_align_mark_epoch(Job *job, int64 epoch)
{
	CutAlign   *align = job->cut_align;

	if (align == NULL)
		return;
	SpinLockAcquire(&job->slot->mutex);
	job->slot->cuts.barrier_epoch = epoch;
	job->slot->cuts.barrier_cut = align->reached ? align->cut.epoch : 0;
	SpinLockRelease(&job->slot->mutex);
}

/*
 * The cut the checkpoint of the job's next epoch is at, or 0; *as_read:
 * false when this subtask holds at other markers of it than subtask 0.
 */
static int64
checkpoint_cut(Job *job, bool *as_read)
{
	CutAlign   *align = job->cut_align;
	SlotCuts	coordinator;

	*as_read = true;
	if (job->parallelism == 1)
		return align->reached ? align->cut.epoch : 0;
	/* Subtask 0 said so when it raised the epoch. */
	SpinLockAcquire(&job->coordinator->mutex);
	coordinator = job->coordinator->cuts;
	SpinLockRelease(&job->coordinator->mutex);
	*as_read = align->digest == coordinator.target_digest;
	return coordinator.barrier_epoch == job->epoch + 1 ? coordinator.barrier_cut : 0;
}

int64
cut_align_record(Job *job, int64 epoch)
{
	CutAlign   *align = job->cut_align;
	Oid			types[6] = {INT8OID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT8OID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	int64		at;
	bool		as_read;

	if (align == NULL)
		return 0;
	at = checkpoint_cut(job, &as_read);
	/* Every subtask holds at the cut it reached until the epoch at it commits. */
	if (at != 0 && (align->cut.epoch != at || !as_read || !align->reached))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("subtask %d is not at the markers of barrier cut " INT64_FORMAT ", which its epoch " INT64_FORMAT " is to be at",
						job->subtask, at, epoch),
				 errhint("A partition's position moved past its marker (retention deleted records not read yet); the job restarts from its last checkpoint and judges the cut again.")));
	/* Subtask 0 counts and lists the cuts for the job. */
	if (is_other_subtask(job))
		return at;
	align->recorded = at;
	if (at != 0)
	{
		job->counters[JC_LAST_CUT_EPOCH] = align->cut.epoch;
		job->counters[JC_CUT_HELD_MS] += TimestampDifferenceMilliseconds(align->held_since,
																		 GetCurrentTimestamp());
		decide(job, align, true);
	}
	values[0] = Int64GetDatum(job->job_id);
	values[5] = Int64GetDatum(epoch);
	for (int i = 0; i < align->ndecided; i++)
	{
		DecidedCut *d = &align->decided[i];

		values[1] = Int64GetDatum(d->epoch);
		values[2] = TimestampTzGetDatum(d->triggered_at);
		nulls[2] = TIMESTAMP_NOT_FINITE(d->triggered_at) ? 'n' : ' ';
		values[3] = TimestampTzGetDatum(d->completed_at);
		nulls[3] = TIMESTAMP_NOT_FINITE(d->completed_at) ? 'n' : ' ';
		values[4] = CStringGetTextDatum(d->checkpointed ? "checkpoint" : "skipped");
		/* A rewound run decides a cut again: the newest decision stands. */
		catalog_exec("INSERT INTO " MAILER_SCHEMA ".job_cuts (job_id, cut_epoch, triggered_at, completed_at, "
					 "outcome, epoch) VALUES ($1, $2, $3, $4, $5, $6) "
					 "ON CONFLICT (job_id, cut_epoch) DO UPDATE SET outcome = excluded.outcome, "
					 "epoch = excluded.epoch",
					 6, types, values, nulls, false);
	}
	/* mailer.cuts lists the newest decisions, a few more than the cuts retained. */
	if (align->ndecided > 0)
	{
		values[1] = Int64GetDatum(job->spec->checkpoint_retain_cuts + CUTS_LISTED_BEYOND_RETAINED);
		catalog_exec("DELETE FROM " MAILER_SCHEMA ".job_cuts WHERE job_id OPERATOR(pg_catalog.=) $1 "
					 "AND cut_epoch OPERATOR(pg_catalog.<=) (SELECT k.cut_epoch FROM " MAILER_SCHEMA ".job_cuts k "
					 "WHERE k.job_id OPERATOR(pg_catalog.=) $1 ORDER BY k.cut_epoch DESC OFFSET $2 LIMIT 1)",
					 2, types, values, nulls, false);
	}
	return at;
}

void
cut_align_committed(Job *job)
{
	CutAlign   *align = job->cut_align;

	if (align == NULL || is_other_subtask(job))
		return;
	align->ndecided = 0;
	SpinLockAcquire(&job->slot->mutex);
	job->slot->cut_rewinds_unsaved = 0;
	SpinLockRelease(&job->slot->mutex);
	if (align->recorded != 0 && align->recorded == align->cut.epoch)
		drop_cut(job, align);
	align->recorded = 0;
	if (job->parallelism > 1)
		publish_decision(job, align);
}

/* Hold at cut from now on; its markers are copied (the reader may forget it). */
static void
take_cut(Job *job, CutAlign *align, const BarrierCut *cut)
{
	align->cut = *cut;
	align->cut.markers = MemoryContextAlloc(job->job_context, sizeof(CutMarker) * Max(cut->nmarkers, 1));
	memcpy(align->cut.markers, cut->markers, sizeof(CutMarker) * cut->nmarkers);
	align->digest = barrier_cut_digest(cut);
	align->reached = false;
	align->held_since = GetCurrentTimestamp();
}

/* Note the cut's outcome for the next checkpoint, which no longer looks at it. */
static void
decide(Job *job, CutAlign *align, bool checkpointed)
{
	DecidedCut *d;

	if (align->ndecided == align->capacity)
	{
		align->capacity = Max(8, align->capacity * 2);
		align->decided = align->decided ?
			repalloc(align->decided, sizeof(DecidedCut) * align->capacity) :
			MemoryContextAlloc(job->job_context, sizeof(DecidedCut) * align->capacity);
	}
	d = &align->decided[align->ndecided++];
	d->epoch = align->cut.epoch;
	d->triggered_at = align->cut.triggered_at;
	d->completed_at = align->cut.completed_at;
	d->checkpointed = checkpointed;
	job->counters[JC_CUT_DECIDED_EPOCH] = align->cut.epoch;
}

/* Read on past the cut's markers, and look for the next cut. */
static void
drop_cut(Job *job, CutAlign *align)
{
	job->source->ops->release_cut(job->source);
	pfree(align->cut.markers);
	memset(&align->cut, 0, sizeof(align->cut));
	align->reached = false;
	job->counters[JC_CUT_HOLDING_EPOCH] = 0;
}

/* A parallel job's subtask 1..P-1: it follows subtask 0's decisions. */
static bool
is_other_subtask(Job *job)
{
	return job->parallelism > 1 && job->subtask > 0;
}

/*
 * Subtask 1..P-1's round: hold at the cut subtask 0 aligns on (before it
 * says, at the lowest this subtask's reader knows, which is usually the
 * same), say how far this subtask is there, and let go once subtask 0 has
 * decided on it.  Nothing is read before subtask 0 has said which cut it
 * decided on last, nor while this subtask's reader has yet to see the cut
 * subtask 0 aligns on.
 */
static CutRound
other_subtask_round(Job *job, CutAlign *align)
{
	Source	   *src = job->source;
	SlotCuts	coordinator;
	bool		named;
	CutHold		hold;

	SpinLockAcquire(&job->coordinator->mutex);
	coordinator = job->coordinator->cuts;
	SpinLockRelease(&job->coordinator->mutex);
	if (!coordinator.known)
		return CUT_ROUND_WAIT;
	named = coordinator.target > coordinator.decided;
	if (align->cut.epoch != 0 &&
		(align->cut.epoch <= coordinator.decided ||
		 (named && (align->cut.epoch != coordinator.target || align->digest != coordinator.target_digest))))
		drop_cut(job, align);
	if (align->cut.epoch == 0)
	{
		const BarrierCut *cut;
		bool		withdrawn = false;

		if (named)
		{
			/*
			 * The cut as this subtask's reader has it once it has read as
			 * far as the record subtask 0 read.  A later record of the
			 * epoch that withdrew it, or moved its markers, makes it a cut
			 * all skip.
			 */
			cut = src->ops->cut_of(src, coordinator.target, coordinator.target_partition,
								   coordinator.target_offset, coordinator.decided, &withdrawn);
			if (cut && barrier_cut_digest(cut) != coordinator.target_digest)
			{
				cut = NULL;
				withdrawn = true;
			}
			if (cut == NULL)
			{
				if (withdrawn)
					publish_judgement(job, coordinator.target, coordinator.target_digest, CUT_JUDGED_WITHDRAWN);
				return withdrawn ? CUT_ROUND_GO_ON : CUT_ROUND_WAIT;
			}
		}
		else
			cut = src->ops->next_cut(src, coordinator.decided);
		if (cut == NULL)
			return CUT_ROUND_GO_ON;
		take_cut(job, align, cut);
	}
	hold = src->ops->hold_at_cut(src, &align->cut);
	align->reached = hold == CUT_HOLD_REACHED;
	publish_judgement(job, align->cut.epoch, align->digest, (int) hold);
	/* Past a marker: read no further until subtask 0 decides. */
	return hold == CUT_HOLD_READ_PAST ? CUT_ROUND_WAIT : CUT_ROUND_GO_ON;
}

/* Subtask 1..P-1: how far it is on the way to the cut (epoch, markers), for subtask 0. */
static void
publish_judgement(Job *job, int64 epoch, uint64 digest, int judgement)
{
	SlotCuts   *mine = &job->slot->cuts;
	bool		changed;

	SpinLockAcquire(&job->slot->mutex);
	changed = mine->judged != epoch || mine->judged_digest != digest || mine->judgement != judgement;
	mine->judged = epoch;
	mine->judged_digest = digest;
	mine->judgement = judgement;
	SpinLockRelease(&job->slot->mutex);
	if (changed)
		job_slot_wake(job->coordinator);
}

/*
 * Subtask 0: the cut judged on every subtask, as a job of one worker
 * judges it on its partitions.  Skipped if any subtask is past it or saw
 * it withdrawn; else waiting while any has yet to say; else a rewind if
 * any read past it; else reached once all are there.
 */
static CutHold
judge_all(Job *job, CutAlign *align, CutHold own, const char **why)
{
	bool		pending = false;
	bool		read_past = own == CUT_HOLD_READ_PAST;
	bool		waiting = own == CUT_HOLD_WAITING;

	if (own == CUT_HOLD_BEHIND)
		return own;
	for (int k = 1; k < job->parallelism; k++)
	{
		JobSlot    *slot = job_slots_subtask(job->slot, k);
		SlotCuts	word = {0};

		if (slot)
		{
			SpinLockAcquire(&slot->mutex);
			word = slot->cuts;
			SpinLockRelease(&slot->mutex);
		}
		/* Said of this cut as subtask 0 read it, not of an earlier pick or other markers. */
		if (word.judged != align->cut.epoch || word.judged_digest != align->digest)
		{
			pending = true;
			continue;
		}
		if (word.judgement == CUT_JUDGED_WITHDRAWN)
		{
			*why = "a subtask's reader saw the cut withdrawn or replaced by a later record";
			return CUT_HOLD_BEHIND;
		}
		if (word.judgement == CUT_HOLD_BEHIND)
		{
			*why = "a subtask's last checkpoint is past the cut's markers";
			return CUT_HOLD_BEHIND;
		}
		read_past |= word.judgement == CUT_HOLD_READ_PAST;
		waiting |= word.judgement == CUT_HOLD_WAITING;
	}
	if (pending)
		return CUT_HOLD_WAITING;
	if (read_past)
		return CUT_HOLD_READ_PAST;
	return waiting ? CUT_HOLD_WAITING : CUT_HOLD_REACHED;
}

/* Subtask 0: the last cut decided on and the one aligned on, to every subtask. */
static void
publish_decision(Job *job, CutAlign *align)
{
	SpinLockAcquire(&job->slot->mutex);
	job->slot->cuts.known = true;
	job->slot->cuts.decided = job->counters[JC_CUT_DECIDED_EPOCH];
	job->slot->cuts.target = align->cut.epoch;
	job->slot->cuts.target_digest = align->digest;
	job->slot->cuts.target_partition = align->cut.record_partition;
	job->slot->cuts.target_offset = align->cut.record_offset;
	SpinLockRelease(&job->slot->mutex);
	subtasks_wake_all(job);
}
