/*
 * accounting.c
 *		Failed and late records, and the job's counters (accounting.h).
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "base/mailer.h"
#include "operators/watermark.h"
#include "runtime/accounting.h"

void
job_record_failed(Job *job, SourceMessage *msg, const char *stage, const char *error)
{
	const char *topic = job->source->topic_names[msg->topic];

	switch (job->spec->on_error)
	{
		case ON_ERROR_DEAD_LETTER:
			dead_letter_add(job->dead_letters, topic, msg->partition, msg->offset,
							msg->key, msg->key_len, msg->value, msg->value_len, stage, error);
			job->counters[JC_RECORDS_DEAD_LETTERED]++;
			break;
		case ON_ERROR_SKIP:
			job->counters[JC_RECORDS_SKIPPED]++;
			break;
		case ON_ERROR_FAIL:
			job->failing = true;
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("record at %s partition %d offset " INT64_FORMAT " failed at %s: %s",
							topic, msg->partition, msg->offset, stage, error),
					 errhint("The job's on_error is \"fail\". Fix the input or the job, then " MAILER_SCHEMA ".start_job('%s').",
							 job->name)));
	}
}

void
job_record_late(Job *job, SourceMessage *msg, TimestampTz event_time)
{
	job->counters[JC_RECORDS_LATE]++;
	if (job->spec->on_error == ON_ERROR_DEAD_LETTER)
		dead_letter_add(job->dead_letters, job->source->topic_names[msg->topic], msg->partition,
						msg->offset, msg->key, msg->key_len, msg->value, msg->value_len, "late",
						psprintf("event time %s is too late: every window it belongs to closed at watermark %s, allowed lateness included",
								 timestamptz_to_str(event_time),
								 timestamptz_to_str(watermark_current(job->watermarks))));
}

void
job_publish_counters(Job *job)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms = TimestampDifferenceMilliseconds(job->rate_at, now);

	for (int c = 0; c < JC_NUM_COUNTERS; c++)
		pg_atomic_write_u64(&job->slot->counters[c], job->counters[c]);
	if (ms >= 1000)
	{
		double		rate = (job->counters[JC_RECORDS_IN] - job->rate_records) * 1000.0 / ms;

		/* Smoothed over a few seconds, so one slow batch does not show as a stall. */
		job->slot->input_rate = job->slot->input_rate == 0 ? rate :
			0.5 * job->slot->input_rate + 0.5 * rate;
		job->rate_records = job->counters[JC_RECORDS_IN];
		job->rate_at = now;
	}
}
