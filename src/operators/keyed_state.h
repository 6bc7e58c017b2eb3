/*
 * keyed_state.h
 *		The keyed stage's state as bytes: its keys, its entries (running
 *		aggregates, windows, sessions), the format version every value
 *		starts with, and the layout each checkpoint records.  Window.c and
 *		keyed_cache.c build on it; it depends on neither.
 *
 * State keys, by their first byte:
 *		'A' <group key>							running aggregates (no window)
 *		'W' <group key> <start>					a tumbling or sliding window
 *		'L' <group key> <pane start>				a pane of a sliding window (window.c)
 *		'S' <group key>							a key's session windows
 *		'F' <end> <group key> <start>			format 1 only: fire a window at end
 *		'P' <end + lateness> <group key> <start>	format 1 only: purge it after its lateness
 * Times are 8 bytes, big-endian with the sign flipped, so byte order is
 * time order.  Format 2 keeps no timer keys (the upgrade from 1 deletes
 * them): the timers follow from the window entries.
 *
 * Values: one byte, the format version (KEYED_STATE_FORMAT), then for
 *		'A': the aggregates
 *		'W', 'L': start, end, fired, unemitted, the aggregates (a pane's
 *			 end is start + slide; its fired and unemitted are not used)
 *		'S': count, then per session: start, end, fired, unemitted,
 *			 emitted_start, the aggregates
 *		'F', 'P' (format 1): nothing more
 * How a reader knows a value has that byte: see keyed_state.c.
 */
#ifndef KEYED_STATE_H
#define KEYED_STATE_H

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/timestamp.h"

#include "operators/aggregate.h"
#include "state/state.h"

struct JobPlan;

/*
 * The format of the state this release writes.  Format 0 is that of
 * release 0.1.0: the values of format 1 without the version byte.  Format
 * 2 has the values of format 1 (a reader takes either byte) and no timer
 * keys: the stage keeps its timers in memory (timer_index.h).
 */
#define KEYED_STATE_FORMAT	2

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

/* What reading and writing entries takes. */
typedef struct KeyedCodec
{
	const char *job_name;		/* for errors */
	int			naggs;
	AggregateDef **aggs;
	MemoryContext ctx;			/* where read values live */
} KeyedCodec;

/* Times in keys, in byte order (8 bytes). */
extern void keyed_key_append_time(StringInfo buf, TimestampTz t);
extern TimestampTz keyed_key_read_time(const char *p);

/* naggs values of no rows, in the codec's context. */
extern AggValue *keyed_values_new(const KeyedCodec *codec);

/*
 * An entry's value; read back into an entry whose key is set (and, for
 * 'A' and 'W', whose values are allocated).  A value of another format
 * version is an ERROR naming the job, the key and the version.
 */
extern void keyed_entry_serialize(const KeyedCodec *codec, KeyedEntry *e, StringInfo buf);
extern void keyed_entry_deserialize(const KeyedCodec *codec, KeyedEntry *e, const char *data,
									int len);

/*
 * What a plan's keyed state bytes mean, stored with every checkpoint
 * (mailer.checkpoints.state_layout): the format version, then per key
 * field and aggregate its type and implementation.  NULL when the plan
 * keeps no keyed state.
 */
extern char *keyed_state_layout(struct JobPlan *plan);

/*
 * Before a restore: ERROR unless the state a checkpoint recorded with the
 * layout stored (NULL: written by 0.1.0) can be read with the plan now.
 * Returns the format its values were written in.
 */
extern int	keyed_check_state_layout(const char *job_name, const char *stored,
									 struct JobPlan *plan);

/* After the restore: bring state of an older format to today's. */
extern void keyed_upgrade_state(StateBackend *state, int format);

/*
 * Hand each key of kinds [from_kind, to_kind) and its value to fn, which
 * may put and delete keys of that range; in chunks, fn's allocations freed
 * after each (keyed_state.c).
 */
typedef void (*KeyedRewriteFn) (StateBackend *state, const char *key, int klen,
								const char *val, int vlen, void *arg);
extern void keyed_state_rewrite_range(StateBackend *state, char from_kind, char to_kind,
									  KeyedRewriteFn fn, void *arg);

/*
 * The key group (base/key_groups.h) of a state key: that of the group key
 * it holds, so a window, its timers and its sessions all move with the
 * group key when a job is rescaled.  -1 for a key that belongs to no group
 * (RocksDB's "\0epoch"), or is too short for its prefix.  It is the
 * key_group_of of StateOpenArgs.
 */
extern int	keyed_state_key_group(const char *state_key, int len, int key_groups);

#endif							/* KEYED_STATE_H */
