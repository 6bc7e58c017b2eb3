/*
 * http_worker.h
 *		The HTTP background worker ("mailer http"): /metrics, /api/jobs and
 *		the dashboard, served by libmicrohttpd in the worker's own thread.
 *
 * Design: docs/ARCHITECTURE.md, "The HTTP worker".
 */
#ifndef HTTP_WORKER_H
#define HTTP_WORKER_H

#include "fmgr.h"

/* Whether mailer.http_address may be bound: an IPv4 or IPv6 literal, or "*". */
extern bool http_address_valid(const char *address);

/* _PG_init registers it while preloading, when mailer.http_port > 0: "mailer http". */
extern PGDLLEXPORT void http_worker_main(Datum main_arg);

#endif							/* HTTP_WORKER_H */
