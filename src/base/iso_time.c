/*
 * iso_time.c
 *		mailer._timestamptz_iso(text): text to timestamptz, fast for the
 *		ISO 8601 forms event times usually take, and exactly timestamptz_in
 *		for everything else.
 *
 * Event times arrive as text ((value->>'ts')::timestamptz), and PostgreSQL's
 * general date parser costs more per record than the rest of a simple job.
 * expr.c puts this function in place of every text-to-timestamptz cast.
 * Only an unambiguous form with an explicit offset is parsed here:
 *		YYYY-MM-DD{T| }HH:MI:SS[.f{1,6}]{Z|{+|-}HH[[:]MI]}
 * anything else (no offset, named zones, 24:00, leap seconds, more than
 * six digits of fraction, out-of-range fields) goes to timestamptz_in,
 * which gives the same answer or the same error as without mailer.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "base/iso_time.h"

PG_FUNCTION_INFO_V1(mailer_timestamptz_iso);

static bool
digits(const char *p, int n, int *value)
{
	int			v = 0;

	for (int i = 0; i < n; i++)
	{
		if (p[i] < '0' || p[i] > '9')
			return false;
		v = v * 10 + (p[i] - '0');
	}
	*value = v;
	return true;
}

/* The ISO form above, or false to let timestamptz_in decide. */
bool
iso_time_parse(const char *s, int len, TimestampTz *result)
{
	const char *p = s;
	const char *end = s + len;
	int			year,
				month,
				day,
				hour,
				minute,
				second,
				frac = 0,
				off_h = 0,
				off_m = 0,
				sign;
	int64		t;

	if (len < 20 || !digits(p, 4, &year) || p[4] != '-' || !digits(p + 5, 2, &month) ||
		p[7] != '-' || !digits(p + 8, 2, &day) || (p[10] != 'T' && p[10] != ' ') ||
		!digits(p + 11, 2, &hour) || p[13] != ':' || !digits(p + 14, 2, &minute) ||
		p[16] != ':' || !digits(p + 17, 2, &second))
		return false;
	p += 19;
	if (p < end && *p == '.')
	{
		int			n = 0;

		p++;
		while (p + n < end && p[n] >= '0' && p[n] <= '9')
			n++;
		if (n == 0 || n > 6 || !digits(p, n, &frac))
			return false;
		for (int i = n; i < 6; i++)
			frac *= 10;
		p += n;
	}
	if (p < end && *p == 'Z')
	{
		sign = 1;
		p++;
	}
	else if (p < end && (*p == '+' || *p == '-'))
	{
		sign = *p == '-' ? -1 : 1;
		p++;
		if (end - p < 2 || !digits(p, 2, &off_h))
			return false;
		p += 2;
		if (p < end && *p == ':' && end - p != 3)
			return false;		/* a colon must be followed by the minutes */
		if (p < end && *p == ':')
			p++;
		if (end - p == 2)
		{
			if (!digits(p, 2, &off_m))
				return false;
			p += 2;
		}
	}
	else
		return false;
	if (p != end)
		return false;

	if (year < 1 || year > 9999 || month < 1 || month > 12 || day < 1 ||
		day > day_tab[isleap(year)][month - 1] || hour > 23 || minute > 59 || second > 59 ||
		off_h > 14 || off_m > 59)
		return false;

	t = (int64) (date2j(year, month, day) - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY +
		((int64) ((hour * 60 + minute) * 60 + second)) * USECS_PER_SEC + frac -
		(int64) sign * (off_h * 3600 + off_m * 60) * USECS_PER_SEC;
	if (!IS_VALID_TIMESTAMP(t))
		return false;
	*result = t;
	return true;
}

Datum
mailer_timestamptz_iso(PG_FUNCTION_ARGS)
{
	text	   *txt = PG_GETARG_TEXT_PP(0);
	TimestampTz t;

	if (iso_time_parse(VARDATA_ANY(txt), VARSIZE_ANY_EXHDR(txt), &t))
		PG_RETURN_TIMESTAMPTZ(t);
	return DirectFunctionCall3(timestamptz_in, CStringGetDatum(text_to_cstring(txt)),
							   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
}
