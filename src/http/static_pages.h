/*
 * static_pages.h
 *		The dashboard's files, read once from the installation's share
 *		directory and served from memory.
 */
#ifndef STATIC_PAGES_H
#define STATIC_PAGES_H

typedef struct StaticPage
{
	const char *path;			/* the URL path it answers */
	const char *file;			/* under <sharedir>/extension/ */
	const char *content_type;
	char	   *body;			/* NULL: the file could not be read */
	size_t		length;
} StaticPage;

/* Read the files (at the worker's start); a missing one is logged. */
extern void static_pages_load(void);

/* The page the path names, or NULL. */
extern const StaticPage *static_pages_find(const char *path);

#endif							/* STATIC_PAGES_H */
