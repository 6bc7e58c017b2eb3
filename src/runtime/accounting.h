/*
 * accounting.h
 *		What becomes of a record that did not make it through the job (per
 *		the spec's on_error), and the job's counters as its slot shows them.
 */
#ifndef ACCOUNTING_H
#define ACCOUNTING_H

#include "runtime/job.h"

/*
 * A record failed: dead-letter it, count it as skipped, or raise the error
 * that fails the job, per the spec's on_error.
 */
extern void job_record_failed(Job *job, SourceMessage *msg, const char *stage,
							  const char *error);

/* A record too late for any window: a dead letter of stage "late". */
extern void job_record_late(Job *job, SourceMessage *msg, TimestampTz event_time);

/* Publish the job's counters to its slot. */
extern void job_publish_counters(Job *job);

#endif							/* ACCOUNTING_H */
