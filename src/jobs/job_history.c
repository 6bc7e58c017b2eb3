/*
 * job_history.c
 *		STUB of the one-second history ring: keeps nothing.  Helper "instr"
 *		writes the real file; the lead replaces this one with it at merge.
 */
#include "postgres.h"

#include "jobs/job_history.h"

Size
job_history_shmem_size(void)
{
	return 0;
}

void
job_history_shmem_init(void)
{
}

void
job_history_sample(TimestampTz now)
{
}

int
job_history_read(Oid ext_oid, int64 job_id, JobHistorySample **out)
{
	*out = NULL;
	return 0;
}

void
job_history_note_restarts(Oid ext_oid, int64 job_id, int32 restarts)
{
}
