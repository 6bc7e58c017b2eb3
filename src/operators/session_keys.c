/*
 * session_keys.c
 *		The keys of a session-window stage that hold sessions
 *		(session_keys.h).
 *
 * A key's sessions are one state entry ('S' <group key>), deleted when its
 * last session is purged.  With a short gap most of a key's records find
 * its sessions purged since its last one; once the keyed cache was let go
 * at a checkpoint, each such record read the backend in vain, about half
 * of a session job's reads (BENCHMARKS.md, "Sessions: keys known to hold
 * none").  So the stage counts, per hash of the group key, the keys whose
 * entry holds a session: +1 when a key's first session is made, -1 when
 * its last is purged, rebuilt from the entries when the stage starts, as
 * the timers are.
 *
 * A count of 0 must mean no key: a key counted too few times would have
 * its sessions taken for none, and lost.  So a change made by a record
 * that then fails is undone with it (window.c, window_undo), and counts
 * are by hash, not by key, only to stay small: 16 bytes a slot, about
 * 24 with simplehash's doubling, for each key holding a session (bounded
 * by the live sessions, as the timers are).  The hash is seeded per
 * process (base/local_hash.h): whoever writes to the source cannot make
 * keys share a count, which would only cost reads.
 *
 * Design: docs/ARCHITECTURE.md, "Windows and timers".
 */
#include "postgres.h"

#include "base/local_hash.h"
#include "operators/session_keys.h"

typedef struct SessionCount
{
	uint64		hash;
	int32		count;
	char		status;
} SessionCount;

/* The keys are seeded hashes already: their low bits serve as simplehash's. */
#define SH_PREFIX skeys
#define SH_ELEMENT_TYPE SessionCount
#define SH_KEY_TYPE uint64
#define SH_KEY hash
#define SH_HASH_KEY(tb, key) ((uint32) (key))
#define SH_EQUAL(tb, a, b) ((a) == (b))
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

struct SessionKeys
{
	skeys_hash *counts;
};

SessionKeys *
session_keys_create(MemoryContext context)
{
	SessionKeys *keys = MemoryContextAlloc(context, sizeof(SessionKeys));

	keys->counts = skeys_create(context, 1024, NULL);
	return keys;
}

uint64
session_keys_hash(const char *group, int group_len)
{
	return local_hash_bytes64(group, group_len);
}

void
session_keys_change(SessionKeys *keys, uint64 hash, int delta)
{
	SessionCount *c;
	bool		found;

	if (delta > 0)
	{
		c = skeys_insert(keys->counts, hash, &found);
		c->count = found ? c->count + delta : delta;
		return;
	}
	c = skeys_lookup(keys->counts, hash);
	/* Every -1 follows its key's +1: a count that would go below 0 is a bug. */
	if (c == NULL || c->count + delta < 0)
		elog(ERROR, "session key count of hash " UINT64_FORMAT " would go below 0", hash);
	c->count += delta;
	if (c->count == 0)
		skeys_delete_item(keys->counts, c);
}

bool
session_keys_may_hold(SessionKeys *keys, uint64 hash)
{
	return skeys_lookup(keys->counts, hash) != NULL;
}

int64
session_keys_count(SessionKeys *keys)
{
	return keys->counts->members;
}
