/*
 * api.h
 *		What the SQL API offers the library's entry point (mailer.c).
 */
#ifndef MAILER_API_H
#define MAILER_API_H

/*
 * Install the log hook that keeps specs (which may hold secrets) out of
 * the server log (spec_logging.c); called by _PG_init.
 */
extern void api_install_hooks(void);

#endif							/* MAILER_API_H */
