/*
 * keyed_cache.h
 *		The keyed stage's working set: the entries decoded from the state
 *		backend, the undo of the current record, and the rows waiting for
 *		the checkpoint.  What keyed.c and window.c share; keyed_cache.c
 *		calls neither of them.
 */
#ifndef KEYED_CACHE_H
#define KEYED_CACHE_H

#include "connectors/dead_letter.h"
#include "connectors/sink.h"
#include "operators/keyed_state.h"
#include "operators/session_keys.h"
#include "operators/timer_index.h"
#include "plan/plan.h"

/* As keyed.h names it: this header does not include keyed.h, which is keyed.c's. */
typedef struct KeyedStage KeyedStage;

struct KeyedStage
{
	/* Given at creation (KeyedStageArgs) */
	const char *job_name;
	JobPlan    *plan;
	StateBackend *state;
	ExprRuntime *rt;
	ExprRuntime *out_rt;
	SinkBuffer *sink;
	DeadLetterBuffer *dead_letters;
	OnError		on_error;
	bool	   *failing;

	int			naggs;
	AggregateDef **aggs;
	KeyedCodec	codec;			/* values read into cache_context */
	MemoryContext context;		/* the stage's own: scratch arrays */
	MemoryContext work_context; /* one watermark step or checkpoint; keyed.c resets it */
	MemoryContext cache_context;	/* entries; a new one when the cache is rebuilt */
	MemoryContext table_context;	/* the cache's table, kept when the cache is rebuilt */
	struct kcache_hash *cache;
	int			cache_kept;		/* entries the last rebuild kept */
	uint64		table_entries;	/* entries the table held at the last checkpoint (empty_table) */
	/*
	 * Since the last rebuild: entries deleted and sessions dropped whose
	 * values held memory out of line (a general aggregate's state, a
	 * numeric or text datum), and entries a failed record undid.  What they
	 * held goes only with a rebuild.
	 */
	int64		cache_dropped;
	KeyedEntry **dirty;
	int			ndirty;
	int			dirty_capacity;
	MemoryContext out_context;	/* rows waiting for the checkpoint */
	List	   *out_rows;		/* Records of the output schema, in emission order */
	List	   *out_deletes;	/* parallel to out_rows: 1 for a row to delete */
	StringInfoData key;			/* scratch */
	StringInfoData value;		/* scratch */
	Datum	   *args;			/* the current record's aggregate arguments */
	bool	   *argnulls;
	AggValue   *next;			/* scratch: the record's new values, naggs per window */
	KeyedEntry **windows;		/* scratch: the windows the record goes into */
	int			scratch_windows;	/* windows the scratch arrays hold */
	AggValue   *empty;			/* naggs values of no rows */
	/* Between keyed_begin_record and keyed_end_record: how to undo the record. */
	bool		undo_active;
	MemoryContext undo_context;	/* reset at each keyed_begin_record */
	List	   *undo_entries;	/* of KeyedUndo: entries as they were */
	List	   *undo_timers;	/* of TimerMark: timers put, in order */
	int			undo_ndirty;
	int			undo_nout;
	TimestampTz watermark;
	TimerIndex *timers;			/* the windows' timers (timer_index.h) */
	StringInfoData timer_tail;	/* scratch */
	/* Sliding windows kept as panes of slide ('L' entries; window.c) */
	bool		panes;
	int			npanes;			/* panes in a window: size / slide */
	/*
	 * The earliest pane a record changed since the dirty entries were last
	 * written (DT_NOEND: none; keyed_write_dirty resets it, window.c's
	 * pane_add lowers it).  The cache holds an earlier pane as the
	 * backend does, or deleted by a purge no scan reaches, so a scan takes
	 * the backend's (pane_scan_cached).
	 */
	TimestampTz panes_changed_from;
	bool		legacy_windows; /* the state holds per-window entries too */
	MemoryContext changed_context;	/* the windows changed since the checkpoint */
	struct wchanged_hash *changed;
	StateKey   *changed_list;	/* in the order they changed first */
	int			nchanged;
	int			changed_capacity;
	int			undo_nchanged;
	AggValue   *combined;		/* scratch: a window's values from its panes */
	/* Session windows: the keys holding sessions (window.c) */
	SessionKeys *session_keys;
	slist_head	undo_session_keys;	/* the current record's changes to them, latest first */
};

/* An entry as it was before the current record. */
typedef struct KeyedUndo
{
	KeyedEntry *entry;
	KeyedEntry	saved;
	StringInfoData data;		/* the entry's serialized state */
} KeyedUndo;

/* The cache, empty: its table in table_context, its entries in cache_context. */
extern void keyed_cache_create(KeyedStage *stage);

/* stage->key := kind, to append the rest of a state key to. */
extern void keyed_key_begin(KeyedStage *stage, char kind);

/*
 * The cached entry of a state key, read from the backend on a miss; NULL
 * when it exists nowhere and create is false.
 */
extern KeyedEntry *keyed_lookup(KeyedStage *stage, const char *key, int klen, bool create);

/*
 * As keyed_lookup, where the caller knows what the backend holds (read by
 * a scan, or known to be missing: val NULL): no read.
 */
extern KeyedEntry *keyed_lookup_known(KeyedStage *stage, const char *key, int klen, bool create,
									  const char *val, int vlen);

/*
 * The cached entry of a state key, or NULL: nothing read, made or saved
 * for a record's undo, as the caller only reads it.
 */
extern KeyedEntry *keyed_cache_find(KeyedStage *stage, const char *key, int klen);
extern void keyed_mark_dirty(KeyedStage *stage, KeyedEntry *e);

/* A session taken from its entry's list: freed, or counted for a rebuild. */
extern void keyed_drop_session(KeyedStage *stage, Session *s);

/*
 * For keyed.h's hints: a key's hash in the cache; the slot of a hash
 * fetched; then, by that hash, the entry its slot points to.
 */
extern uint32 keyed_cache_hash(const char *key, int klen);
extern void keyed_cache_prefetch_slot(KeyedStage *stage, uint32 hash);
extern void keyed_cache_prefetch_entry(KeyedStage *stage, uint32 hash);

/*
 * The entry the first slot of a hash points to, if cached, or NULL: for
 * hints only, since another key of that hash may hold the slot.
 */
extern KeyedEntry *keyed_cache_peek(KeyedStage *stage, uint32 hash);

/* Scratch arrays for a record that goes into nwindows windows. */
extern void keyed_scratch(KeyedStage *stage, int nwindows);

/*
 * The values that folding the current record's arguments into values give,
 * into next, values left as they are: an ERROR here (an overflow) leaves
 * the state as it was.  keyed_store makes values the next computed (or
 * merged).
 */
extern void keyed_compute(KeyedStage *stage, const AggValue *values, AggValue *next);
extern void keyed_store(KeyedStage *stage, AggValue *values, const AggValue *next);

/* An output row (or, with delete, a row to delete) for the next checkpoint. */
extern void keyed_emit(KeyedStage *stage, const char *group, int group_len,
					   TimestampTz start, TimestampTz end, AggValue *values, bool delete);

/*
 * At a checkpoint, after a row is emitted: the rows emitted so far go into
 * the sink (which copies them) once they fill a slice, or with all, at the
 * end, whatever is left; a row whose projection fails is a dead letter or
 * fails the job.  Then their memory and the work context's are freed:
 * nothing the caller made in the work context may be used after it.  Only
 * at a checkpoint (keyed_prepare_checkpoint), never within a record or a
 * watermark step, whose due timers are in the work context.
 */
extern void keyed_emit_slice(KeyedStage *stage, bool all);

/*
 * Write every dirty entry to the backend; rebuild the cache, with the
 * changed entries worth keeping, when it has grown by more than
 * mailer.state_cache_entries since the last rebuild, when that many
 * entries or sessions holding memory out of line went since (cache_dropped),
 * or past its memory limit (entries and table); its table, emptied,
 * outlives the rebuild.  Make the table smaller when a burst of keys left
 * it less than an eighth full.
 */
extern void keyed_write_dirty(KeyedStage *stage);

#endif							/* KEYED_CACHE_H */
