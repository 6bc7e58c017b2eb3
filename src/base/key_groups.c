/*
 * key_groups.c
 *		Key groups and their owners (key_groups.h).
 *
 * The hash is PostgreSQL's hash_bytes_extended with seed 0, which does not
 * change between releases; the owner of key group g at parallelism P is
 * g * P / G, so that the ranges are contiguous and differ in size by one
 * at most.
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#include "postgres.h"

#include "common/hashfn.h"

#include "base/key_groups.h"

int
key_group_of(const char *group_key, int len, int key_groups)
{
	uint64		h = hash_bytes_extended((const unsigned char *) group_key, len, 0);

	return (int) (h % (uint64) key_groups);
}

int
key_group_owner(int key_group, int parallelism, int key_groups)
{
	return (int) ((int64) key_group * parallelism / key_groups);
}

/* The smallest g whose owner is subtask: ceil(subtask * G / P). */
static int
first_owned(int subtask, int parallelism, int key_groups)
{
	return (int) (((int64) subtask * key_groups + parallelism - 1) / parallelism);
}

void
key_group_range(int subtask, int parallelism, int key_groups, int *lo, int *hi)
{
	*lo = first_owned(subtask, parallelism, key_groups);
	*hi = first_owned(subtask + 1, parallelism, key_groups);
}
