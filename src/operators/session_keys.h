/*
 * session_keys.h
 *		Which keys of a session-window stage hold sessions, as counts by a
 *		seeded 64-bit hash of the group key.  A key whose hash counts 0
 *		holds none, and its entry is not looked for in the state backend
 *		(window.c, session_add).  A count above 0 may also be another key's
 *		(two group keys with one hash): that key is then read, as before.
 */
#ifndef SESSION_KEYS_H
#define SESSION_KEYS_H

#include "lib/ilist.h"

typedef struct SessionKeys SessionKeys;

/* A change a record made, for its undo (window.c). */
typedef struct SessionKeyChange
{
	slist_node	node;
	uint64		hash;
	int			delta;
} SessionKeyChange;

extern SessionKeys *session_keys_create(MemoryContext context);

/* The hash a key is counted under. */
extern uint64 session_keys_hash(const char *group, int group_len);

/* A key's entry went from no session to some (+1), or back (-1). */
extern void session_keys_change(SessionKeys *keys, uint64 hash, int delta);

/* False: no key of this hash holds a session. */
extern bool session_keys_may_hold(SessionKeys *keys, uint64 hash);

/* Smaller, when a burst of keys is over (outside any record's changes). */
extern void session_keys_trim(SessionKeys *keys);

#endif							/* SESSION_KEYS_H */
