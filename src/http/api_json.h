/*
 * api_json.h
 *		/api/jobs and /api/jobs/<name>: the jobs as JSON, for the dashboard
 *		page and for scripts.
 */
#ifndef API_JSON_H
#define API_JSON_H

#include "lib/stringinfo.h"

/* {"generated_at": ..., "jobs": [JobSummary, ...]}; in a transaction with a snapshot. */
extern void api_json_jobs(StringInfo out);

/* The job's JobDetail; false (out untouched) when there is no such job. */
extern bool api_json_job(const char *name, StringInfo out);

#endif							/* API_JSON_H */
