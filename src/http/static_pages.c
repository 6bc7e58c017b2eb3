/*
 * static_pages.c
 *		The dashboard's page, script and style: installed by the Makefile
 *		into <sharedir>/extension/, read when the HTTP worker starts, and
 *		served from memory.  A file missing there is logged once, and its
 *		path answers 500: the API and /metrics still work.
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "http/static_pages.h"

/* The HTML's policy (no inline script) lets the page load these two only. */
static StaticPage pages[] = {
	{"/", "mailer-dashboard.html", "text/html; charset=utf-8"},
	{"/index.html", "mailer-dashboard.html", "text/html; charset=utf-8"},
	{"/mailer-dashboard.js", "mailer-dashboard.js", "text/javascript; charset=utf-8"},
	{"/mailer-dashboard.css", "mailer-dashboard.css", "text/css; charset=utf-8"},
};

static void
load_page(StaticPage *page)
{
	char		share[MAXPGPATH];
	char		path[MAXPGPATH];
	FILE	   *f;
	StringInfoData buf;
	char		chunk[8192];
	size_t		n;

	get_share_path(my_exec_path, share);
	snprintf(path, sizeof(path), "%s/extension/%s", share, page->file);
	f = fopen(path, "rb");
	if (f == NULL)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("mailer http worker could not read the dashboard file \"%s\": %m", path),
				 errhint("Install mailer with \"make install\": it copies the dashboard's files there.")));
		return;
	}
	initStringInfo(&buf);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		appendBinaryStringInfo(&buf, chunk, (int) n);
	if (ferror(f))
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("mailer http worker could not read the dashboard file \"%s\": %m", path)));
	else
	{
		page->body = buf.data;
		page->length = buf.len;
	}
	fclose(f);
}

void
static_pages_load(void)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	for (int i = 0; i < lengthof(pages); i++)
	{
		int			j;

		/* The same file twice ("/" and "/index.html"): read (or miss) it once. */
		for (j = 0; j < i; j++)
			if (strcmp(pages[j].file, pages[i].file) == 0)
				break;
		if (j < i)
		{
			pages[i].body = pages[j].body;
			pages[i].length = pages[j].length;
		}
		else
			load_page(&pages[i]);
	}
	MemoryContextSwitchTo(old);
}

const StaticPage *
static_pages_find(const char *path)
{
	for (int i = 0; i < lengthof(pages); i++)
		if (strcmp(pages[i].path, path) == 0)
			return &pages[i];
	return NULL;
}
