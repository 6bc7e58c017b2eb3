/*
 * spec_error.h
 *		The one way to report an invalid job spec: "invalid job spec at
 *		<JSON path>: <what is wrong>", with an errcode and a hint.
 *
 * Every layer that judges a spec (parsing, compiling expressions and
 * aggregates, the sink table, librdkafka properties) words its errors
 * through these, so that they all read alike and name the JSON path.
 */
#ifndef SPEC_ERROR_H
#define SPEC_ERROR_H

/*
 * ERROR with errcode code; hint may be NULL.  An empty path means the
 * document itself ("$").
 */
extern void spec_error(const char *path, int code, const char *hint, const char *fmt,...)
			pg_attribute_printf(4, 5) pg_attribute_noreturn();

/*
 * The message alone, for an ereport() that adds an errdetail:
 *	ereport(ERROR, (errcode(...), spec_errmsg(path, "..."), errdetail(...), errhint(...)));
 */
extern int	spec_errmsg(const char *path, const char *fmt,...) pg_attribute_printf(2, 3);

#endif							/* SPEC_ERROR_H */
