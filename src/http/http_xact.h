/*
 * http_xact.h
 *		The HTTP worker's transactions: read-only, one snapshot, bounded in
 *		time, and an error logged and rolled back rather than raised.
 */
#ifndef HTTP_XACT_H
#define HTTP_XACT_H

#include "executor/spi.h"

/*
 * Run work(arg) in a transaction of its own; false when it raised an
 * error, which is logged (naming what) and rolled back.  The caller's
 * memory context is current again on return, and what work allocated in
 * it survives the transaction.
 */
extern bool http_xact_run(void (*work) (void *arg), void *arg, const char *what);

/*
 * A statement the worker runs again and again: planned once and kept (the
 * views' plans cost more than running them), planned again by PostgreSQL
 * when what it reads changes.
 */
typedef struct HttpQuery
{
	const char *sql;
	int			nargs;			/* 0 or 1: text */
	SPIPlanPtr	plan;			/* NULL until first run */
} HttpQuery;

/* Run the query (SPI connected, read-only); its rows are SPI_tuptable's. */
extern void http_query_run(HttpQuery *query, Datum *args);

#endif							/* HTTP_XACT_H */
