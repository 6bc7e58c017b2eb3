/*
 * state_key_table.h
 *		A simplehash table keyed by StateKey, for the files that keep sets
 *		of state keys (the keyed cache, the memory backend's changed keys).
 *
 * Include it, without an include guard, after defining SH_PREFIX and
 * SH_ELEMENT_TYPE: an element type with the members StateKey key, uint32
 * hash and char status.  It defines static inline functions.
 */
#include "state/state.h"

#define SH_KEY_TYPE StateKey
#define SH_KEY key
#define SH_HASH_KEY(tb, k) state_key_hash(k)
#define SH_EQUAL(tb, a, b) state_key_equal(a, b)
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) a->hash
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"
