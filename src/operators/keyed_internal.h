/*
 * keyed_internal.h
 *		What keyed.c (keys, cache, aggregates, checkpoints) and window.c
 *		(window assignment, timers, sessions) share.  Not for other parts.
 *
 * State keys, by their first byte:
 *		'A' <group key>							running aggregates (no window)
 *		'W' <group key> <start>					a tumbling or sliding window
 *		'S' <group key>							a key's session windows
 *		'F' <end> <group key> <start>			fire a window when the watermark reaches end
 *		'P' <end + lateness> <group key> <start>	purge it after its allowed lateness
 * Times are 8 bytes, big-endian with the sign flipped, so byte order is
 * time order and a timer range is one scan.
 */
#ifndef KEYED_INTERNAL_H
#define KEYED_INTERNAL_H

#include "operators/keyed.h"

/* One session window of a key. */
typedef struct Session
{
	TimestampTz start;
	TimestampTz end;			/* last event + gap */
	bool		fired;
	bool		unemitted;		/* changed since its row was last emitted */
	TimestampTz emitted_start;	/* start its row was emitted under, DT_NOBEGIN none */
	AggValue   *values;
} Session;

/* A cached state entry: running aggregates, a window, or a key's sessions. */
typedef struct KeyedEntry
{
	StateKey	key;			/* owned copy */
	int			group_offset;	/* where the group key starts in key */
	int			group_len;
	AggValue   *values;			/* 'A' and 'W' */
	TimestampTz start;			/* 'W' */
	TimestampTz end;
	bool		fired;			/* 'W' */
	bool		unemitted;		/* 'A', 'W': changed since last emitted */
	List	   *sessions;		/* 'S': of Session */
	bool		stored;			/* the backend has a version of it */
	bool		dirty;			/* to write at the next checkpoint */
	bool		deleted;		/* to delete at the next checkpoint */
	bool		undo_saved;		/* saved for keyed_abort_record */
} KeyedEntry;

struct KeyedStage
{
	Job		   *job;
	JobPlan    *plan;
	StateBackend *state;
	int			naggs;
	AggregateDef **aggs;
	MemoryContext cache_context;	/* entries; reset when the cache is dropped */
	struct kcache_hash *cache;
	KeyedEntry **dirty;
	int			ndirty;
	int			dirty_capacity;
	MemoryContext out_context;	/* rows waiting for the checkpoint */
	List	   *out_rows;		/* Records of the output schema, in emission order */
	List	   *out_deletes;	/* parallel to out_rows: 1 for a row to delete */
	StringInfoData group;		/* scratch: the current record's group key */
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
	List	   *undo_timers;	/* of KeyedUndo: timers put or deleted, in order */
	int			undo_ndirty;
	int			undo_nout;
	TimestampTz watermark;
};

/* keyed.c */
extern void keyed_undo_timer(KeyedStage *ks, const char *key, int klen, bool put);
extern void keyed_key_begin(KeyedStage *ks, char kind);
extern void keyed_key_append_time(StringInfo buf, TimestampTz t);
extern TimestampTz keyed_key_read_time(const char *p);
extern KeyedEntry *keyed_lookup(KeyedStage *ks, const char *key, int klen, bool create);
extern void keyed_mark_dirty(KeyedStage *ks, KeyedEntry *e);
extern void keyed_scratch(KeyedStage *ks, int nwindows);
extern void keyed_compute(KeyedStage *ks, const AggValue *values, AggValue *next);
extern void keyed_store(KeyedStage *ks, AggValue *values, const AggValue *next);
extern AggValue *keyed_new_values(KeyedStage *ks);
extern void keyed_emit(KeyedStage *ks, const char *group, int group_len,
					   TimestampTz start, TimestampTz end, AggValue *values, bool delete);

/* window.c */
extern bool window_add(KeyedStage *ks, Record *rec, const char *group, int group_len);
/* The watermark moved from previous to watermark: fire and purge what it passed. */
extern void window_fire(KeyedStage *ks, TimestampTz previous, TimestampTz watermark);
extern void window_emit_changed(KeyedStage *ks, KeyedEntry *e);
extern void window_serialize(KeyedStage *ks, KeyedEntry *e, StringInfo buf);
extern void window_deserialize(KeyedStage *ks, KeyedEntry *e, const char *data, int len);

#endif							/* KEYED_INTERNAL_H */
