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
#include "runtime/accounting.h"
#include "runtime/cut_align.h"

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

typedef struct CutAlign
{
	BarrierCut	cut;			/* the cut held at, copied; epoch 0: none */
	bool		reached;		/* every named partition is at its marker */
	TimestampTz held_since;		/* when the job learned of the cut */
	DecidedCut *decided;
	int			ndecided;
	int			capacity;
} CutAlign;

static void take_cut(Job *job, CutAlign *align, const BarrierCut *cut);
static void decide(Job *job, CutAlign *align, bool checkpointed);
static void drop_cut(Job *job, CutAlign *align);

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
}

CutRound
cut_align_round(Job *job)
{
	CutAlign   *align = job->cut_align;
	Source	   *src = job->source;
	uint64		partial,
				malformed;

	if (align == NULL)
		return CUT_ROUND_GO_ON;
	for (;;)
	{
		if (align->cut.epoch == 0)
		{
			const BarrierCut *next = src->ops->next_cut(src, job->counters[JC_CUT_DECIDED_EPOCH]);

			if (next == NULL)
				break;
			take_cut(job, align, next);
		}
		switch (src->ops->hold_at_cut(src, &align->cut))
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
						(errmsg("job \"%s\" skips barrier cut " INT64_FORMAT " of group \"%s\": its last checkpoint is past the cut's markers",
								job->name, align->cut.epoch, job->spec->source.kafka.barrier_group)));
				job->counters[JC_CUTS_SKIPPED]++;
				decide(job, align, false);
				drop_cut(job, align);
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
	src->ops->cut_counts(src, &partial, &malformed);
	job->counters[JC_CUTS_PARTIAL] = partial;
	job->counters[JC_CUT_RECORDS_MALFORMED] = malformed;
	job->counters[JC_CUT_HOLDING_EPOCH] = align->cut.epoch;
	job_publish_counters(job);
	return CUT_ROUND_GO_ON;
}

bool
cut_align_interval_applies(Job *job)
{
	return job->cut_align == NULL || job->spec->checkpoint_between_cuts;
}

int64
cut_align_checkpoint_cut(Job *job)
{
	CutAlign   *align = job->cut_align;

	return align && align->reached ? align->cut.epoch : 0;
}

void
cut_align_record(Job *job, int64 epoch)
{
	CutAlign   *align = job->cut_align;
	Oid			types[6] = {INT8OID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT8OID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	if (align == NULL)
		return;
	if (align->reached)
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
}

void
cut_align_committed(Job *job)
{
	CutAlign   *align = job->cut_align;

	if (align == NULL)
		return;
	align->ndecided = 0;
	SpinLockAcquire(&job->slot->mutex);
	job->slot->cut_rewinds_unsaved = 0;
	SpinLockRelease(&job->slot->mutex);
	if (align->reached)
		drop_cut(job, align);
}

/* Hold at cut from now on; its markers are copied (the reader may forget it). */
static void
take_cut(Job *job, CutAlign *align, const BarrierCut *cut)
{
	align->cut = *cut;
	align->cut.markers = MemoryContextAlloc(job->job_context, sizeof(CutMarker) * Max(cut->nmarkers, 1));
	memcpy(align->cut.markers, cut->markers, sizeof(CutMarker) * cut->nmarkers);
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
