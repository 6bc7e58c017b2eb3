/*
 * window.h
 *		Event-time windows of the keyed stage, for keyed.c: window
 *		assignment, timers, firing, sessions.  Built on keyed_cache.h.
 */
#ifndef WINDOW_H
#define WINDOW_H

#include "operators/keyed_cache.h"

/* Fold the current record (stage->args) into its windows; false: it is late. */
extern bool window_add(KeyedStage *stage, TimestampTz t, const char *group, int group_len);

/*
 * stage->key := the state key window_add looks up first for (t, group): a
 * hint's (keyed_slot_hash), so it fails on nothing; a t out of range gives
 * some key.
 */
extern void window_first_key(KeyedStage *stage, TimestampTz t, const char *group, int group_len);

/*
 * A hint (keyed.h's): the CPU fetches link 0, 1 or 2 of a sessions entry
 * window_add is about to read (its list, its first sessions, their
 * values), each once the one before has come in.  e may be NULL or
 * another key's entry: nothing is changed, nothing fails.
 */
#define WINDOW_SESSION_LINKS 3
extern void window_prefetch_sessions(KeyedStage *stage, KeyedEntry *e, int link);

/*
 * The watermark moved to watermark: fire and purge what it passed.  Allocates in the current memory context, which the caller resets.
 */
extern void window_fire(KeyedStage *stage, TimestampTz watermark);

/*
 * When the stage starts: how it keeps its windows, and the timers of the
 * windows in its restored state.
 */
extern void window_setup(KeyedStage *stage);

/* A checkpoint is due: emit the rows of the windows kept as panes that changed. */
extern void window_emit_panes(KeyedStage *stage);

/* Around a record: what window_undo takes back if it fails. */
extern void window_undo_mark(KeyedStage *stage);
extern void window_undo(KeyedStage *stage);

/* A checkpoint is due: emit the rows of the entry's windows that changed. */
extern void window_emit_changed(KeyedStage *stage, KeyedEntry *e);

#endif							/* WINDOW_H */
