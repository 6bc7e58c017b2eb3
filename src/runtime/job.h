/*
 * job.h
 *		A running job inside its worker: the compiled plan and the parts it
 *		drives (source, pipeline, keyed stage, sink, dead letters), with
 *		the counters and the epoch of the last committed checkpoint.
 */
#ifndef JOB_H
#define JOB_H

#include "connectors/dead_letter.h"
#include "jobs/job_slots.h"
#include "plan/plan.h"
#include "runtime/produce_latency.h"
#include "connectors/sink.h"
#include "connectors/source.h"
#include "state/state.h"

typedef struct KeyedStage KeyedStage;

typedef struct Job
{
	int64		job_id;
	char	   *name;
	Oid			owner;
	Oid			ext_oid;		/* the installation of mailer the job belongs to */
	JobSlot    *slot;
	JobSpec    *spec;

	/* Parallel jobs (docs/ARCHITECTURE.md, "Parallel jobs"). */
	int			subtask;		/* 0 .. parallelism-1; 0 coordinates */
	int			parallelism;
	int			key_groups;
	int			kg_lo;			/* the key groups this subtask owns: [kg_lo, kg_hi) */
	int			kg_hi;
	JobSlot    *coordinator;	/* subtask 0's slot (slot itself for subtask 0) */
	pid_t		coordinator_pid;	/* subtask 0's process, as the subtask started */
	uint32		generation;		/* the launcher's start of the run: subtask 0's slot's */
	struct Shuffle *shuffle;	/* NULL at parallelism 1 */
	bool		all_finished;	/* subtask 0: every subtask's bounded source is read */
	JobPlan    *plan;

	ExprRuntime *rt;			/* evaluates over the record's fields */
	ExprRuntime *out_rt;		/* evaluates over the output's fields */
	Source	   *source;
	StateBackend *state;		/* NULL unless keyed */
	KeyedStage *keyed;			/* NULL unless aggregated */
	struct WatermarkTracker *watermarks;
	SinkBuffer *sink;
	DeadLetterBuffer *dead_letters;

	MemoryContext job_context;	/* lives as long as the worker */
	MemoryContext batch_context;	/* reset after every batch */
	MemoryContext record_context;	/* reset before every chunk of messages (pipeline.c) */

	int64		epoch;			/* last committed checkpoint, 0 before any */
	TimestampTz last_checkpoint;
	int64		uncommitted;	/* records read since the last checkpoint */
	ProduceLatency produce_latency; /* Kafka timestamps of the uncommitted batches */
	uint64		counters[JC_NUM_COUNTERS];

	/* wait_job: the newest request the worker has taken up */
	uint64		wait_pending;
	uint64		wait_reached;	/* the newest request its committed input covers */

	const char *stage;			/* the step now running, for dead letters */
	bool		failing;		/* on_error "fail" raised: do not restart */
	bool		publish_pending;	/* a committed epoch's output is not handed on yet */
	TimestampTz publish_retry_at;	/* after a failed publish: not before then */
	int			publish_failures;	/* publishes failed in a row, for the backoff */
	Datum	   *topic_datums;	/* the source's topic names as text */

	struct CutAlign *cut_align; /* barrier cuts (runtime/cut_align), or NULL */

	/* input_rate: records_in at the last sample, and when */
	uint64		rate_records;
	TimestampTz rate_at;
} Job;

#endif							/* JOB_H */
