/*
 * http_xact.h
 *		The HTTP worker's transactions: read-only, one snapshot, bounded in
 *		time, and an error logged and rolled back rather than raised.
 */
#ifndef HTTP_XACT_H
#define HTTP_XACT_H

/*
 * Run work(arg) in a transaction of its own; false when it raised an
 * error, which is logged (naming what) and rolled back.  The caller's
 * memory context is current again on return, and what work allocated in
 * it survives the transaction.
 */
extern bool http_xact_run(void (*work) (void *arg), void *arg, const char *what);

#endif							/* HTTP_XACT_H */
