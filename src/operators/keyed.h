/*
 * keyed.h
 *		The keyed stage: per-key aggregates, with or without event-time
 *		windows, kept in a state backend.
 *
 * Inside: keyed.c (this interface) drives window.c (window assignment,
 * timers, sessions) and keyed_cache.c (the decoded entries, undo, output
 * rows), which build on keyed_state.c (the state's bytes and format).
 */
#ifndef KEYED_H
#define KEYED_H

#include "base/record.h"
#include "connectors/dead_letter.h"
#include "connectors/sink.h"
#include "plan/plan.h"
#include "state/state.h"

typedef struct KeyedStage KeyedStage;

/* What the keyed stage is given of its job; the stage keeps the pointers. */
typedef struct KeyedStageArgs
{
	const char *job_name;		/* for errors */
	JobPlan    *plan;
	StateBackend *state;		/* opened at the restored checkpoint */
	ExprRuntime *rt;			/* evaluates the aggregates' arguments */
	ExprRuntime *out_rt;		/* evaluates over the output's fields (the sink's casts) */
	SinkBuffer *sink;			/* receives the output rows at each checkpoint */
	DeadLetterBuffer *dead_letters;
	OnError		on_error;
	bool	   *failing;		/* set when on_error "fail" fails the job */
	TimestampTz watermark;		/* restored with the checkpoint */
	MemoryContext context;		/* lives as long as the stage */
} KeyedStageArgs;

extern KeyedStage *keyed_create(const KeyedStageArgs *args);

/*
 * The aggregates' arguments for one record, into args and nulls (one entry
 * per aggregate): evaluated for every record a flat_map made before any is
 * folded in, so that one that fails leaves the state as it was.
 */
extern void keyed_eval_args(KeyedStage *stage, Record *rec, Datum *args, bool *nulls);

/*
 * Fold one record into its key's (and windows') aggregates, in two halves:
 * the record's group key (what a parallel job routes by, docs/ARCHITECTURE.md,
 * "Parallel jobs"), and the addition of its arguments under that key.
 * false: the record is late (every window it belongs to is past its
 * allowed lateness).
 */
extern void keyed_group_key(KeyedStage *stage, Record *rec, StringInfo out);
extern bool keyed_add_group(KeyedStage *stage, const char *group, int group_len,
							TimestampTz event_time, const Datum *args, const bool *nulls);

/*
 * Hints, for a caller that knows the next records' group keys before it
 * adds them: keyed_slot_hash is the cache hash of the first entry
 * keyed_add_group will look up for (group, event_time); keyed_prefetch has
 * the CPU fetch one link of the chain that lookup reads, link 0 that
 * hash's cache slot, 1 the entry it points to, and for session windows
 * the entry's sessions (window_prefetch_sessions): each once the link
 * before it has come in, so a caller asks for them in order, a few records
 * apart: links 0 to keyed_prefetch_links() - 1, at most
 * KEYED_PREFETCH_LINKS.  None changes anything or fails.
 */
#define KEYED_PREFETCH_LINKS 5
extern uint32 keyed_slot_hash(KeyedStage *stage, const char *group, int group_len,
							  TimestampTz event_time);
extern int	keyed_prefetch_links(KeyedStage *stage);
extern void keyed_prefetch(KeyedStage *stage, uint32 hash, int link);

/* The aggregates' argument types, to carry arguments between subtasks. */
extern int	keyed_naggs(KeyedStage *stage);
extern void keyed_arg_type(KeyedStage *stage, int a, int16 *typlen, bool *typbyval);

/*
 * A record a flat_map made into several outputs is folded in whole or not
 * at all: keyed_add_group's between keyed_begin_record and keyed_end_record
 * are undone by keyed_abort_record (after an error; a no-op outside a record).
 * A record of one output needs none of it: keyed_add_group itself changes
 * nothing when it fails.
 */
extern void keyed_begin_record(KeyedStage *stage);
extern void keyed_end_record(KeyedStage *stage);
extern void keyed_abort_record(KeyedStage *stage);

/* The watermark moved: fire the windows it passed, purge the expired. */
extern void keyed_advance_watermark(KeyedStage *stage, TimestampTz watermark);

/*
 * Before a checkpoint: hand the rows due to the sink (changed keys, fired
 * windows) and write changed state to the backend.
 */
extern void keyed_prepare_checkpoint(KeyedStage *stage);

/* Entries changed since the last checkpoint (to bound memory). */
extern int64 keyed_pending(KeyedStage *stage);

#endif							/* KEYED_H */
