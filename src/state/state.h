/*
 * state.h
 *		The keyed-state backend interface: get, put, delete, iterate a key
 *		range, checkpoint, restore.  The keyed operators use only this; the
 *		job's spec picks the backend (RocksDB or memory).
 *
 * Writes between checkpoints need not be durable: recovery always restores
 * the state of the last committed checkpoint.  A backend stores bytes; what
 * they mean, and their format version, is the keyed stage's
 * (operators/keyed_state.h).  A job's state lives as long as its worker:
 * the process exit closes it.
 *
 * Design: docs/ARCHITECTURE.md, "State layout".
 */
#ifndef STATE_H
#define STATE_H

#include "base/local_hash.h"
#include "lib/stringinfo.h"

typedef struct StateBackend StateBackend;

/* A key as bytes, compared with memcmp; used as a hash key too. */
typedef struct StateKey
{
	const char *data;
	int			len;
} StateKey;

/* For the process's own tables: seeded (base/local_hash.h). */
static inline uint32
state_key_hash(StateKey k)
{
	return local_hash_bytes(k.data, k.len);
}

static inline bool
state_key_equal(StateKey a, StateKey b)
{
	return a.len == b.len && memcmp(a.data, b.data, a.len) == 0;
}

/*
 * The backends' order of keys (RocksDB's bytewise comparator): their
 * bytes, then, one a prefix of the other, the shorter first.  The memory
 * backend, the timer index and the pane scan must all sort as RocksDB does.
 */
static inline int
state_key_cmp(const char *a, int alen, const char *b, int blen)
{
	int			c = memcmp(a, b, Min(alen, blen));

	if (c != 0)
		return c;
	return (alen > blen) - (alen < blen);
}

typedef struct StateIterator StateIterator;

typedef struct StateBackendOps
{
	/* Value of key into val (reset first); false when absent. */
	bool		(*get) (StateBackend *backend, const char *key, int klen, StringInfo val);
	void		(*put) (StateBackend *backend, const char *key, int klen, const char *val, int vlen);
	void		(*delete) (StateBackend *backend, const char *key, int klen);

	/* Keys in [from, to), in byte order; to NULL means to the end. */
	StateIterator *(*iterate) (StateBackend *backend, const char *from, int flen,
							   const char *to, int tlen);
	bool		(*next) (StateIterator *it, const char **key, int *klen,
						 const char **val, int *vlen);
	void		(*iterate_end) (StateIterator *it);

	/*
	 * Optional, inside the checkpoint transaction: every change of epoch is
	 * written; the backend may start on the snapshot while the sink writes
	 * its rows.  checkpoint() follows; when the transaction aborts instead,
	 * the backend undoes what prepare() started itself (a transaction
	 * callback), before anything the checkpoint allocated can be freed.
	 */
	void		(*prepare) (StateBackend *backend, int64 epoch);

	/*
	 * Called inside the checkpoint transaction: make epoch's snapshot and
	 * return a reference to it, stored in mailer.checkpoints.state_ref.
	 * final: the worker stops after it (cleanly).
	 */
	char	   *(*checkpoint) (StateBackend *backend, int64 epoch, bool final);

	/*
	 * After the checkpoint committed: forget snapshots older than keep_from
	 * but the nkeep epochs of keep (ascending: the barrier cuts' retained
	 * checkpoints), and any newer than epoch.  Subtask 0's also forgets
	 * those of the subtasks k >= parallelism, which no longer run after a
	 * rescale down: they keep theirs only while a retained epoch needs
	 * them.  Called outside any transaction.
	 */
	void		(*committed) (StateBackend *backend, int64 epoch, int64 keep_from,
							  const int64 *keep, int nkeep);

	/* Bytes of state, roughly (for mailer.metrics). */
	int64		(*size) (StateBackend *backend);
} StateBackendOps;

struct StateBackend
{
	const StateBackendOps *ops;
	int64		job_id;
};

/*
 * What opening one subtask's state takes.  A job of parallelism P runs as
 * P subtasks; subtask k owns the key groups [kg_lo, kg_hi)
 * (base/key_groups.h) and opens only their state.  key_group_of gives the
 * key group of a state key, -1 for a key of none (operators/keyed_state.h's
 * keyed_state_key_group: the state layer does not know the key layout).
 *
 * The committed epoch may have been taken at another parallelism (the job
 * was rescaled while stopped): old_parallelism says which, and old_refs[j]
 * is old subtask j's state_ref of that epoch (NULL when its row has none).
 * At parallelism 1 all of this is subtask 0 owning [0, key_groups).
 */
typedef struct StateOpenArgs
{
	int64		job_id;
	int			subtask;
	int			parallelism;
	int			key_groups;
	int			kg_lo,
				kg_hi;			/* owned key groups: [kg_lo, kg_hi) */
	int64		epoch;			/* committed epoch to open; 0: empty state */
	int			old_parallelism;	/* the parallelism epoch was taken at */
	char	  **old_refs;		/* [old_parallelism] */
	int			(*key_group_of) (const char *key, int len, int key_groups);
} StateOpenArgs;

/*
 * Open a subtask's state as of a committed checkpoint (epoch 0: empty
 * state), discarding anything newer.  ERROR when a snapshot is missing.
 * Subtasks of one job open theirs at the same time: an open never changes
 * what another subtask reads or owns.
 */
extern StateBackend *state_rocksdb_open(const StateOpenArgs *args);
extern StateBackend *state_memory_open(const StateOpenArgs *args);

/*
 * Where jobs keep files, relative to the data directory: a job's
 * directory is its subtask 0's; subtask k >= 1 has job_<id>/subtask-<k>.
 */
extern char *state_root_dir(void);
extern char *state_job_dir(int64 job_id);
extern char *state_subtask_dir(int64 job_id, int subtask);

/*
 * Durability of the directories a crash must not lose: state_sync_dir
 * fsyncs a directory's files, the directory and its entry in its parent;
 * state_sync_subtask_dirs a subtask's directory and its parents, once made.
 */
extern void state_sync_dir(const char *path);
extern void state_sync_subtask_dirs(int64 job_id, int subtask);

/* Remove the files of jobs not in live_job_ids (the launcher calls this). */
extern void state_remove_orphans(int64 *live_job_ids, int njobs);

#endif							/* STATE_H */
