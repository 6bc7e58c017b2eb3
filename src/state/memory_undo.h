/*
 * memory_undo.h
 *		The memory backend's undo, packed: a checkpoint's undo entries of
 *		one key group go into rows of mailer.memory_undo of about a page
 *		each, two arrays per row (the keys, and their values before the
 *		epoch, NULL where the key was absent).
 *
 * One row per key cost a heap tuple, an index entry and a WAL record per
 * changed key, and as many deletes when the epoch stopped being retained:
 * about a seventh of a keyed tumbling job's CPU on the memory backend.
 * Rows keep their key group, so that each subtask still rewinds, and
 * deletes, exactly the rows of its own key groups.
 *
 * Design: docs/ARCHITECTURE.md, "The memory backend's tables".
 */
#ifndef MEMORY_UNDO_H
#define MEMORY_UNDO_H

/* Writes one packed row: the key group, a bytea[] of keys, a bytea[] of old values. */
typedef void (*UndoRowWriter) (void *arg, int group, Datum keys, Datum olds);

typedef struct UndoPacker UndoPacker;

/* A packer of one epoch's undo; the arrays it hands write live until write returns. */
extern UndoPacker *undo_packer_create(UndoRowWriter write, void *arg);

/*
 * An entry: the key, and its value before the epoch (old NULL: absent).
 * Entries come in key group order: a new group starts a new row.
 */
extern void undo_packer_add(UndoPacker *up, int group, const char *key, int klen,
							const char *old, int oldlen);

/* Writes what is left and frees the packer; returns how many rows it wrote. */
extern int64 undo_packer_finish(UndoPacker *up);

#endif							/* MEMORY_UNDO_H */
