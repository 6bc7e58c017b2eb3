/*
 * session_keys.c
 *		The keys of a session-window stage that hold sessions
 *		(session_keys.h).
 *
 * A key's sessions are one state entry ('S' <group key>), deleted when its
 * last session is purged.  With a gap short against a key's pace most of
 * its records find its sessions purged since its last one; a record whose
 * key the keyed cache had let go read the backend in vain (with more keys
 * than the cache holds, nearly every record: a sixth of a RocksDB session
 * job's CPU at 1M keys, BENCHMARKS.md, "Sessions: keys known to hold
 * none").  So the stage counts, per hash of the group key, the keys whose
 * entry holds a session: +1 when a key's first session is made, -1 when
 * its last is purged, rebuilt from the entries when the stage starts, as
 * the timers are.
 *
 * A count of 0 must mean no key: a key counted too few times would have
 * its sessions taken for none, and lost.  So a change made by a record
 * that then fails is undone with it (window.c, window_undo), and counts
 * are by hash, not by key, only to stay small: 16 bytes a slot, 18 to 36
 * bytes a key holding a session with simplehash's fill factor and
 * doubling (bounded by the live sessions, as the timers are, and made
 * smaller after a burst of keys: session_keys_trim).  A -1 with no count
 * to take it from is a bug: it raises an error, and the worker, restarted
 * from its last checkpoint, counts anew.  The hash is seeded per
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
	MemoryContext context;
	skeys_hash *counts;
	uint64		first_size;		/* slots of the table made first */
};

/* Hashes the table is made for first: simplehash gives it 2048 slots. */
#define SESSION_KEYS_FIRST 1024

SessionKeys *
session_keys_create(MemoryContext context)
{
	SessionKeys *keys = MemoryContextAlloc(context, sizeof(SessionKeys));

	keys->context = context;
	keys->counts = skeys_create(context, SESSION_KEYS_FIRST, NULL);
	keys->first_size = keys->counts->size;
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

/*
 * simplehash never shrinks: after a burst of keys the table would keep its
 * peak size (16 bytes a slot, a slot per key over the fill factor, rounded
 * up to a power of two) for the worker's life.  So when it is larger than
 * the first one and less than an eighth full it is made anew, for twice
 * its members or SESSION_KEYS_FIRST, whichever is more.  The new table is
 * built whole before the old one goes: an error on the way leaves the
 * counts as they were.
 */
void
session_keys_trim(SessionKeys *keys)
{
	skeys_hash *old = keys->counts;
	skeys_hash *counts;
	skeys_iterator it;
	SessionCount *c;

	/* Past the first size, under an eighth full: the new one is at most half the size. */
	if (old->size <= keys->first_size || old->members >= old->size / 8)
		return;
	counts = skeys_create(keys->context, Max(SESSION_KEYS_FIRST, old->members * 2), NULL);
	skeys_start_iterate(old, &it);
	while ((c = skeys_iterate(old, &it)) != NULL)
	{
		bool		found;

		skeys_insert(counts, c->hash, &found)->count = c->count;
	}
	keys->counts = counts;
	skeys_destroy(old);
}
