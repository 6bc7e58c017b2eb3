/*
 * catalog.h
 *		Reading and writing mailer's own tables.
 *
 * The tables belong to the extension; SQL functions, the launcher and the
 * workers write them as the bootstrap superuser with a search_path of
 * pg_catalog only, so that nothing a user puts on their search_path can
 * run with those privileges.  (Unqualified names resolve in pg_catalog;
 * unnest with several arrays must be written unqualified.)
 */
#ifndef MAILER_CATALOG_H
#define MAILER_CATALOG_H

#include "executor/spi.h"
#include "utils/jsonb.h"

#include "jobs/job_state.h"

typedef struct CatalogAccess
{
	Oid			saved_user;
	int			saved_sec_context;
	int			guc_nest_level;
} CatalogAccess;

/* Become the catalog's writer; catalog_leave restores the caller. */
extern void catalog_enter(CatalogAccess *access);
extern void catalog_leave(CatalogAccess *access);

/*
 * Run one statement with parameters as the catalog's writer (SPI must be
 * connected).  Returns SPI's result code; rows are in SPI_tuptable.
 */
extern int	catalog_exec(const char *sql, int nargs, Oid *types, Datum *values,
						 const char *nulls, bool read_only);

/*
 * Column attnum of row row of SPI's last result (isnull may be NULL for a
 * column that is never null), and the column as text (NULL when null), in
 * the current memory context.
 */
extern Datum catalog_value(uint64 row, int attnum, bool *isnull);
extern char *catalog_text(uint64 row, int attnum);

/* A job as mailer.job and mailer.job_status record it (one row of each). */
typedef struct JobRow
{
	int64		job_id;
	char	   *name;
	Oid			owner;
	Jsonb	   *spec;			/* with secrets put back when asked for */
	JobState	desired_state;	/* running or stopped */
	JobState	state;			/* job_status.state */
	char	   *search_path;
} JobRow;

/* A job by name or id, or NULL (missing_ok); allocated in the current context. */
extern JobRow *catalog_get_job_by_name(const char *name, bool missing_ok);
extern JobRow *catalog_get_job(int64 job_id, bool with_secrets, bool missing_ok);

/* ERROR unless the current user owns the job (or is a superuser). */
extern void catalog_check_owner(JobRow *job, const char *action);

/*
 * Is the installed extension the version this library was built for?
 * (SPI connected.)  Warns once while it is not: jobs wait for ALTER
 * EXTENSION mailer UPDATE after new binaries are installed.
 */
extern bool catalog_version_matches(void);

/*
 * Lock installation ext_oid of the extension (shared, until the transaction
 * ends); false when it is no longer the one installed.  DROP EXTENSION
 * locks the extension before any of its tables, so a transaction that
 * takes this lock before it reads mailer's tables waits for a drop, or
 * keeps it waiting, instead of deadlocking with it halfway through its
 * tables; and it sees a drop that committed meanwhile.
 */
extern bool catalog_lock_extension(Oid ext_oid);

/* The installed extension, locked so (InvalidOid when there is none). */
extern Oid	catalog_lock_installed_extension(void);

#endif							/* MAILER_CATALOG_H */
