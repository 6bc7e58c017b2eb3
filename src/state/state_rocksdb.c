/*
 * state_rocksdb.c
 *		The RocksDB state backend: one database per subtask of a job under
 *		the data directory, subtask 0's in $PGDATA/mailer/<ext oid>/job_<id>/
 *		(where a job of one process has always kept it), subtask k's in
 *		job_<id>/subtask-<k>/, each with
 *
 *			lock			flocked by the process that has the directory
 *			live/			the database the worker reads and writes
 *			ckpt-<epoch>/	a RocksDB checkpoint per retained epoch
 *
 * A checkpoint's state_ref names its directory relative to its subtask's.
 * Writes skip the WAL: recovery never reads past the last checkpoint.  The
 * keyed stage writes what changed at each checkpoint; those writes are
 * kept aside, sorted, written into one SST file (on a thread of its own,
 * while the sink writes: rocks_prepare()) and ingested (moved into
 * the database, not through the memtable unless a read came first: see
 * ingest_pending()), and the checkpoint then
 * hard-links the SST files: its cost grows with the data changed since the
 * last one, not with the whole state.  Opening at epoch E rebuilds live/ from ckpt-E (links again, and
 * copies of the few small files RocksDB rewrites) and deletes any newer
 * checkpoint, which no committed transaction references.  Opening an
 * epoch taken at another parallelism builds live/ from the key groups the
 * subtask owns, read from the old subtasks' checkpoints (rescale_from).
 *
 * RocksDB's background threads do not block signals themselves, so they
 * are all started, with every signal blocked, before the database opens.
 */
#include "postgres.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "access/xact.h"
#include "common/file_perm.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/copydir.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "base/key_groups.h"
#include "base/mailer.h"
#include "base/signals.h"
#include "base/test_point.h"
#include "state/state.h"

typedef struct RocksState
{
	StateBackend base;
	char	   *dir;			/* the subtask's directory */
	int			subtask;
	int			parallelism;
	char	   *live;			/* dir/live */
	int			lock_fd;		/* dir/lock, flocked while the state is open */
	rocksdb_t  *db;
	rocksdb_options_t *options;
	rocksdb_readoptions_t *read;
	rocksdb_writeoptions_t *write;
	rocksdb_writebatch_t *batch;	/* writes not applied yet: see apply_writes() */
	MemoryContext pending_ctx;	/* the pending writes' keys and values */
	struct PendingWrite *pending;	/* puts and deletes not in the database yet;
									 * kept across applies, in rs's context */
	int			npending;
	int			pending_capacity;
	struct SstBuild *build;		/* the checkpoint's file being written, or NULL */
	struct RocksState *next_open;	/* open_states' list */
} RocksState;

/* A put (val != NULL, maybe of an empty value) or delete (val == NULL) kept for the next apply_writes() or checkpoint. */
typedef struct PendingWrite
{
	const char *key;
	const char *val;
	int			klen;
	int			vlen;
	int			seq;			/* the order of the writes: the last one of a key wins */
} PendingWrite;

typedef struct RocksIterator
{
	RocksState *rs;
	rocksdb_iterator_t *it;
	rocksdb_readoptions_t *read;
	char	   *upper;
	bool		started;
} RocksIterator;

/*
 * Level-0 files at which RocksDB stops memtable writes; a checkpoint waits
 * for compaction at as many before ingesting another (wait_for_level0()).
 */
#define LEVEL0_STOP_TRIGGER 64

static const StateBackendOps rocks_ops;

static void drop_build(RocksState *rs);
static void rocks_xact_callback(XactEvent event, void *arg);
static void rocks_exit(int code, Datum arg);

static rocksdb_env_t *rocks_env = NULL;

/*
 * The states this process opened (they stay open until it exits): the
 * transaction abort and exit callbacks join their build threads.
 */
static RocksState *open_states = NULL;

/* The epoch key, which every checkpoint's SST file holds first. */
static const char epoch_key[] = "\0epoch";
#define EPOCH_KEY_LEN (sizeof(epoch_key) - 1)

static void
keep_write(RocksState *rs, const char *key, int klen, const char *val, int vlen)
{
	PendingWrite *w;
	char	   *copy;

	if (rs->build)
		drop_build(rs);
	if (rs->npending == rs->pending_capacity)
	{
		rs->pending_capacity = Max(1024, rs->pending_capacity * 2);
		rs->pending = rs->pending ?
			repalloc_huge(rs->pending, sizeof(PendingWrite) * rs->pending_capacity) :
			MemoryContextAllocHuge(GetMemoryChunkContext(rs), sizeof(PendingWrite) * rs->pending_capacity);
	}
	/* At least a byte: a put of an empty value keeps a non-NULL val. */
	copy = MemoryContextAlloc(rs->pending_ctx, klen + (val ? vlen : 0) + 1);
	memcpy(copy, key, klen);
	if (val)
		memcpy(copy + klen, val, vlen);
	w = &rs->pending[rs->npending];
	w->key = copy;
	w->klen = klen;
	w->val = val ? copy + klen : NULL;
	w->vlen = val ? vlen : 0;
	w->seq = rs->npending++;
}

/* RocksDB's bytewise order of keys, then the order of the writes. */
static inline int
pending_cmp(const PendingWrite *x, const PendingWrite *y)
{
	int			c = state_key_cmp(x->key, x->klen, y->key, y->klen);

	if (c != 0)
		return c;
	return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

/* pending_cmp inlined into a sort of its own, for the radix sort's small buckets. */
#define ST_SORT sort_writes_by_comparison
#define ST_ELEMENT_TYPE PendingWrite
#define ST_COMPARE(a, b) pending_cmp(a, b)
#define ST_SCOPE static
#define ST_DECLARE
#define ST_DEFINE
#include "lib/sort_template.h"

/*
 * Buckets of up to this many writes are sorted by comparison; a bucket
 * this many radix passes deep too (keys that share long prefixes and
 * split a few at a time would otherwise recurse once per byte).
 */
#define RADIX_SMALL_BUCKET	32
#define RADIX_MAX_LEVELS	24

/* The byte of a key at depth, 1 to 256, or 0 past its end: a key sorts before its extensions. */
static inline int
write_byte(const PendingWrite *w, int depth)
{
	return depth < w->klen ? (unsigned char) w->key[depth] + 1 : 0;
}

/*
 * Sort writes[0..n) by key bytes from depth on, stably (the writes of one
 * key stay in the order they came, which is seq's): a most significant
 * byte first radix sort through tmp.  A checkpoint sorts every key it
 * changed, about 100k at 5M keys, and a comparison sort spent a third of
 * the state's share of the checkpoint in its comparisons, most of them
 * over the bytes every key shares (the kind, the key field's length); a
 * pass over a byte all the writes share costs one read of it each.
 */
static void
radix_sort_writes(PendingWrite *writes, PendingWrite *tmp, int n, int depth, int level)
{
	int			count[257];
	int			pos;

	for (;;)
	{
		int			first;

		if (n <= RADIX_SMALL_BUCKET || level >= RADIX_MAX_LEVELS)
		{
			sort_writes_by_comparison(writes, n);
			return;
		}
		memset(count, 0, sizeof(count));
		for (int i = 0; i < n; i++)
			count[write_byte(&writes[i], depth)]++;
		first = write_byte(&writes[0], depth);
		if (count[first] < n)
			break;
		/* All past their end: one key, its writes in their order already. */
		if (first == 0)
			return;
		depth++;
	}

	/* Scatter into tmp by the byte, in order within each bucket, and back. */
	{
		int			next[257];

		pos = 0;
		for (int b = 0; b < 257; b++)
		{
			next[b] = pos;
			pos += count[b];
		}
		for (int i = 0; i < n; i++)
			tmp[next[write_byte(&writes[i], depth)]++] = writes[i];
		memcpy(writes, tmp, sizeof(PendingWrite) * n);
	}
	/* Bucket 0 holds writes of one key (all ended here): in order already. */
	pos = count[0];
	for (int b = 1; b < 257; b++)
	{
		if (count[b] > 1)
			radix_sort_writes(writes + pos, tmp, count[b], depth + 1, level + 1);
		pos += count[b];
	}
}


/*
 * Sort the pending writes and keep the last write of each key: an SST file
 * takes its keys in order and once each, and the memtable takes keys in
 * order at a fraction of the cost of keys in random order.  Returns how
 * many are left, at the start of rs->pending, which are then all that is
 * pending (numbered again, so that a later write of a key still wins).
 * tmp has room for every pending write.  Neither allocates nor throws: the
 * build thread runs it (build_main()).
 */
static int
sort_pending_with(RocksState *rs, PendingWrite *tmp)
{
	int			n = 0;

	radix_sort_writes(rs->pending, tmp, rs->npending, 0, 0);
	for (int i = 0; i < rs->npending; i++)
	{
		PendingWrite *w = &rs->pending[i];

		if (i + 1 < rs->npending && w->klen == w[1].klen &&
			memcmp(w->key, w[1].key, w->klen) == 0)
			continue;
		rs->pending[n] = *w;
		rs->pending[n].seq = n;
		n++;
	}
	rs->npending = n;
	return n;
}

/* sort_pending_with() with a scratch array of its own. */
static int
sort_pending(RocksState *rs)
{
	PendingWrite *tmp = MemoryContextAllocHuge(CurrentMemoryContext,
											   sizeof(PendingWrite) * Max(rs->npending, 1));
	int			n = sort_pending_with(rs, tmp);

	pfree(tmp);
	return n;
}

/*
 * The keys and values go; the array stays for the next writes: in a
 * windowed job each new window's read applies a few writes, and a new
 * array each time would be a malloc and free of its size per window.
 */
static void
forget_pending(RocksState *rs)
{
	MemoryContextReset(rs->pending_ctx);
	rs->npending = 0;
}

/*
 * Puts and deletes gather aside, applied in one write before anything
 * reads: a checkpoint writes many entries in a row, and one write of many
 * costs much less than many writes of one.
 */
static void
apply_writes(RocksState *rs)
{
	char	   *err = NULL;

	if (rs->build)
		drop_build(rs);
	if (rs->npending > 0)
	{
		int			n = sort_pending(rs);

		for (int i = 0; i < n; i++)
		{
			PendingWrite *w = &rs->pending[i];

			if (w->val)
				rocksdb_writebatch_put(rs->batch, w->key, w->klen, w->val, w->vlen);
			else
				rocksdb_writebatch_delete(rs->batch, w->key, w->klen);
		}
		forget_pending(rs);
	}
	if (rocksdb_writebatch_count(rs->batch) == 0)
		return;
	rocksdb_write(rs->db, rs->write, rs->batch, &err);
	rocksdb_writebatch_clear(rs->batch);
	if (err != NULL)
	{
		char	   *msg = pstrdup(err);

		rocksdb_free(err);
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("RocksDB could not write to \"%s\": %s", rs->live, msg)));
	}
}

static void
check(char *err, const char *what, const char *path)
{
	if (err != NULL)
	{
		char	   *msg = pstrdup(err);

		rocksdb_free(err);
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("RocksDB could not %s \"%s\": %s", what, path, msg)));
	}
}

static void
remove_if_exists(const char *path)
{
	struct stat st;

	if (stat(path, &st) == 0)
		rmtree(path, true);
}

/*
 * Unlink a file if it is there.  Never truncate or rewrite such a file in
 * place: an ingested SST file is hard-linked into live/ and from there into
 * committed ckpt-<epoch>/ directories, so its inode may be a committed
 * snapshot's.
 */
static void
unlink_if_exists(const char *path, int elevel)
{
	if (unlink(path) != 0 && errno != ENOENT)
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", path),
				 errhint("Remove the file, or make it removable, and the job retries.")));
}

/* Whether name is an "ingest-<epoch>.sst" file of ingest_pending(). */
static bool
is_ingest_file(const char *name)
{
	size_t		len = strlen(name);

	return len > strlen("ingest-.sst") && strncmp(name, "ingest-", 7) == 0 &&
		strcmp(name + len - 4, ".sst") == 0;
}

/*
 * Remove the SST files that a crash or an error left between writing them
 * and ingesting them.  No committed state references them: they are only
 * this process's (or a dead one's) unfinished checkpoint.  elevel: ERROR
 * where a checkpoint is to come, WARNING where the retention tidies up
 * after a commit.
 */
static void
remove_ingest_files(const char *dir, int elevel)
{
	DIR		   *d = AllocateDir(dir);
	struct dirent *de;

	while ((de = ReadDir(d, dir)) != NULL)
	{
		if (is_ingest_file(de->d_name))
			unlink_if_exists(psprintf("%s/%s", dir, de->d_name), elevel);
	}
	FreeDir(d);
}

/* The epoch of a "ckpt-<epoch>" directory name, or -1. */
static int64
checkpoint_epoch(const char *name)
{
	int64		epoch;
	char		rest;

	if (sscanf(name, "ckpt-" INT64_FORMAT "%c", &epoch, &rest) != 1)
		return -1;
	return epoch;
}

/* Remove checkpoints outside [keep_from, keep_to] but the nkeep epochs of keep. */
static void
remove_checkpoints(const char *dir, int64 keep_from, int64 keep_to, const int64 *keep, int nkeep)
{
	DIR		   *d = AllocateDir(dir);
	struct dirent *de;

	while ((de = ReadDir(d, dir)) != NULL)
	{
		int64		epoch = checkpoint_epoch(de->d_name);
		bool		kept = false;

		for (int i = 0; i < nkeep && !kept; i++)
			kept = keep[i] == epoch;
		if (epoch >= 0 && !kept && (epoch < keep_from || epoch > keep_to))
			rmtree(psprintf("%s/%s", dir, de->d_name), true);
	}
	FreeDir(d);
}

/* live/ as a copy of a checkpoint: SST files are immutable, so link them. */
static void
clone_checkpoint(const char *from, const char *to)
{
	DIR		   *d = AllocateDir(from);
	struct dirent *de;

	if (MakePGDirectory(to) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", to)));
	while ((de = ReadDir(d, from)) != NULL)
	{
		char	   *src;
		char	   *dst;
		size_t		len = strlen(de->d_name);

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		src = psprintf("%s/%s", from, de->d_name);
		dst = psprintf("%s/%s", to, de->d_name);
		if (len > 4 && strcmp(de->d_name + len - 4, ".sst") == 0)
		{
			if (link(src, dst) != 0)
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not link \"%s\" to \"%s\": %m", src, dst)));
		}
		else
			copy_file(src, dst);
	}
	FreeDir(d);
}

/* Start RocksDB's thread pools once per process, with signals blocked. */
static rocksdb_env_t *
shared_env(void)
{
	if (rocks_env == NULL)
	{
		sigset_t	saved;

		mailer_block_signals(&saved);
		rocks_env = rocksdb_create_default_env();
		rocksdb_env_set_background_threads(rocks_env, 2);
		rocksdb_env_set_high_priority_background_threads(rocks_env, 1);
		mailer_restore_signals(&saved);
	}
	return rocks_env;
}

/* The options of a subtask's live database. */
static rocksdb_options_t *
live_options(void)
{
	rocksdb_options_t *options = rocksdb_options_create();
	rocksdb_block_based_table_options_t *table;

	rocksdb_options_set_env(options, shared_env());
	rocksdb_options_set_create_if_missing(options, 1);
	rocksdb_options_set_max_background_jobs(options, 2);
	/*
	 * Checkpoints ingest their writes as SST files: the memtable fills only
	 * when a rescale copies state in, or a read (a cache miss of the keyed
	 * stage) applies the writes kept before it.  Then the checkpoint's
	 * ingest flushes it, since the file overlaps it.
	 */
	rocksdb_options_set_write_buffer_size(options, 16 * 1024 * 1024);
	rocksdb_options_set_max_write_buffer_number(options, 2);
	rocksdb_options_set_max_open_files(options, 256);
	/*
	 * Each checkpoint ingests one level-0 file of keys from all over the
	 * key space, and each compaction out of level 0 rewrites most of the
	 * base level: twice the files per compaction, half the rewriting.  A
	 * lookup consults each level-0 file's bloom filter, a cost that grows
	 * far more slowly.
	 */
	rocksdb_options_set_level0_file_num_compaction_trigger(options, 8);
	/*
	 * Dynamic level sizes, so that level 0 compacts into the last level
	 * (while it holds under 256 MB), the only one where a deletion (a
	 * purged window, pane or session) is dropped.  With fixed sizes the
	 * first ingested files sat in levels 6, 5, 4..., level 0 compacted into
	 * level 1, and every deletion stayed there for the job's life, in each
	 * range scan's way (docs/ARCHITECTURE.md, "RocksDB: what a checkpoint
	 * writes").
	 */
	rocksdb_options_set_level_compaction_dynamic_level_bytes(options, 1);
	rocksdb_options_set_level0_slowdown_writes_trigger(options, 40);
	rocksdb_options_set_level0_stop_writes_trigger(options, LEVEL0_STOP_TRIGGER);
	rocksdb_options_set_keep_log_file_num(options, 2);
	rocksdb_options_set_stats_dump_period_sec(options, 0);
	rocksdb_options_set_compression(options, rocksdb_lz4_compression);
	/* Most lookups are of keys not there yet (a new key, a new window): a bloom filter answers them. */
	rocksdb_options_set_memtable_prefix_bloom_size_ratio(options, 0.1);
	rocksdb_options_set_memtable_whole_key_filtering(options, 1);
	table = rocksdb_block_based_options_create();
	rocksdb_block_based_options_set_block_cache(table, rocksdb_cache_create_lru(16 * 1024 * 1024));
	/* Index and filter blocks stay with each open table: a lookup never rereads them. */
	rocksdb_block_based_options_set_cache_index_and_filter_blocks(table, 0);
	rocksdb_block_based_options_set_filter_policy(table, rocksdb_filterpolicy_create_bloom(10));
	rocksdb_options_set_block_based_table_factory(options, table);
	return options;
}

/*
 * Besides the job's lock, which every worker takes first: one process at
 * a time has a subtask's directory, whatever the shared memory says.  A
 * holder is waited for up to SUBTASK_LOCK_WAIT_MS: when a parallel job's
 * run ends (a rewind to a barrier cut, a stop), the next run's subtask k
 * may start while the last run's subtask k is still closing its state.
 */
#define SUBTASK_LOCK_WAIT_MS 10000

static int
lock_subtask_dir(const char *dir, int64 job_id, int subtask)
{
	int			fd = BasicOpenFile(psprintf("%s/lock", dir), O_RDWR | O_CREAT | PG_BINARY);
	int			waited = 0;
	bool		locked;

	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open \"%s/lock\": %m", dir)));
	for (;;)
	{
		locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
		if (locked || errno != EWOULDBLOCK || waited >= SUBTASK_LOCK_WAIT_MS)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		waited += 50;
	}
	if (!locked)
	{
		int			save_errno = errno;

		close(fd);
		errno = save_errno;
		if (subtask == 0)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("the RocksDB state of job " INT64_FORMAT " is in use by another process", job_id),
					 errdetail("Locking \"%s/lock\" failed: %m.", dir)));
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("the RocksDB state of subtask %d of job " INT64_FORMAT " is in use by another process",
						subtask, job_id),
				 errdetail("Locking \"%s/lock\" failed: %m.", dir)));
	}
	return fd;
}

/* The directory of (old) subtask's checkpoint of epoch, which must exist. */
static char *
checkpoint_dir(int64 job_id, int subtask, int64 epoch, const char *state_ref)
{
	char	   *ckpt = psprintf("%s/%s", state_subtask_dir(job_id, subtask), state_ref ? state_ref : "");
	struct stat st;

	if (state_ref == NULL || stat(ckpt, &st) != 0 || !S_ISDIR(st.st_mode))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the RocksDB state of checkpoint " INT64_FORMAT " is missing", epoch),
				 errdetail("Directory \"%s\" under the data directory does not exist.", ckpt),
				 errhint("Restore a retained epoch whose state exists with mailer.restore_job(), or drop and create the job again.")));
	return ckpt;
}

/*
 * Copy into live/ the keys of one old subtask's checkpoint that belong to
 * the key groups this subtask owns now.  The checkpoint is opened read-only:
 * the other new subtasks read it at the same time, and it stays what its
 * committed epoch says (a restore to it may come later).  The old subtask
 * owned [old_lo, old_hi): a key of another group means its state was
 * misrouted, and moving it on would hide that.
 */
static void
copy_key_groups(RocksState *rs, const StateOpenArgs *args, int old_subtask,
				const char *ckpt, int old_lo, int old_hi)
{
	rocksdb_options_t *options = rocksdb_options_create();
	rocksdb_readoptions_t *read = rocksdb_readoptions_create();
	rocksdb_t  *old;
	rocksdb_iterator_t *volatile it = NULL;
	char	   *err = NULL;
	sigset_t	saved;

	rocksdb_options_set_env(options, shared_env());
	rocksdb_options_set_max_open_files(options, 64);
	/* Each block is read once: keep the live database's cache for the live keys. */
	rocksdb_readoptions_set_fill_cache(read, 0);
	mailer_block_signals(&saved);
	old = rocksdb_open_for_read_only(options, ckpt, 0, &err);
	mailer_restore_signals(&saved);
	check(err, "open the checkpoint", ckpt);

	PG_TRY();
	{
		int64		n = 0;

		it = rocksdb_create_iterator(old, read);
		for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it))
		{
			size_t		klen;
			size_t		vlen;
			const char *key = rocksdb_iter_key(it, &klen);
			const char *val;
			int			g = args->key_group_of(key, (int) klen, args->key_groups);

			if (g < 0)
				continue;		/* no group's: "\0epoch" is written anew below */
			if (g < old_lo || g >= old_hi)
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("the RocksDB state of subtask %d of job " INT64_FORMAT " holds key group %d, which that subtask did not own",
								old_subtask, args->job_id, g),
						 errdetail("Checkpoint \"%s\" was taken at parallelism %d, when the subtask owned key groups %d to %d.",
								   ckpt, args->old_parallelism, old_lo, old_hi - 1),
						 errhint("Restore an earlier epoch with mailer.restore_job(), or drop and create the job again.")));
			if (g < args->kg_lo || g >= args->kg_hi)
				continue;
			val = rocksdb_iter_value(it, &vlen);
			rocksdb_writebatch_put(rs->batch, key, klen, val, vlen);
			if (++n % 10000 == 0)
			{
				apply_writes(rs);
				/* A large state takes a while: stop_job and shutdown may end it (the next start redoes it). */
				CHECK_FOR_INTERRUPTS();
			}
		}
		rocksdb_iter_get_error(it, &err);
		check(err, "read the checkpoint", ckpt);
		apply_writes(rs);
	}
	PG_FINALLY();
	{
		if (it)
			rocksdb_iter_destroy(it);
		rocksdb_close(old);
		rocksdb_readoptions_destroy(read);
		rocksdb_options_destroy(options);
	}
	PG_END_TRY();
}

/*
 * The job was rescaled: the epoch's state is spread over the old subtasks'
 * checkpoints.  live/ is new and empty; each old subtask that owned some
 * of this subtask's key groups gives them.  Nothing is written outside
 * live/: a crash before the next commit redoes all of it from the same
 * checkpoints.
 */
static void
rescale_from(RocksState *rs, const StateOpenArgs *args)
{
	for (int j = 0; j < args->old_parallelism; j++)
	{
		int			old_lo;
		int			old_hi;

		key_group_range(j, args->old_parallelism, args->key_groups, &old_lo, &old_hi);
		if (old_hi <= args->kg_lo || old_lo >= args->kg_hi)
			continue;
		copy_key_groups(rs, args, j, checkpoint_dir(args->job_id, j, args->epoch, args->old_refs[j]),
						old_lo, old_hi);
	}
	/* As a checkpoint of the epoch holds it. */
	rocksdb_writebatch_put(rs->batch, epoch_key, EPOCH_KEY_LEN,
						   (const char *) &args->epoch, sizeof(args->epoch));
	apply_writes(rs);
}

/*
 * Without a rescale, the subtask's own checkpoint of the epoch becomes
 * live/, as for a job of one process.  With one, see rescale_from().
 */
StateBackend *
state_rocksdb_open(const StateOpenArgs *args)
{
	static bool callbacks_registered = false;
	RocksState *rs = palloc0(sizeof(RocksState));
	char	   *err = NULL;
	sigset_t	saved;
	bool		rescale = args->epoch > 0 && args->old_parallelism != args->parallelism;

	Assert(args->subtask >= 0 && args->subtask < args->parallelism);
	Assert(args->kg_lo >= 0 && args->kg_lo <= args->kg_hi && args->kg_hi <= args->key_groups);
	/* Without the old subtasks a rescale would quietly start from nothing. */
	if (args->epoch > 0 && (args->old_parallelism < 1 || args->old_refs == NULL ||
							args->key_group_of == NULL))
		elog(ERROR, "mailer: opening the RocksDB state of epoch " INT64_FORMAT " needs its subtasks' state references",
			 args->epoch);
	rs->base.ops = &rocks_ops;
	rs->base.job_id = args->job_id;
	rs->subtask = args->subtask;
	rs->parallelism = args->parallelism;
	rs->dir = state_subtask_dir(args->job_id, args->subtask);
	rs->live = psprintf("%s/live", rs->dir);

	if (pg_mkdir_p(pstrdup(rs->dir), pg_dir_create_mode) != 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", rs->dir)));
	state_sync_subtask_dirs(args->job_id, args->subtask);
	rs->lock_fd = lock_subtask_dir(rs->dir, args->job_id, args->subtask);

	/*
	 * Back to the committed epoch: what came after it never committed.  The
	 * checkpoints up to it stay, this subtask's own among them when it ran
	 * at the old parallelism too: the others may be reading it now.
	 */
	remove_if_exists(rs->live);
	remove_ingest_files(rs->dir, ERROR);
	remove_checkpoints(rs->dir, 0, args->epoch, NULL, 0);
	if (args->epoch > 0 && !rescale)
		clone_checkpoint(checkpoint_dir(args->job_id, args->subtask, args->epoch,
										args->old_refs ? args->old_refs[args->subtask] : NULL),
						 rs->live);

	rs->options = live_options();
	mailer_block_signals(&saved);
	rs->db = rocksdb_open(rs->options, rs->live, &err);
	mailer_restore_signals(&saved);
	check(err, "open", rs->live);

	rs->read = rocksdb_readoptions_create();
	rs->write = rocksdb_writeoptions_create();
	rocksdb_writeoptions_disable_WAL(rs->write, 1);
	rs->batch = rocksdb_writebatch_create();
	rs->pending_ctx = AllocSetContextCreate(CurrentMemoryContext, "RocksDB pending writes",
											ALLOCSET_DEFAULT_SIZES);
	if (!callbacks_registered)
	{
		RegisterXactCallback(rocks_xact_callback, NULL);
		before_shmem_exit(rocks_exit, (Datum) 0);
		callbacks_registered = true;
	}
	rs->next_open = open_states;
	open_states = rs;
	if (rescale)
		rescale_from(rs, args);
	return &rs->base;
}

static bool
rocks_get(StateBackend *backend, const char *key, int klen, StringInfo val)
{
	RocksState *rs = (RocksState *) backend;
	char	   *err = NULL;
	rocksdb_pinnableslice_t *v;
	const char *data;
	size_t		len;

	apply_writes(rs);
	v = rocksdb_get_pinned(rs->db, rs->read, key, klen, &err);
	check(err, "read from", rs->live);
	if (v == NULL)
		return false;
	data = rocksdb_pinnableslice_value(v, &len);
	resetStringInfo(val);
	appendBinaryStringInfo(val, data, (int) len);
	rocksdb_pinnableslice_destroy(v);
	return true;
}

static void
rocks_put(StateBackend *backend, const char *key, int klen, const char *val, int vlen)
{
	RocksState *rs = (RocksState *) backend;

	/* A put of nothing stores an empty value: NULL would make it a delete. */
	if (val == NULL)
	{
		Assert(vlen == 0);
		val = "";
		vlen = 0;
	}
	keep_write(rs, key, klen, val, vlen);
}

static void
rocks_delete(StateBackend *backend, const char *key, int klen)
{
	RocksState *rs = (RocksState *) backend;

	keep_write(rs, key, klen, NULL, 0);
}

static StateIterator *
rocks_iterate(StateBackend *backend, const char *from, int flen, const char *to, int tlen)
{
	RocksState *rs = (RocksState *) backend;
	RocksIterator *ri = palloc0(sizeof(RocksIterator));

	apply_writes(rs);
	ri->rs = rs;
	ri->read = rocksdb_readoptions_create();
	if (to)
	{
		/* RocksDB keeps a pointer to the bound: it must live as long as the iterator. */
		ri->upper = palloc(tlen);
		memcpy(ri->upper, to, tlen);
		rocksdb_readoptions_set_iterate_upper_bound(ri->read, ri->upper, tlen);
	}
	ri->it = rocksdb_create_iterator(rs->db, ri->read);
	rocksdb_iter_seek(ri->it, from, flen);
	return (StateIterator *) ri;
}

static bool
rocks_next(StateIterator *it, const char **key, int *klen, const char **val, int *vlen)
{
	RocksIterator *ri = (RocksIterator *) it;
	size_t		kl,
				vl;

	if (ri->started)
		rocksdb_iter_next(ri->it);
	ri->started = true;
	if (!rocksdb_iter_valid(ri->it))
	{
		char	   *err = NULL;

		rocksdb_iter_get_error(ri->it, &err);
		check(err, "iterate over", ri->rs->live);
		return false;
	}
	*key = rocksdb_iter_key(ri->it, &kl);
	*val = rocksdb_iter_value(ri->it, &vl);
	*klen = (int) kl;
	*vlen = (int) vl;
	return true;
}

static void
rocks_iterate_end(StateIterator *it)
{
	RocksIterator *ri = (RocksIterator *) it;

	rocksdb_iter_destroy(ri->it);
	rocksdb_readoptions_destroy(ri->read);
	if (ri->upper)
		pfree(ri->upper);
	pfree(ri);
}

/* The number of level-0 files, or 0 if RocksDB does not say. */
static uint64
level0_files(RocksState *rs)
{
	uint64_t	n = 0;

	if (rocksdb_property_int(rs->db, "rocksdb.num-files-at-level0", &n) != 0)
		return 0;
	return n;
}

/*
 * Ingestion neither waits for a write stall nor flushes the way a
 * checkpoint's flush did, which waited while level 0 was full: without a
 * wait here, checkpoints would pile level-0 files up as fast as they come
 * when compaction falls behind, and every lookup probes each of them.  So
 * the checkpoint waits, interruptibly (stop_job, shutdown), while level 0
 * holds the files at which RocksDB would stop writes.  Compaction runs on
 * RocksDB's threads and needs nothing from this one.  A wait that lasts is
 * logged once, and its end.
 */
static void
wait_for_level0(RocksState *rs)
{
	TimestampTz start = 0;
	bool		logged = false;
	bool		latch_was_set = false;
	uint64		files;

	while ((files = level0_files(rs)) >= LEVEL0_STOP_TRIGGER)
	{
		CHECK_FOR_INTERRUPTS();
		if (start == 0)
			start = GetCurrentTimestamp();
		else if (!logged && TimestampDifferenceExceeds(start, GetCurrentTimestamp(), 1000))
		{
			ereport(LOG,
					(errmsg("mailer: the checkpoint of job " INT64_FORMAT " waits for RocksDB's compaction in \"%s\"",
							rs->base.job_id, rs->live),
					 errdetail("Level 0 holds " UINT64_FORMAT " files; the checkpoint goes on below %d.",
							   files, LEVEL0_STOP_TRIGGER)));
			logged = true;
		}
		if (WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50,
					  PG_WAIT_EXTENSION) & WL_LATCH_SET)
			latch_was_set = true;
		ResetLatch(MyLatch);
	}
	if (logged)
		ereport(LOG,
				(errmsg("mailer: the checkpoint of job " INT64_FORMAT " goes on after waiting %ld ms for RocksDB's compaction",
						rs->base.job_id,
						(long) (TimestampDifferenceMilliseconds(start, GetCurrentTimestamp())))));
	/* Whatever set the latch meanwhile (a message, a reload) still finds it set. */
	if (latch_was_set)
		SetLatch(MyLatch);
}

/*
 * The options of the SST file a checkpoint ingests: the database's (its
 * filter, its block size), uncompressed.  The file lands in level 0 (the
 * first into an empty database in level 6) and the next compaction
 * rewrites it, compressed, within a few checkpoints;
 * compressing it first cost a checkpoint about as much as writing it.
 */
static rocksdb_options_t *
ingest_file_options(RocksState *rs)
{
	rocksdb_options_t *options = rocksdb_options_create_copy(rs->options);

	rocksdb_options_set_compression(options, rocksdb_no_compression);
	return options;
}

/*
 * The epoch key, then the pending writes, sorted, into a new SST file:
 * what a build thread runs, so it neither allocates from PostgreSQL nor
 * throws.  "\0epoch" sorts before every state key (each starts with its
 * kind's letter), so it comes first; it is never pending, so a build that
 * is dropped leaves no uncommitted epoch to reach live/.  Stops between
 * writes once *abandon is set (the build is dropped anyway).  Returns
 * RocksDB's message (malloc'd), or NULL once the file is written and synced.
 */
static char *
write_sst(RocksState *rs, const char *file, rocksdb_options_t *fileopts, PendingWrite *tmp,
		  int64 epoch, pg_atomic_uint32 *abandon)
{
	rocksdb_envoptions_t *envopts = rocksdb_envoptions_create();
	rocksdb_sstfilewriter_t *writer = rocksdb_sstfilewriter_create(envopts, fileopts);
	char	   *err = NULL;
	int			n = sort_pending_with(rs, tmp);

	rocksdb_sstfilewriter_open(writer, file, &err);
	if (err == NULL)
		rocksdb_sstfilewriter_put(writer, epoch_key, EPOCH_KEY_LEN, (const char *) &epoch, sizeof(epoch), &err);
	for (int i = 0; i < n && err == NULL; i++)
	{
		PendingWrite *w = &rs->pending[i];

		if (pg_atomic_read_u32(abandon))
			err = strdup("abandoned");
		else if (w->val)
			rocksdb_sstfilewriter_put(writer, w->key, w->klen, w->val, w->vlen, &err);
		else
			rocksdb_sstfilewriter_delete(writer, w->key, w->klen, &err);
	}
	if (err == NULL)
		rocksdb_sstfilewriter_finish(writer, &err);
	rocksdb_sstfilewriter_destroy(writer);
	rocksdb_envoptions_destroy(envopts);
	return err;
}

/*
 * A checkpoint's SST file being written on a thread of its own, from the
 * moment the keyed stage has written the epoch's changes (prepare) while
 * the worker writes the sink's rows, to the state's snapshot (checkpoint),
 * which waits for it and ingests it.  The file is the same, and comes at
 * the same point of the checkpoint's order (docs/ARCHITECTURE.md, "RocksDB:
 * what a checkpoint writes"): only its writing overlaps the sink's.
 *
 * The thread reads and reorders memory the main thread allocated: the
 * pending writes' array and their keys and values (rs's context and
 * pending_ctx), and this struct with its file name and scratch array, all
 * in rs's context, which lives as long as the process.  Until it is
 * joined, the thread owns them: every other use of the pending writes
 * joins it first (join_build()), and so do the end of the checkpoint's
 * transaction when it aborts and the exit of the process (rocks_xact_callback(),
 * rocks_exit()), so no thread outlives its checkpoint.
 */
typedef struct SstBuild
{
	RocksState *rs;
	int64		epoch;
	char	   *file;
	rocksdb_options_t *fileopts;
	PendingWrite *tmp;			/* the sort's scratch */
	char	   *err;			/* write_sst()'s answer */
	pg_atomic_uint32 abandon;	/* set: stop writing, the file is dropped */
	pthread_t	thread;
} SstBuild;

static void *
build_main(void *arg)
{
	SstBuild   *b = arg;

	b->err = write_sst(b->rs, b->file, b->fileopts, b->tmp, b->epoch, &b->abandon);
	return NULL;
}

/* The name of epoch's SST file beside live/. */
static char *
ingest_file_name(RocksState *rs, int64 epoch)
{
	return psprintf("%s/ingest-" INT64_FORMAT ".sst", rs->dir, epoch);
}

/*
 * A file of this name is left only by a failed attempt at this epoch in
 * this process (open removes older ones): unlink it, and the writer
 * creates a new inode.  In rs's context, as the pending writes are: the
 * checkpoint runs in a context reset at every round of the batch loop.
 */
static SstBuild *
new_build(RocksState *rs, int64 epoch)
{
	MemoryContext cxt = GetMemoryChunkContext(rs);
	SstBuild   *b = MemoryContextAllocZero(cxt, sizeof(SstBuild));
	char	   *file = ingest_file_name(rs, epoch);

	b->rs = rs;
	b->epoch = epoch;
	b->file = MemoryContextStrdup(cxt, file);
	pfree(file);
	unlink_if_exists(b->file, ERROR);
	b->fileopts = ingest_file_options(rs);
	b->tmp = MemoryContextAllocHuge(cxt, sizeof(PendingWrite) * Max(rs->npending, 1));
	pg_atomic_init_u32(&b->abandon, 0);
	return b;
}

static void
free_build(SstBuild *b)
{
	rocksdb_options_destroy(b->fileopts);
	if (b->err)
		rocksdb_free(b->err);
	pfree(b->tmp);
	pfree(b->file);
	pfree(b);
}

/* Wait for the build thread: the pending writes are the caller's again, sorted. */
static SstBuild *
join_build(RocksState *rs)
{
	SstBuild   *b = rs->build;

	if (b == NULL)
		return NULL;
	rs->build = NULL;
	pthread_join(b->thread, NULL);
	return b;
}

/*
 * A build no checkpoint will ingest (the checkpoint's transaction aborted,
 * the process exits, or a write or read came first): the thread stops at
 * its next write, its file goes, the writes stay pending.  Throws nothing:
 * abort and exit callbacks call it.
 */
static void
drop_build(RocksState *rs)
{
	SstBuild   *b = rs->build;

	if (b == NULL)
		return;
	pg_atomic_write_u32(&b->abandon, 1);
	(void) join_build(rs);
	(void) unlink(b->file);
	free_build(b);
}

/*
 * No build thread outlives the transaction of its checkpoint: an abort
 * (of the top-level transaction; a subtransaction's, as the sink's retry
 * of a row, leaves it running) drops it before the worker's loop resets
 * or frees anything.
 */
static void
rocks_xact_callback(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT)
		return;
	for (RocksState *rs = open_states; rs; rs = rs->next_open)
		drop_build(rs);
}

/*
 * Nor the process: exit() runs the C++ static destructors, which must not
 * run under a thread inside RocksDB.  The thread cannot be cancelled in a
 * RocksDB call; it stops at its next write, so the wait is at most one
 * put.  Registered after worker_exit (job_worker.c), so it runs before it.
 */
static void
rocks_exit(int code, Datum arg)
{
	for (RocksState *rs = open_states; rs; rs = rs->next_open)
		drop_build(rs);
}

/*
 * Start writing the checkpoint's SST file of epoch, the epoch key with the
 * changed state, on a build thread; started with every signal blocked, as
 * RocksDB's own threads are.  Without a thread, the checkpoint writes it.
 */
static void
rocks_prepare(StateBackend *backend, int64 epoch)
{
	RocksState *rs = (RocksState *) backend;
	SstBuild   *b;
	sigset_t	saved;
	int			rc;

	drop_build(rs);
	wait_for_level0(rs);
	b = new_build(rs, epoch);
	mailer_block_signals(&saved);
	rc = pthread_create(&b->thread, NULL, build_main, b);
	mailer_restore_signals(&saved);
	if (rc != 0)
	{
		free_build(b);
		return;
	}
	rs->build = b;
	TEST_POINT("rocksdb_after_prepare");
}

/*
 * The pending writes (at a checkpoint: what changed since the last one)
 * and the epoch key into the database as one SST file, written beside
 * live/ and moved in: no memtable to fill and flush.  The file's keys are
 * newer than any in the database (RocksDB gives it the next sequence
 * number), so it wins over older values of the same keys, as a write
 * would.  The file is the build thread's of rocks_prepare(), or written
 * here.
 */
static void
ingest_pending(RocksState *rs, int64 epoch)
{
	SstBuild   *b = join_build(rs);
	rocksdb_ingestexternalfileoptions_t *ingest;
	const char *files[1];
	char	   *file;
	char	   *err = NULL;
	sigset_t	saved;

	/*
	 * A read since the last checkpoint applied the writes before it to the
	 * memtable (apply_writes()); those that came after are here.  RocksDB
	 * flushes a memtable that overlaps the file before ingesting it, and
	 * the file gets a newer sequence number than anything in it: the
	 * epoch's last write of each key wins either way.
	 */
	if (b == NULL || b->epoch != epoch)
	{
		if (b)
		{
			(void) unlink(b->file);
			free_build(b);
		}
		wait_for_level0(rs);
		b = new_build(rs, epoch);
		b->err = write_sst(rs, b->file, b->fileopts, b->tmp, epoch, &b->abandon);
	}
	file = pstrdup(b->file);
	if (b->err != NULL)
	{
		char	   *msg = pstrdup(b->err);

		(void) unlink(file);
		free_build(b);
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("RocksDB could not write the changed state to \"%s\": %s", file, msg)));
	}
	free_build(b);
	TEST_POINT("rocksdb_after_sst_written");

	ingest = rocksdb_ingestexternalfileoptions_create();
	rocksdb_ingestexternalfileoptions_set_move_files(ingest, 1);
	files[0] = file;
	mailer_block_signals(&saved);
	rocksdb_ingest_external_file(rs->db, files, 1, ingest, &err);
	mailer_restore_signals(&saved);
	rocksdb_ingestexternalfileoptions_destroy(ingest);
	if (err != NULL)
	{
		/* Not in the database: the name may be the only link. */
		(void) unlink(file);
		check(err, "ingest", file);
	}

	/* In the database now, and only now: an error before keeps them pending. */
	forget_pending(rs);

	/*
	 * RocksDB moved the file (linked it into live/ and unlinked this name);
	 * if it could not unlink the name, it only logs that.  Left, the name
	 * would share the inode of a live/ file, and soon of a committed
	 * checkpoint's.
	 */
	unlink_if_exists(file, ERROR);
}

static char *
rocks_checkpoint(StateBackend *backend, int64 epoch, bool final)
{
	RocksState *rs = (RocksState *) backend;
	char	   *name = psprintf("ckpt-" INT64_FORMAT, epoch);
	char	   *path = psprintf("%s/%s", rs->dir, name);
	char	   *err = NULL;
	rocksdb_checkpoint_t *cp;
	sigset_t	saved;

	/* A leftover of a checkpoint that did not commit would make RocksDB fail. */
	remove_if_exists(path);
	ingest_pending(rs, epoch);
	mailer_block_signals(&saved);
	cp = rocksdb_checkpoint_object_create(rs->db, &err);
	if (err == NULL)
	{
		/*
		 * 0: flush the memtable, which has no WAL behind it.  The ingest
		 * has flushed whatever reads applied to it when the file overlapped
		 * it; what is left (writes of keys outside the file's range) is
		 * flushed here, so the snapshot holds every write of the epoch.
		 */
		rocksdb_checkpoint_create(cp, path, 0, &err);
		rocksdb_checkpoint_object_destroy(cp);
	}
	mailer_restore_signals(&saved);
	check(err, "create checkpoint", path);
	/* Durable before the transaction that references it commits. */
	state_sync_dir(path);
	return name;
}

/* Whether a directory holds a checkpoint. */
static bool
has_checkpoints(const char *dir)
{
	DIR		   *d = AllocateDir(dir);
	struct dirent *de;
	bool		found = false;

	while (!found && (de = ReadDir(d, dir)) != NULL)
		found = checkpoint_epoch(de->d_name) >= 0;
	FreeDir(d);
	return found;
}

/*
 * The retention of committed(), for the subtasks the job no longer runs:
 * their checkpoints of retained epochs stay (a restore to such an epoch,
 * or a rescale from it, reads them), the others go, and so does a
 * directory left without any.  A directory whose lock is held is left
 * alone: no subtask k >= parallelism runs while subtask 0 does, but that
 * is not for this process to assume.
 */
static void
remove_unused_subtask_dirs(RocksState *rs, int64 epoch, int64 keep_from, const int64 *keep, int nkeep)
{
	DIR		   *d = AllocateDir(rs->dir);
	struct dirent *de;

	while ((de = ReadDir(d, rs->dir)) != NULL)
	{
		int			k;
		char		rest;
		char	   *dir;
		int			fd;

		if (sscanf(de->d_name, "subtask-%d%c", &k, &rest) != 1 || k < rs->parallelism)
			continue;
		dir = psprintf("%s/%s", rs->dir, de->d_name);
		fd = BasicOpenFile(psprintf("%s/lock", dir), O_RDWR | PG_BINARY);
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0)
		{
			close(fd);
			continue;
		}
		remove_if_exists(psprintf("%s/live", dir));
		remove_ingest_files(dir, WARNING);
		remove_checkpoints(dir, keep_from, epoch, keep, nkeep);
		if (!has_checkpoints(dir))
			rmtree(dir, true);
		if (fd >= 0)
			close(fd);
	}
	FreeDir(d);
}

/* Subtask 0 also retires the directories of subtasks no longer run. */
static void
rocks_committed(StateBackend *backend, int64 epoch, int64 keep_from, const int64 *keep, int nkeep)
{
	RocksState *rs = (RocksState *) backend;

	remove_checkpoints(rs->dir, keep_from, epoch, keep, nkeep);
	if (rs->subtask == 0)
		remove_unused_subtask_dirs(rs, epoch, keep_from, keep, nkeep);
}

static int64
rocks_size(StateBackend *backend)
{
	RocksState *rs = (RocksState *) backend;
	int64		total = 0;
	const char *props[] = {"rocksdb.total-sst-files-size", "rocksdb.cur-size-all-mem-tables"};

	apply_writes(rs);
	for (int i = 0; i < lengthof(props); i++)
	{
		char	   *v = rocksdb_property_value(rs->db, props[i]);

		if (v)
		{
			total += strtoll(v, NULL, 10);
			rocksdb_free(v);
		}
	}
	return total;
}

static const StateBackendOps rocks_ops = {
	.get = rocks_get,
	.put = rocks_put,
	.delete = rocks_delete,
	.iterate = rocks_iterate,
	.next = rocks_next,
	.iterate_end = rocks_iterate_end,
	.prepare = rocks_prepare,
	.checkpoint = rocks_checkpoint,
	.committed = rocks_committed,
	.size = rocks_size,
};
