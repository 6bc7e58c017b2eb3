/*
 * spec_error.c
 *		Errors naming the JSON path of an invalid job spec (spec_error.h).
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "plan/spec_error.h"

static char *format_what(const char *fmt, va_list args) pg_attribute_printf(1, 0);
static int	path_errmsg(const char *path, const char *what);

int
spec_errmsg(const char *path, const char *fmt,...)
{
	va_list		args;
	char	   *what;

	va_start(args, fmt);
	what = format_what(fmt, args);
	va_end(args);
	return path_errmsg(path, what);
}

void
spec_error(const char *path, int code, const char *hint, const char *fmt,...)
{
	va_list		args;
	char	   *what;

	va_start(args, fmt);
	what = format_what(fmt, args);
	va_end(args);
	ereport(ERROR,
			(errcode(code),
			 path_errmsg(path, what),
			 hint ? errhint("%s", hint) : 0));
	pg_unreachable();
}

static int
path_errmsg(const char *path, const char *what)
{
	return errmsg("invalid job spec at %s: %s", path[0] ? path : "$", what);
}

static char *
format_what(const char *fmt, va_list args)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (;;)
	{
		va_list		copy;
		int			needed;

		va_copy(copy, args);
		needed = appendStringInfoVA(&buf, fmt, copy);
		va_end(copy);
		if (needed == 0)
			return buf.data;
		enlargeStringInfo(&buf, needed);
	}
}
