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

#include "common/hashfn.h"
#include "lib/stringinfo.h"

typedef struct StateBackend StateBackend;

/* A key as bytes, compared with memcmp; used as a hash key too. */
typedef struct StateKey
{
	const char *data;
	int			len;
} StateKey;

static inline uint32
state_key_hash(StateKey k)
{
	return hash_bytes((const unsigned char *) k.data, k.len);
}

static inline bool
state_key_equal(StateKey a, StateKey b)
{
	return a.len == b.len && memcmp(a.data, b.data, a.len) == 0;
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
	 * Called inside the checkpoint transaction: make epoch's snapshot and
	 * return a reference to it, stored in mailer.checkpoints.state_ref.
	 */
	char	   *(*checkpoint) (StateBackend *backend, int64 epoch);

	/* After the checkpoint committed: forget snapshots older than keep_from. */
	void		(*committed) (StateBackend *backend, int64 epoch, int64 keep_from);

	/* Bytes of state, roughly (for mailer.metrics). */
	int64		(*size) (StateBackend *backend);
} StateBackendOps;

struct StateBackend
{
	const StateBackendOps *ops;
	int64		job_id;
};

/*
 * Open a job's state as of a committed checkpoint (epoch 0: empty state),
 * discarding anything newer.  ERROR when the snapshot is missing.
 */
extern StateBackend *state_rocksdb_open(int64 job_id, int64 epoch, const char *state_ref);
extern StateBackend *state_memory_open(int64 job_id, int64 epoch);

/* Where jobs keep files, relative to the data directory. */
extern char *state_root_dir(void);
extern char *state_job_dir(int64 job_id);

/*
 * Durability of the directories a crash must not lose: state_sync_dir
 * fsyncs a directory's files, the directory and its entry in its parent;
 * state_sync_job_dirs a job's directory and its parents, once made.
 */
extern void state_sync_dir(const char *path);
extern void state_sync_job_dirs(int64 job_id);

/* Remove the files of jobs not in live_job_ids (the launcher calls this). */
extern void state_remove_orphans(int64 *live_job_ids, int njobs);

#endif							/* STATE_H */
