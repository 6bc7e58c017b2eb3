/*
 * key_groups.h
 *		Keyed state is split into a fixed number of key groups, fixed when a
 *		job is created; each subtask of a parallel job owns a contiguous range
 *		of them.  Rescaling moves whole key groups, so a key's owner follows
 *		from its bytes and the parallelism alone.
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#ifndef KEY_GROUPS_H
#define KEY_GROUPS_H

#define KEY_GROUPS_DEFAULT	128
#define KEY_GROUPS_MAX		32768

/* The key group of a group key's bytes: 0 .. key_groups-1, the same on every run. */
extern int	key_group_of(const char *group_key, int len, int key_groups);

/* The subtask that owns a key group at a parallelism. */
extern int	key_group_owner(int key_group, int parallelism, int key_groups);

/* The key groups subtask owns: [*lo, *hi). */
extern void key_group_range(int subtask, int parallelism, int key_groups, int *lo, int *hi);

#endif							/* KEY_GROUPS_H */
