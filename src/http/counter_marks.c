/*
 * counter_marks.c
 *		Counters in /metrics only go up (counter_marks.h).
 *
 * mailer.metrics shows a running worker's live counters, which include the
 * records it read since its last checkpoint.  A worker that fails goes back
 * to that checkpoint, and so do its counters, before it reads those records
 * again.  Prometheus takes any decrease for a reset and would count the
 * whole value again (a false spike in rate() and increase()).  So each
 * job's counters are said as the greatest value said so far: a worker that
 * resumes shows no progress until it passes what was already shown, which
 * is what happened to the records.  A restore_job to an older epoch is
 * shown the same way.  A job dropped and created again under the same name
 * has a new id, and starts from its own counters: a true reset; so do
 * the jobs of the extension dropped and created again, whose ids start
 * again at 1.  The marks live as long as the HTTP worker: one that
 * restarts says the views' values again, which a rewound worker may show
 * lower once.
 */
#include "postgres.h"

#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "http/counter_marks.h"

typedef struct CounterMarks
{
	int64		job_id;			/* the key */
	bool		seen;			/* named by the current scrape */
	int64		values[COUNTER_MARKS_PER_JOB];
} CounterMarks;

static HTAB *marks = NULL;
static Oid	marks_ext_oid = InvalidOid;	/* the installation whose jobs they are */

void
counter_marks_begin(Oid ext_oid)
{
	HASH_SEQ_STATUS seq;
	CounterMarks *m;

	if (marks != NULL && ext_oid != marks_ext_oid)
	{
		hash_destroy(marks);
		marks = NULL;
	}
	marks_ext_oid = ext_oid;
	if (marks == NULL)
	{
		HASHCTL		ctl = {.keysize = sizeof(int64),.entrysize = sizeof(CounterMarks),
		.hcxt = TopMemoryContext};

		marks = hash_create("mailer http counter marks", 64, &ctl,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	hash_seq_init(&seq, marks);
	while ((m = hash_seq_search(&seq)) != NULL)
		m->seen = false;
}

int64
counter_marks_apply(int64 job_id, int i, int64 value)
{
	bool		found;
	CounterMarks *m = hash_search(marks, &job_id, HASH_ENTER, &found);

	Assert(i >= 0 && i < COUNTER_MARKS_PER_JOB);
	if (!found)
		memset(m->values, 0, sizeof(m->values));
	m->seen = true;
	m->values[i] = Max(m->values[i], value);
	return m->values[i];
}

void
counter_marks_end(void)
{
	HASH_SEQ_STATUS seq;
	CounterMarks *m;

	hash_seq_init(&seq, marks);
	while ((m = hash_seq_search(&seq)) != NULL)
		if (!m->seen)
			hash_search(marks, &m->job_id, HASH_REMOVE, NULL);
}
