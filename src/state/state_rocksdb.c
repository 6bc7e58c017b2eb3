/*
 * state_rocksdb.c
 *		The RocksDB state backend: one database per job under the data
 *		directory, $PGDATA/mailer/<ext oid>/job_<id>/, with
 *
 *			live/			the database the worker reads and writes
 *			ckpt-<epoch>/	a RocksDB checkpoint per retained epoch
 *
 * Writes skip the WAL: recovery never reads past the last checkpoint.  A
 * checkpoint flushes the memtable and hard-links the SST files, so its
 * cost grows with the data changed since the last one, not with the whole
 * state.  Opening at epoch E rebuilds live/ from ckpt-E (links again, and
 * copies of the few small files RocksDB rewrites) and deletes any newer
 * checkpoint, which no committed transaction references.
 *
 * RocksDB's background threads do not block signals themselves, so they
 * are all started, with every signal blocked, before the database opens.
 */
#include "postgres.h"

#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "common/file_perm.h"
#include "miscadmin.h"
#include "storage/copydir.h"
#include "storage/fd.h"

#include "base/mailer.h"
#include "base/signals.h"
#include "state/state.h"

typedef struct RocksState
{
	StateBackend base;
	char	   *dir;			/* the job's directory */
	char	   *live;			/* dir/live */
	int			lock_fd;		/* dir/lock, flocked while the state is open */
	rocksdb_t  *db;
	rocksdb_options_t *options;
	rocksdb_readoptions_t *read;
	rocksdb_writeoptions_t *write;
	rocksdb_writebatch_t *batch;	/* writes not applied yet: see apply_writes() */
} RocksState;

typedef struct RocksIterator
{
	RocksState *rs;
	rocksdb_iterator_t *it;
	rocksdb_readoptions_t *read;
	char	   *upper;
	bool		started;
} RocksIterator;

static const StateBackendOps rocks_ops;

static rocksdb_env_t *rocks_env = NULL;

/*
 * Puts and deletes gather in a write batch, applied in one write before
 * anything reads: a checkpoint writes many entries in a row, and one
 * write of many costs much less than many writes of one.
 */
static void
apply_writes(RocksState *rs)
{
	char	   *err = NULL;

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

/* Remove checkpoints outside [keep_from, keep_to]. */
static void
remove_checkpoints(const char *dir, int64 keep_from, int64 keep_to)
{
	DIR		   *d = AllocateDir(dir);
	struct dirent *de;

	while ((de = ReadDir(d, dir)) != NULL)
	{
		int64		epoch = checkpoint_epoch(de->d_name);

		if (epoch >= 0 && (epoch < keep_from || epoch > keep_to))
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

StateBackend *
state_rocksdb_open(int64 job_id, int64 epoch, const char *state_ref)
{
	RocksState *rs = palloc0(sizeof(RocksState));
	char	   *err = NULL;
	sigset_t	saved;
	rocksdb_block_based_table_options_t *table;

	rs->base.ops = &rocks_ops;
	rs->base.job_id = job_id;
	rs->dir = state_job_dir(job_id);
	rs->live = psprintf("%s/live", rs->dir);

	if (pg_mkdir_p(pstrdup(rs->dir), pg_dir_create_mode) != 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", rs->dir)));
	state_sync_job_dirs(job_id);

	/*
	 * Besides the job's lock, which every worker takes first: one process
	 * at a time has the directory, whatever the shared memory says.
	 */
	rs->lock_fd = BasicOpenFile(psprintf("%s/lock", rs->dir), O_RDWR | O_CREAT | PG_BINARY);
	if (rs->lock_fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open \"%s/lock\": %m", rs->dir)));
	if (flock(rs->lock_fd, LOCK_EX | LOCK_NB) != 0)
	{
		int			save_errno = errno;

		close(rs->lock_fd);
		errno = save_errno;
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("the RocksDB state of job " INT64_FORMAT " is in use by another process", job_id),
				 errdetail("Locking \"%s/lock\" failed: %m.", rs->dir)));
	}

	/* Back to the committed epoch: what came after it never committed. */
	remove_if_exists(rs->live);
	remove_checkpoints(rs->dir, 0, epoch);
	if (epoch > 0)
	{
		char	   *ckpt = psprintf("%s/%s", rs->dir, state_ref ? state_ref : "");
		struct stat st;

		if (state_ref == NULL || stat(ckpt, &st) != 0 || !S_ISDIR(st.st_mode))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("the RocksDB state of checkpoint " INT64_FORMAT " is missing", epoch),
					 errdetail("Directory \"%s\" under the data directory does not exist.", ckpt),
					 errhint("Restore a retained epoch whose state exists with mailer.restore_job(), or drop and create the job again.")));
		clone_checkpoint(ckpt, rs->live);
	}

	rs->options = rocksdb_options_create();
	rocksdb_options_set_env(rs->options, shared_env());
	rocksdb_options_set_create_if_missing(rs->options, 1);
	rocksdb_options_set_max_background_jobs(rs->options, 2);
	/* Every checkpoint flushes the memtable: it only ever holds one interval's writes. */
	rocksdb_options_set_write_buffer_size(rs->options, 16 * 1024 * 1024);
	rocksdb_options_set_max_write_buffer_number(rs->options, 2);
	rocksdb_options_set_max_open_files(rs->options, 256);
	rocksdb_options_set_keep_log_file_num(rs->options, 2);
	rocksdb_options_set_stats_dump_period_sec(rs->options, 0);
	rocksdb_options_set_compression(rs->options, rocksdb_lz4_compression);
	/* Most lookups are of keys not there yet (a new key, a new window): a bloom filter answers them. */
	rocksdb_options_set_memtable_prefix_bloom_size_ratio(rs->options, 0.1);
	rocksdb_options_set_memtable_whole_key_filtering(rs->options, 1);
	table = rocksdb_block_based_options_create();
	rocksdb_block_based_options_set_block_cache(table, rocksdb_cache_create_lru(16 * 1024 * 1024));
	/* Index and filter blocks stay with each open table: a lookup never rereads them. */
	rocksdb_block_based_options_set_cache_index_and_filter_blocks(table, 0);
	rocksdb_block_based_options_set_filter_policy(table, rocksdb_filterpolicy_create_bloom(10));
	rocksdb_options_set_block_based_table_factory(rs->options, table);

	mailer_block_signals(&saved);
	rs->db = rocksdb_open(rs->options, rs->live, &err);
	mailer_restore_signals(&saved);
	check(err, "open", rs->live);

	rs->read = rocksdb_readoptions_create();
	rs->write = rocksdb_writeoptions_create();
	rocksdb_writeoptions_disable_WAL(rs->write, 1);
	rs->batch = rocksdb_writebatch_create();
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

	rocksdb_writebatch_put(rs->batch, key, klen, val, vlen);
}

static void
rocks_delete(StateBackend *backend, const char *key, int klen)
{
	RocksState *rs = (RocksState *) backend;

	rocksdb_writebatch_delete(rs->batch, key, klen);
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

static char *
rocks_checkpoint(StateBackend *backend, int64 epoch)
{
	RocksState *rs = (RocksState *) backend;
	char	   *name = psprintf("ckpt-" INT64_FORMAT, epoch);
	char	   *path = psprintf("%s/%s", rs->dir, name);
	char	   *err = NULL;
	char		epoch_key[] = "\0epoch";
	rocksdb_checkpoint_t *cp;
	sigset_t	saved;

	/* A leftover of a checkpoint that did not commit would make RocksDB fail. */
	remove_if_exists(path);
	rocksdb_writebatch_put(rs->batch, epoch_key, sizeof(epoch_key) - 1, (char *) &epoch, sizeof(epoch));
	apply_writes(rs);
	mailer_block_signals(&saved);
	cp = rocksdb_checkpoint_object_create(rs->db, &err);
	if (err == NULL)
	{
		/* 0: always flush the memtable, which has no WAL behind it. */
		rocksdb_checkpoint_create(cp, path, 0, &err);
		rocksdb_checkpoint_object_destroy(cp);
	}
	mailer_restore_signals(&saved);
	check(err, "create checkpoint", path);
	/* Durable before the transaction that references it commits. */
	state_sync_dir(path);
	return name;
}

static void
rocks_committed(StateBackend *backend, int64 epoch, int64 keep_from)
{
	RocksState *rs = (RocksState *) backend;

	remove_checkpoints(rs->dir, keep_from, epoch);
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
	.checkpoint = rocks_checkpoint,
	.committed = rocks_committed,
	.size = rocks_size,
};
