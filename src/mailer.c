/*
 * mailer.c
 *		Library entry point: settings, shared memory, the launcher and the
 *		HTTP worker.
 *
 * Everything that must exist before any backend starts happens here, which
 * is why the library has to be in shared_preload_libraries.  No Kafka
 * handle or RocksDB database is ever created in the postmaster: they do not
 * survive fork, so job workers create their own.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/guc.h"

#include "api/api.h"
#include "base/mailer.h"
#include "base/test_point.h"
#include "http/http_worker.h"
#include "jobs/job_history.h"
#include "jobs/job_slots.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

char	   *mailer_database = NULL;
int			mailer_max_jobs = 16;
int			mailer_batch_size = 10000;
int			mailer_max_buffered_rows = 100000;
int			mailer_test_dead_letter_bytes = 0;
int			mailer_restart_backoff_min_ms = 1000;
int			mailer_restart_backoff_max_ms = 60000;
int			mailer_state_cache_entries = 100000;
int			mailer_memory_fold_checkpoints = 10;
int			mailer_termination_grace_ms = 10000;
int			mailer_max_outputs_per_record = 100000;
int			mailer_aggregate_state_limit_kb = 1024;
int			mailer_max_parallelism_per_job = 8;
int			mailer_http_port = 0;
char	   *mailer_http_address = NULL;
char	   *mailer_http_token = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void mailer_shmem_request(void);
static void mailer_shmem_startup(void);
static void define_server_settings(void);
static void define_settings(void);
static void register_worker(const char *function, const char *name);
static bool check_http_address(char **newval, void **extra, GucSource source);

void
_PG_init(void)
{
	if (process_shared_preload_libraries_in_progress)
		define_server_settings();
	define_settings();
	api_install_hooks();

	if (!process_shared_preload_libraries_in_progress)
		return;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = mailer_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = mailer_shmem_startup;

	register_worker("launcher_main", "mailer launcher");
	if (mailer_http_port > 0)
		register_worker("http_worker_main", "mailer http");
}

/*
 * A static background worker of the library: connected to a database,
 * started once recovery is done, and started again 5 s after it exits
 * with an error (the launcher, the HTTP worker).
 */
static void
register_worker(const char *function, const char *name)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, MAILER_EXTENSION, BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, function, BGW_MAXLEN);
	strlcpy(worker.bgw_name, name, BGW_MAXLEN);
	strlcpy(worker.bgw_type, name, BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/*
 * The settings of the launcher and of shared memory (PGC_POSTMASTER): only
 * while preloading, as a library loaded into one session could never use
 * them.
 */
static void
define_server_settings(void)
{
	DefineCustomStringVariable("mailer.database",
							   "Database in which the launcher runs jobs; the extension lives there.",
							   NULL,
							   &mailer_database,
							   "postgres",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.max_jobs",
							"Maximum number of job slots: a running job takes one per subtask.",
							"Each subtask is a background worker: raise max_worker_processes too.",
							&mailer_max_jobs,
							16, 1, 1024,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.http_port",
							"TCP port of the HTTP worker (/metrics, /api/jobs, the dashboard); 0 starts none.",
							NULL,
							&mailer_http_port,
							0, 0, 65535,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("mailer.http_address",
							   "Address the HTTP worker binds: an IPv4 or IPv6 literal, or * for all.",
							   NULL,
							   &mailer_http_address,
							   "127.0.0.1",
							   PGC_POSTMASTER,
							   0,
							   check_http_address, NULL, NULL);

	/* Only superusers may SHOW it: it is a password. */
	DefineCustomStringVariable("mailer.http_token",
							   "Bearer token every HTTP request must carry; empty: none needed.",
							   NULL,
							   &mailer_http_token,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
}

/* A bad address stops the server at start, rather than a worker that fails forever. */
static bool
check_http_address(char **newval, void **extra, GucSource source)
{
	if (http_address_valid(*newval))
		return true;
	GUC_check_errdetail("\"%s\" is neither an IPv4 nor an IPv6 address, nor *.", *newval);
	GUC_check_errhint("Write for example 127.0.0.1, ::1, 0.0.0.0 or *.");
	return false;
}

static void
define_settings(void)
{
	DefineCustomIntVariable("mailer.batch_size",
							"Maximum number of records a job worker reads from its source at once.",
							NULL,
							&mailer_batch_size,
							10000, 1, 1000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.max_buffered_rows",
							"Rows a job may buffer (sink rows, dead letters, changed keys) before it checkpoints early.",
							"Bounds a worker's memory between checkpoints.",
							&mailer_max_buffered_rows,
							100000, 1000, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.restart_backoff_min",
							"Delay before the first restart of a job whose worker failed.",
							"Doubles at each consecutive failure, up to mailer.restart_backoff_max.",
							&mailer_restart_backoff_min_ms,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.restart_backoff_max",
							"Longest delay between restarts of a failing job.",
							NULL,
							&mailer_restart_backoff_max_ms,
							60000, 10, 24 * 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.state_cache_entries",
							"Keyed state entries a job keeps decoded in memory across checkpoints.",
							"Past this many more than its last rebuild kept, or once this many entries or sessions holding memory out of line (a numeric or text datum, a general aggregate's state) went since, the cache is rebuilt after a checkpoint with at most this many of the keys' sessions and the windows that have not ended that the checkpoint's interval changed (so a windowed job holds up to twice this); the state backend has every entry. The entries an interval changes, up to about mailer.max_buffered_rows, come on top until its checkpoint.",
							&mailer_state_cache_entries,
							100000, 0, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.memory_fold_checkpoints",
							"Checkpoints of a memory-backend job per fold of its changed keys into mailer.memory_state.",
							"A checkpoint writes the keys it changed as packed redo rows; one in this many, a worker's first and its final one, and one where the keys changed since the last fold pass half the state's size and 64 MB fold instead: they update those keys' rows in mailer.memory_state and write their undo, and write a key with no row to their redo, at up to two folds. 1 folds at every checkpoint, and never to the redo.",
							&mailer_memory_fold_checkpoints,
							10, 1, 1000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.termination_grace",
							"How long a job worker's work in progress may go on after a SIGTERM.",
							"The batch or checkpoint under way gets this long, then the final checkpoint as long again; past that the work is cancelled and the job resumes from its last checkpoint.",
							&mailer_termination_grace_ms,
							10000, 0, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomStringVariable("mailer.test_pause_at",
							   "For tests only: named points where mailer's processes wait (test_point.h).",
							   "A comma-separated list of point names; empty in production.",
							   &mailer_test_pause_at,
							   "",
							   PGC_SUSET,
							   GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.test_dead_letter_bytes",
							"For tests only: bytes of dead letters per INSERT (16 MB when 0).",
							"A dead letter's key or value is cut to a sixteenth of it; a worker checkpoints early once that much is buffered.",
							&mailer_test_dead_letter_bytes,
							0, 0, 1024 * 1024 * 1024,
							PGC_SUSET,
							GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL | GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.aggregate_state_limit",
							"Largest state one key may keep for one aggregate whose state grows with its input.",
							"array_agg, string_agg, count(DISTINCT ...) and the like: a record that would take a key's state past it fails with SQLSTATE 54000 (per on_error: a dead letter).",
							&mailer_aggregate_state_limit_kb,
							1024, 1, 256 * 1024,	/* a key's entry stays below 1 GB */
							PGC_SIGHUP,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("mailer.max_outputs_per_record",
							"Records the flat_map steps of a job may make from one input record.",
							"An input record that would make more fails with SQLSTATE 54000 (per on_error: a dead letter).",
							&mailer_max_outputs_per_record,
							100000, 1, 100000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	/*
	 * Superuser-set, so that an administrator may allow one role more
	 * (ALTER ROLE ... SET) without raising it for everyone.  Checked when a
	 * job is created or altered only: lowering it leaves existing jobs be.
	 */
	DefineCustomIntVariable("mailer.max_parallelism_per_job",
							"Most subtasks (\"parallelism\") a job may be created or altered with.",
							"Each subtask is a background worker and takes a slot of mailer.max_jobs.",
							&mailer_max_parallelism_per_job,
							8, 1, MAILER_MAX_PARALLELISM,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved(MAILER_EXTENSION);
}

static void
mailer_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(job_slots_shmem_size());
	RequestNamedLWLockTranche(MAILER_EXTENSION, 1);
	if (job_history_enabled())
	{
		RequestAddinShmemSpace(job_history_shmem_size());
		job_history_request_locks();
	}
}

static void
mailer_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	job_slots_shmem_init();
	if (job_history_enabled())
		job_history_shmem_init();
}
