/*
 * exchange.c
 *		The queues between a parallel job's subtasks (exchange.h).
 *
 * The segment holds P * P queue slots; the queue from i to j is slot
 * i * P + j, and the diagonal is unused (a subtask hands its own records
 * to itself directly).  Each subtask attaches as the sender of its row and
 * the receiver of its column.  When a subtask exits, shm_mq marks its
 * queues detached and wakes the others, which then fail: one subtask gone
 * ends the run, and the job restarts from its last committed epoch.
 *
 * A send that finds its queue full never just sleeps: the peer it waits
 * for may itself be waiting to send to this subtask.  It drains its own
 * inputs first (exchange_flush's drain), so a cycle of full queues always
 * moves.
 *
 * Design: docs/ARCHITECTURE.md, "Parallel jobs".
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shm_mq.h"

#include "runtime/exchange.h"

/* Per queue: enough for a few batches' records, small enough for many jobs. */
#define EXCHANGE_QUEUE_BYTES	(512 * 1024)

typedef struct ExchangeHeader
{
	Oid			ext_oid;		/* whose queues: a late subtask of another run must not attach */
	int64		job_id;
	int			parallelism;
	Size		queue_bytes;
} ExchangeHeader;

struct Exchange
{
	dsm_segment *seg;
	int			subtask;
	int			parallelism;
	shm_mq_handle **out;		/* [P], NULL for itself */
	shm_mq_handle **in;			/* [P], NULL for itself */
	StringInfoData *outbox;		/* [P] */
	bool	   *blocked;		/* [P] */
	int			next_input;		/* round robin over the inputs */
};

static shm_mq *
queue_at(dsm_segment *seg, int from, int to, int parallelism)
{
	ExchangeHeader *h = dsm_segment_address(seg);
	char	   *base = (char *) h + MAXALIGN(sizeof(ExchangeHeader));

	return (shm_mq *) (base + (Size) (from * parallelism + to) * h->queue_bytes);
}

dsm_handle
exchange_create(Oid ext_oid, int64 job_id, int parallelism)
{
	Size		size = MAXALIGN(sizeof(ExchangeHeader)) +
		(Size) parallelism * parallelism * EXCHANGE_QUEUE_BYTES;
	dsm_segment *seg = dsm_create(size, 0);
	ExchangeHeader *h = dsm_segment_address(seg);

	/* The segment lives as long as the coordinator, which attaches again below. */
	dsm_pin_mapping(seg);
	h->ext_oid = ext_oid;
	h->job_id = job_id;
	h->parallelism = parallelism;
	h->queue_bytes = EXCHANGE_QUEUE_BYTES;
	for (int i = 0; i < parallelism; i++)
		for (int j = 0; j < parallelism; j++)
			if (i != j)
				shm_mq_create(queue_at(seg, i, j, parallelism), EXCHANGE_QUEUE_BYTES);
	return dsm_segment_handle(seg);
}

Exchange *
exchange_attach(dsm_handle handle, Oid ext_oid, int64 job_id, int subtask, int parallelism)
{
	Exchange   *ex = palloc0(sizeof(Exchange));
	dsm_segment *seg = dsm_find_mapping(handle);
	ExchangeHeader *h;

	if (seg == NULL)
	{
		seg = dsm_attach(handle);
		if (seg == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the job's coordinator has gone before subtask %d started", subtask)));
		dsm_pin_mapping(seg);
	}
	h = dsm_segment_address(seg);
	if (h->ext_oid != ext_oid || h->job_id != job_id || h->parallelism != parallelism)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the queues of subtask %d's run are gone", subtask)));
	ex->seg = seg;
	ex->subtask = subtask;
	ex->parallelism = parallelism;
	ex->out = palloc0(sizeof(shm_mq_handle *) * parallelism);
	ex->in = palloc0(sizeof(shm_mq_handle *) * parallelism);
	ex->outbox = palloc0(sizeof(StringInfoData) * parallelism);
	ex->blocked = palloc0(sizeof(bool) * parallelism);
	for (int k = 0; k < parallelism; k++)
	{
		initStringInfo(&ex->outbox[k]);
		if (k == subtask)
			continue;
		shm_mq_set_sender(queue_at(seg, subtask, k, parallelism), MyProc);
		ex->out[k] = shm_mq_attach(queue_at(seg, subtask, k, parallelism), seg, NULL);
		shm_mq_set_receiver(queue_at(seg, k, subtask, parallelism), MyProc);
		ex->in[k] = shm_mq_attach(queue_at(seg, k, subtask, parallelism), seg, NULL);
	}
	return ex;
}

StringInfo
exchange_outbox(Exchange *ex, int to)
{
	return &ex->outbox[to];
}

static void
gone(int subtask)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("subtask %d of the job has stopped", subtask),
			 errdetail("The job restarts from its last committed checkpoint with all its subtasks.")));
}

void
exchange_flush(Exchange *ex, ExchangeDrain drain, void *arg)
{
	/* Where each outbox's send has reached: shm_mq wants the same bytes again after WOULD_BLOCK. */
	for (;;)
	{
		bool		waiting = false;

		for (int k = 0; k < ex->parallelism; k++)
		{
			StringInfo	box = &ex->outbox[k];
			shm_mq_result r;

			if (k == ex->subtask || box->len == 0)
				continue;
			r = shm_mq_send(ex->out[k], box->len, box->data, true, true);
			if (r == SHM_MQ_DETACHED)
				gone(k);
			if (r == SHM_MQ_WOULD_BLOCK)
			{
				waiting = true;
				continue;
			}
			resetStringInfo(box);
		}
		if (!waiting)
			return;
		if (drain)
			drain(arg);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 100,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

bool
exchange_receive(Exchange *ex, int *from, const char **data, Size *len)
{
	for (int n = 0; n < ex->parallelism; n++)
	{
		int			k = (ex->next_input + n) % ex->parallelism;
		shm_mq_result r;
		void	   *p;

		if (k == ex->subtask || ex->blocked[k])
			continue;
		r = shm_mq_receive(ex->in[k], len, &p, true);
		if (r == SHM_MQ_DETACHED)
			gone(k);
		if (r == SHM_MQ_SUCCESS)
		{
			ex->next_input = (k + 1) % ex->parallelism;
			*from = k;
			*data = p;
			return true;
		}
	}
	return false;
}

void
exchange_block(Exchange *ex, int from)
{
	ex->blocked[from] = true;
}

void
exchange_unblock_all(Exchange *ex)
{
	memset(ex->blocked, 0, sizeof(bool) * ex->parallelism);
}

bool
exchange_is_blocked(Exchange *ex, int from)
{
	return ex->blocked[from];
}
