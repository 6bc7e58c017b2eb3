/*
 * serial.c
 *		Datums as bytes for keyed state, and the comparison of the layouts
 *		that say what the bytes of a job's state mean (serial.h).
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "state/serial.h"

static char *layout_field(const char *line, int field);

void
serial_corrupted(int len, int pos, int n)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("mailer keyed state value is corrupt"),
			 errdetail("A read of %d bytes at offset %d of a value of %d bytes does not fit it.",
					   n, pos, len),
			 errhint("Restore the job to an earlier checkpoint with mailer.restore_job, or drop and create the job.")));
}

void
serial_put_datum(StringInfo buf, Datum d, int16 typlen, bool typbyval)
{
	if (typbyval)
		serial_put(buf, &d, sizeof(Datum));
	else if (typlen > 0)
		serial_put(buf, DatumGetPointer(d), typlen);
	else if (typlen != -1)
	{
		/* plan.c refuses such types: a cstring read as a varlena crashes the server */
		elog(ERROR, "mailer cannot store a value of type length %d", typlen);
	}
	else
	{
		struct varlena *v = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(d));
		int32		len = VARSIZE_ANY_EXHDR(v);

		serial_put(buf, &len, sizeof(int32));
		serial_put(buf, VARDATA_ANY(v), len);
	}
}

Datum
serial_get_datum(const char *data, int len, int *pos, int16 typlen, bool typbyval,
				 MemoryContext ctx)
{
	Datum		d;

	if (typbyval)
		serial_get(data, len, pos, &d, sizeof(Datum));
	else if (typlen > 0)
	{
		char	   *p;

		if (typlen > len - *pos)
			serial_corrupted(len, *pos, typlen);
		p = MemoryContextAlloc(ctx, typlen);
		serial_get(data, len, pos, p, typlen);
		d = PointerGetDatum(p);
	}
	else if (typlen != -1)
		elog(ERROR, "mailer cannot read back a value of type length %d", typlen);
	else
	{
		int32		vlen;
		struct varlena *v;

		serial_get(data, len, pos, &vlen, sizeof(int32));
		/* Checked before allocating: a wrong length must not become a huge palloc. */
		if (vlen < 0 || vlen > len - *pos)
			serial_corrupted(len, *pos, vlen);
		v = MemoryContextAlloc(ctx, vlen + VARHDRSZ);
		SET_VARSIZE(v, vlen + VARHDRSZ);
		serial_get(data, len, pos, VARDATA(v), vlen);
		d = PointerGetDatum(v);
	}
	return d;
}

void
serial_check_state_layout(const char *job_name, const char *stored, const char *now)
{
	char	   *detail = NULL;
	const char *s = stored;
	const char *n = now;

	if (strcmp(stored, now) == 0)
		return;
	while (*s && *n && detail == NULL)
	{
		char	   *sline = pnstrdup(s, strcspn(s, "\n"));
		char	   *nline = pnstrdup(n, strcspn(n, "\n"));

		if (strcmp(layout_field(sline, 0), layout_field(nline, 0)) != 0)
		{
			if (strcmp(layout_field(sline, 2), layout_field(nline, 2)) != 0)
				detail = psprintf("The %s was of type %s and is now of type %s.", layout_field(nline, 1),
								  layout_field(sline, 2), layout_field(nline, 2));
			else
				detail = psprintf("The %s is now computed in another way.", layout_field(nline, 1));
		}
		s += strlen(sline) + (s[strlen(sline)] == '\n');
		n += strlen(nline) + (n[strlen(nline)] == '\n');
	}
	/* Equal line by line: a difference elsewhere (or none, and nothing to say) */
	if (detail == NULL && (*s || *n))
		detail = "The job's key fields and aggregates are not those its state was written with.";
	if (detail == NULL)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("the state of job \"%s\" was written with other types", job_name),
			 errdetail("%s", detail),
			 errhint("Restore the function's old signature (or the type the expression had), or drop and create the job.")));
}

/* The field-th tab-separated part of a layout line ("" when missing). */
static char *
layout_field(const char *line, int field)
{
	const char *p = line;

	for (int i = 0; i < field && p; i++)
	{
		p = strchr(p, '\t');
		if (p)
			p++;
	}
	return p ? pnstrdup(p, strcspn(p, "\t")) : "";
}
