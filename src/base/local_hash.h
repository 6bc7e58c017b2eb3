/*
 * local_hash.h
 *		The hash of a worker's own hash tables whose keys come from the
 *		stream (the keyed cache, the timer index, the sets of changed state
 *		keys, the sink's rows of one key).  It is seeded at random once per
 *		process, so that whoever writes to the source cannot choose keys that
 *		meet in one slot of these tables: with PostgreSQL's unseeded
 *		hash_bytes, keys found offline grow a table tenfold and make every
 *		lookup of them walk the whole cluster (hash flooding).
 *
 * Never use it for a hash that leaves the process or must agree between
 * processes: key groups (base/key_groups.h) hash with seed 0 for that.
 *
 * Design: docs/ARCHITECTURE.md, "Bounded memory".
 */
#ifndef LOCAL_HASH_H
#define LOCAL_HASH_H

#include "common/hashfn.h"

/* 0 until the process's first hash; then its random seed, never 0. */
extern uint64 local_hash_seed;

extern void local_hash_seed_init(void);

static inline uint64
local_hash_seed_get(void)
{
	if (unlikely(local_hash_seed == 0))
		local_hash_seed_init();
	return local_hash_seed;
}

/* A hash of bytes, seeded: 64 bits, and their low 32. */
static inline uint64
local_hash_bytes64(const void *data, int len)
{
	return hash_bytes_extended((const unsigned char *) data, len, local_hash_seed_get());
}

static inline uint32
local_hash_bytes(const void *data, int len)
{
	return (uint32) local_hash_bytes64(data, len);
}

/*
 * A hash of 64 bits (a timestamp, a type's 32-bit hash): the seed, then
 * MurmurHash3's 64-bit finalizer, which maps distinct values to distinct
 * values.  Values that differ anywhere differ in the low bits too, in a way
 * that only the seed tells.
 */
static inline uint32
local_hash_uint64(uint64 v)
{
	v ^= local_hash_seed_get();
	v ^= v >> 33;
	v *= UINT64CONST(0xff51afd7ed558ccd);
	v ^= v >> 33;
	v *= UINT64CONST(0xc4ceb9fe1a85ec53);
	v ^= v >> 33;
	return (uint32) v;
}

/* As datum_image_hash, seeded: for a type whose equality is its image's. */
extern uint32 local_hash_datum_image(Datum value, bool typbyval, int typlen);

#endif							/* LOCAL_HASH_H */
