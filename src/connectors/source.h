/*
 * source.h
 *		The source interface: where a job's records come from (Kafka, Pulsar,
 *		or the built-in generator), and where it resumes after a checkpoint.
 *
 * A source hands out raw messages in batches, without blocking, and keeps
 * the position just past the last message it handed out.  Since the worker
 * finishes a batch before it checkpoints, that position is what each
 * checkpoint stores.
 */
#ifndef SOURCE_H
#define SOURCE_H

#include "storage/latch.h"
#include "utils/jsonb.h"

#include "connectors/barrier_cuts.h"
#include "jobs/job_slots.h"
#include "plan/spec.h"

typedef struct SourceMessage
{
	const char *key;			/* NULL: no key */
	int			key_len;
	const char *value;			/* NULL: an empty (tombstone) message */
	int			value_len;
	int			topic;			/* index into the source's topic names */
	int32		partition;
	int64		offset;
	TimestampTz timestamp;
	void	   *opaque;			/* the source's own handle on the message */
	const char *unreadable;		/* non-NULL: the source could not read the message, and why
								 * (naming where it is); the record fails at decode */
} SourceMessage;

typedef struct Source Source;

/* How far a source is on its way to a barrier cut (hold_at_cut). */
typedef enum CutHold
{
	CUT_HOLD_WAITING,			/* some named partition is still below its marker */
	CUT_HOLD_REACHED,			/* every named partition is at its marker, and held */
	CUT_HOLD_READ_PAST,			/* read past a marker, but the last checkpoint is not: rewind */
	CUT_HOLD_BEHIND				/* the last checkpoint is past a marker: skip the cut */
} CutHold;

/*
 * A source's operations.  None closes the source: one that holds outside
 * resources releases them itself at process exit (the Kafka consumer, from
 * a before_shmem_exit callback), since a worker ends only by exiting.
 */
typedef struct SourceOps
{
	/* Up to max messages, without waiting; valid until the next poll. */
	int			(*poll) (Source *src, SourceMessage *out, int max);

	/* The message's headers as a jsonb object, or NULL. */
	Jsonb	   *(*headers) (Source *src, SourceMessage *msg);

	/* Milliseconds until poll may return more (-1: wait for the fd or latch). */
	long		(*wait_ms) (Source *src);

	/* A socket or event fd that becomes readable when messages arrive. */
	pgsocket	(*event_fd) (Source *src);

	/* Where to resume: every owned partition's next position. */
	Jsonb	   *(*positions) (Source *src);

	/*
	 * Records read per owned partition, {"topic": {"partition": n}}, kept
	 * with positions() so that partition metrics go on after a restart
	 * (NULL op: the counts start at 0 in each run).
	 */
	Jsonb	   *(*records_in) (Source *src);

	/* A checkpoint holding positions() committed (publish progress). */
	void		(*committed) (Source *src);

	/* A bounded source that has handed out everything. */
	bool		(*finished) (Source *src);

	/* The owned partitions known now: how many, and each one's topic and number. */
	int			(*partition_count) (Source *src);
	void		(*partition_at) (Source *src, int i, int *topic, int32 *partition);

	/* Note the input available now (wait_job); reached() once positions pass it. */
	void		(*mark_end) (Source *src);
	bool		(*reached_end) (Source *src);

	/* Whether partition i has records left to read (NULL: never). */
	bool		(*backlog) (Source *src, int i);

	/*
	 * Watermark alignment: stop fetching partition i, whose watermark runs
	 * ahead of the partitions still catching up, or fetch it again (NULL:
	 * the source reads its partitions as they come).  Records fetched
	 * already may still be handed out; none is lost or handed out twice.
	 */
	void		(*set_ahead) (Source *src, int i, bool ahead);

	/*
	 * Barrier cuts, for a Kafka source with a barrier group (NULL ops for
	 * the others; docs/ARCHITECTURE.md, "Barrier cuts").  next_cut: the
	 * lowest complete cut above an epoch read so far, or NULL (and no
	 * record is handed out until the cuts published before the source
	 * opened are read).  hold_at_cut: hold the partitions the cut names at
	 * their markers (no record at or past one is handed out), and say how
	 * far they are; at CUT_HOLD_REACHED the positions are the markers.
	 * release_cut: read on past them.  cut_counts: partial cuts, malformed
	 * records and cuts that came too late, seen since the source opened.
	 * cut_of: the complete cut of an epoch once the barrier topic's
	 * partition is read past offset (where subtask 0 read it), or NULL,
	 * and whether a later record withdrew it (a parallel job's subtask
	 * asked to align on the cut subtask 0 read).
	 */
	const BarrierCut *(*next_cut) (Source *src, int64 above);
	const BarrierCut *(*cut_of) (Source *src, int64 epoch, int32 partition, int64 offset, int64 decided,
								 bool *withdrawn);
	CutHold		(*hold_at_cut) (Source *src, const BarrierCut *cut);
	void		(*release_cut) (Source *src);
	void		(*cut_counts) (Source *src, uint64 *partial, uint64 *malformed, uint64 *late);
} SourceOps;

struct Source
{
	const SourceOps *ops;
	int			ntopics;
	char	  **topic_names;
	JobSlot    *slot;			/* where partition metrics go */
	const char *error;			/* set while the source waits on a fault */
	bool		unpinned;		/* positions taken per the spec, in no checkpoint yet */
};

/*
 * Whether subtask k of a job of the given parallelism owns partition p of
 * the t-th topic: the one rule every partitioned source splits by.
 */
static inline bool
source_owns(int topic, int32 partition, int subtask, int parallelism)
{
	return ((int64) partition + topic) % parallelism == subtask;
}

/*
 * positions: from the last checkpoint, or NULL to start per the spec; the
 * merge of every subtask's positions, of which a source keeps only those
 * of the partitions it owns.  Subtask k of a job of the given parallelism
 * owns the partitions p of the t-th topic with (p + t) % parallelism == k
 * (the generator has one topic), and reports only those: in positions(),
 * the partition list, metrics and wait_job's marks.  records_in: the merge
 * of every subtask's records_in() of the same checkpoint, or NULL.
 */
extern Source *generator_source_open(GeneratorSpec *spec, Jsonb *positions, JobSlot *slot,
									 int subtask, int parallelism);
extern Source *pulsar_source_open(PulsarSourceSpec *spec, Jsonb *positions, Jsonb *records_in,
								  JobSlot *slot, int subtask, int parallelism);
extern Source *kafka_source_open(KafkaSourceSpec *spec, const char *job_name, Jsonb *positions,
								 Jsonb *records_in, JobSlot *slot, int subtask, int parallelism);

#endif							/* SOURCE_H */
