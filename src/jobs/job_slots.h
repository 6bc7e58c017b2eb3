/*
 * job_slots.h
 *		Shared memory: one slot per running job, holding what the launcher,
 *		the job's worker and the SQL functions tell each other, and the
 *		counters that the metrics views show.
 *
 * The launcher owns slot allocation.  A worker writes its own slot's
 * counters without locking (single writer, atomics for 64-bit values) and
 * takes the slot's spinlock for the few fields other processes also write.
 *
 * Design: docs/ARCHITECTURE.md, "Shared memory: job slots".
 */
#ifndef JOB_SLOTS_H
#define JOB_SLOTS_H

#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/dsm.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "jobs/job_counters.h"
#include "jobs/job_histogram.h"
#include "jobs/job_state.h"

#define JOB_SLOT_ERROR_LEN		1024
#define JOB_SLOT_MAX_PARTITIONS 256
#define JOB_SLOT_TOPIC_LEN		128

/*
 * What the worker is doing, as seen by everyone else: the states of
 * job_state.h a worker reports itself (job_state_name names them); the
 * launcher records the others in the catalog.
 */
typedef enum JobLiveState
{
	JOB_LIVE_NONE = JOB_STATE_NONE, /* no worker */
	JOB_LIVE_STARTING = JOB_STATE_STARTING, /* launched, restoring its checkpoint */
	JOB_LIVE_RUNNING = JOB_STATE_RUNNING,
	JOB_LIVE_WAITING = JOB_STATE_WAITING,	/* running, but blocked on an outside fault */
	JOB_LIVE_FINISHED = JOB_STATE_FINISHED	/* bounded source done, last checkpoint committed */
} JobLiveState;

/* What a waiting worker waits for (mailer.jobs.waiting_for). */
typedef enum JobWaitFor
{
	JOB_WAIT_NONE = 0,
	JOB_WAIT_BROKER,			/* the Kafka cluster, or a topic's metadata */
	JOB_WAIT_TABLE,				/* a table with the sink table's name */
	JOB_WAIT_LOCK				/* a lock another process holds */
} JobWaitFor;

extern const char *const job_wait_for_names[];

/* Why a worker exited; written just before it exits. */
typedef enum JobExitKind
{
	JOB_EXIT_NONE = 0,			/* still running, or died without saying */
	JOB_EXIT_STOPPED,			/* SIGTERM or stop request: final checkpoint taken */
	JOB_EXIT_FINISHED,			/* bounded source fully consumed and committed */
	JOB_EXIT_ERROR,				/* an error; the launcher retries with backoff */
	JOB_EXIT_FAILED,			/* a failure the launcher must not retry */
	JOB_EXIT_BUSY,				/* another process held the job's lock: did nothing */
	JOB_EXIT_REWIND				/* going back to its checkpoint to take a barrier cut: start again now */
} JobExitKind;

typedef struct PartitionMetrics
{
	char		topic[JOB_SLOT_TOPIC_LEN];
	int32		partition;
	bool		idle;			/* not holding the watermark back */
	bool		ahead;			/* not fetched: its watermark ran ahead (watermark alignment) */
	int64		position;		/* next offset to read */
	int64		end_offset;		/* broker's high watermark, last seen */
	int64		records_in;
	TimestampTz watermark;		/* DT_NOBEGIN until an event is seen */
	int64		offsets_skipped;	/* deleted (retention) before this worker read them */
} PartitionMetrics;

/*
 * A parallel job at barrier cuts (docs/ARCHITECTURE.md, "Barrier cuts"):
 * what subtask 0 decides, in its slot, and how each subtask stands to the
 * cut it holds at, in its own.
 */
typedef struct SlotCuts
{
	/* In the coordinator's slot, written by subtask 0. */
	bool		known;			/* decided is this run's: the subtasks may read */
	int64		decided;		/* the last cut checkpointed at or skipped */
	int64		target;			/* the cut all subtasks align on, 0 none ... */
	uint64		target_digest;	/* ... with these markers (barrier_cut_digest) ... */
	int32		target_partition;	/* ... whose record subtask 0 read at this */
	int64		target_offset;	/* partition and offset of the barrier topic */
	int64		barrier_epoch;	/* the epoch raised last ... */
	int64		barrier_cut;	/* ... is at this cut, 0 at none */
	bool		ended;			/* subtask 0 ended the run without an epoch: the others end quietly */
	/* In every subtask's slot, written by it. */
	int64		judged;			/* the cut it holds at, 0 none ... */
	uint64		judged_digest;	/* ... with these markers */
	int			judgement;		/* how far it is there (cut_align.c) */
} SlotCuts;

/* A running job as the launcher, its worker and the SQL functions share it. */
typedef struct JobSlot
{
	/* Set by the launcher when it assigns the slot; 0 means free. */
	int64		job_id;
	Oid			ext_oid;		/* the installation of mailer the job is of */

	/*
	 * A parallel job's subtasks each have a slot.  Subtask 0, the
	 * coordinator, has the slot the launcher assigned and the SQL functions
	 * find; it claims its subtasks' slots itself (docs/ARCHITECTURE.md,
	 * "Parallel jobs").
	 */
	int			subtask;
	int			parallelism;
	int			coordinator;	/* the index of subtask 0's slot */

	/* In the coordinator's slot: what the subtasks share for the run. */
	dsm_handle	exchange;		/* the queues between subtasks, once made */
	pg_atomic_uint64 barrier_epoch; /* the epoch the subtasks are asked to cut */
	pg_atomic_uint64 committed_epoch;	/* the newest epoch committed by all */
	pg_atomic_uint32 checkpoint_wanted; /* a subtask's buffers are full */
	pg_atomic_uint32 final_wanted;	/* a subtask was told to stop */
	pg_atomic_uint64 final_epoch;	/* the epoch after which all subtasks stop */
	bool		final_finished; /* ... because every subtask's bounded source is read */

	/* In every subtask's slot. */
	pg_atomic_uint64 prepared_epoch;	/* its share of this epoch is prepared */
	uint64		prepared_nonce; /* ... under this part of its name */
	bool		source_finished;	/* its part of a bounded source is all read */

	slock_t		mutex;			/* protects the fields up to 'counters' */
	pid_t		pid;			/* worker's pid, 0 when none */
	Latch	   *latch;			/* worker's latch, to wake it */
	JobLiveState live_state;
	JobWaitFor	waiting_for;	/* while live_state is JOB_LIVE_WAITING */
	JobExitKind exit_kind;
	bool		stop_requested;
	TransactionId stop_xid;		/* the stop_job that requested it, if one did */
	uint32		generation;		/* counts the launcher's starts of a worker in the slot */
	bool		registered;		/* a worker was started and has not exited yet */
	char		error[JOB_SLOT_ERROR_LEN];	/* why it waits or waited, errs or failed */
	TimestampTz error_at;
	SlotCuts	cuts;

	/* wait_job: requests counted up by callers, answered by the worker */
	uint64		wait_requested;
	uint64		wait_answered;

	/* Written by the worker only. */
	pg_atomic_uint64 counters[JC_NUM_COUNTERS];
	double		input_rate;		/* records per second, smoothed */
	int64		last_checkpoint_epoch;
	TimestampTz last_checkpoint_at;
	int64		last_checkpoint_ms;
	TimestampTz watermark;
	int64		state_bytes;
	/* The state backend's share, in ms: -1 for a job without keyed state */
	double		state_checkpoint_ms;	/* of the newest checkpoint */
	double		state_restore_ms;	/* opening the state at the worker's start */
	int64		consumer_lag;	/* -1 when unknown */
	int			npartitions;
	PartitionMetrics partitions[JOB_SLOT_MAX_PARTITIONS];

	/*
	 * Since the worker claimed the slot (a restart starts them again).  In
	 * a parallel job each subtask observes its own checkpoints and records.
	 * produce_to_commit: per record with a Kafka timestamp, the commit time
	 * less the timestamp, per batch (docs/ARCHITECTURE.md, "Shared memory:
	 * job slots").
	 */
	JobHistogram checkpoint_duration;	/* each committed checkpoint's wall time */
	JobHistogram produce_to_commit;

	/*
	 * Rewinds to a barrier cut not counted in a checkpoint yet: a rewind
	 * restarts the worker in the slot, and the next checkpoint counts it.
	 */
	uint32		cut_rewinds_unsaved;

	/* Signalled after every checkpoint and every change of state. */
	ConditionVariable progress_cv;
} JobSlot;

typedef struct MailerShared
{
	LWLock	   *lock;			/* protects slot allocation */
	pid_t		launcher_pid;
	Latch	   *launcher_latch;
	int			nslots;
	JobSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} MailerShared;

extern MailerShared *mailer_shared;

/* Raise an error telling the user to preload the library, if it is not. */
extern void mailer_require_preload(void);

extern Size job_slots_shmem_size(void);
extern void job_slots_shmem_init(void);

/*
 * Slot of a job of the installation of mailer ext_oid (InvalidOid: any),
 * or NULL; caller holds mailer_shared->lock.  Job ids start again at 1
 * when the extension is dropped and created again, while the old
 * installation's workers may still hold slots.
 */
extern JobSlot *job_slots_find(int64 job_id, Oid ext_oid);

/*
 * The job's slot as job_slots_find finds it, returned with
 * mailer_shared->lock held shared and the slot's spinlock held, so that it
 * stays the job's while the caller reads or writes it; job_slot_unlock
 * releases both.  NULL (and no lock held) when the job has no slot.
 */
extern JobSlot *job_slot_lock(int64 job_id, Oid ext_oid);
extern void job_slot_unlock(JobSlot *slot);

/*
 * The next slot after *pos (start with -1) that holds a job of the
 * installation ext_oid, or NULL; caller holds mailer_shared->lock.
 */
extern JobSlot *job_slots_next(Oid ext_oid, int *pos);

/*
 * Give a free slot to the job, with its shared fields reset (the
 * launcher's, under mailer_shared->lock taken here): its index, or -1 when
 * every slot is taken.
 */
extern int	job_slots_claim(int64 job_id, Oid ext_oid);
extern int	job_slots_claim_subtask(int coordinator, int subtask);
extern JobSlot *job_slots_subtask(JobSlot *coordinator, int subtask);

/* Wake the launcher now (from any backend). */
extern void job_slots_wake_launcher(void);

/*
 * Ask the slot's worker to take a final checkpoint and exit (on behalf of
 * the stop_job transaction xid, or of no one: InvalidTransactionId), and
 * wake it.  Caller holds the slot's spinlock.
 */
extern void job_slot_request_stop(JobSlot *slot, TransactionId xid);

/*
 * A SIGTERM came, or stop_job asked the slot's worker to stop (a source
 * that blocks on a broker asks too, between calls).
 */
extern bool job_stop_requested(JobSlot *slot);

/* Set the worker's latch, if it has one now. */
extern void job_slot_wake(JobSlot *slot);

/*
 * A parallel run's epoch counters, and the slot's histograms, set afresh
 * when a worker claims its slot.
 */
extern void job_slot_reset_run(JobSlot *slot);

/* The slot's state changed: wake those waiting on it, and the launcher. */
extern void job_slot_changed(JobSlot *slot);

/* Set a slot's error text and time (under its spinlock). */
extern void job_slot_set_error(JobSlot *slot, const char *msg);

/*
 * A running worker waits for what (why says so; it becomes the job's last
 * error, with the time it first said so), or with JOB_WAIT_NONE goes on:
 * state running again, the error kept as the job's last one.
 */
extern void job_slot_set_waiting(JobSlot *slot, JobWaitFor what, const char *why);

/*
 * The job lock: at most one process at a time runs a job or rewrites its
 * checkpoints.  A worker holds it for its session from before it opens the
 * job's state or source; restore_job and drop_job hold it for their
 * transaction.  An advisory lock on (extension oid, job id) in a class of
 * its own, shown in pg_locks as objsubid JOB_LOCK_CLASS.
 */
#define JOB_LOCK_CLASS			77

extern bool job_lock_try(Oid ext_oid, int64 job_id, bool session);

#endif							/* JOB_SLOTS_H */
