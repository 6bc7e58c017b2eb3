/*
 * catalog.c
 *		Access to mailer's tables (catalog.h).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "base/mailer.h"
#include "jobs/catalog.h"
#include "plan/spec.h"

void
catalog_enter(CatalogAccess *access)
{
	GetUserIdAndSecContext(&access->saved_user, &access->saved_sec_context);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   access->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	access->guc_nest_level = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
}

void
catalog_leave(CatalogAccess *access)
{
	AtEOXact_GUC(true, access->guc_nest_level);
	SetUserIdAndSecContext(access->saved_user, access->saved_sec_context);
}

int
catalog_exec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls,
			 bool read_only)
{
	CatalogAccess access;
	int			rc;

	catalog_enter(&access);
	rc = SPI_execute_with_args(sql, nargs, types, values, nulls, read_only, 0);
	catalog_leave(&access);
	if (rc < 0)
		elog(ERROR, "mailer catalog statement failed (%s): %s", SPI_result_code_string(rc), sql);
	return rc;
}

Datum
catalog_value(uint64 row, int attnum, bool *isnull)
{
	bool		null;
	Datum		value = SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, attnum, &null);

	if (isnull)
		*isnull = null;
	return value;
}

char *
catalog_text(uint64 row, int attnum)
{
	return SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, attnum);
}

/* The columns of get_job's statement. */
#define Anum_job_row_job_id			1
#define Anum_job_row_name			2
#define Anum_job_row_owner			3
#define Anum_job_row_spec			4
#define Anum_job_row_desired_state	5
#define Anum_job_row_state			6
#define Anum_job_row_search_path	7
#define Anum_job_row_secrets		8

/* The job in the first row of SPI's result, copied into ctx. */
static JobRow *
job_from_tuple(MemoryContext ctx, bool with_secrets)
{
	MemoryContext old = MemoryContextSwitchTo(ctx);
	JobRow	   *job = palloc0(sizeof(JobRow));
	bool		isnull;
	Datum		secrets;

	job->job_id = DatumGetInt64(catalog_value(0, Anum_job_row_job_id, NULL));
	job->name = catalog_text(0, Anum_job_row_name);
	job->owner = DatumGetObjectId(catalog_value(0, Anum_job_row_owner, NULL));
	job->spec = DatumGetJsonbPCopy(catalog_value(0, Anum_job_row_spec, NULL));
	job->desired_state = job_state_from_name(catalog_text(0, Anum_job_row_desired_state));
	job->state = job_state_from_name(catalog_text(0, Anum_job_row_state));
	job->search_path = catalog_text(0, Anum_job_row_search_path);
	secrets = catalog_value(0, Anum_job_row_secrets, &isnull);
	if (with_secrets && !isnull)
		job->spec = spec_unredact(job->spec, DatumGetJsonbP(secrets));
	MemoryContextSwitchTo(old);
	return job;
}

static JobRow *
get_job(const char *where, Oid argtype, Datum arg, bool with_secrets, bool missing_ok,
		const char *what)
{
	MemoryContext ctx = CurrentMemoryContext;
	JobRow	   *job = NULL;
	char	   *sql;

	sql = psprintf("SELECT j.job_id, j.name, j.owner::oid, j.spec, j.desired_state, "
				   "coalesce(st.state, 'starting'), j.search_path, %s "
				   "FROM mailer.job j LEFT JOIN mailer.job_status st USING (job_id) %s "
				   "WHERE %s",
				   with_secrets ? "s.secrets" : "NULL::jsonb",
				   with_secrets ? "LEFT JOIN mailer.job_secret s USING (job_id)" : "",
				   where);
	SPI_connect();
	/* Not read-only: each call sees what committed since (wait_job polls this). */
	catalog_exec(sql, 1, &argtype, &arg, NULL, false);
	if (SPI_processed == 1)
		job = job_from_tuple(ctx, with_secrets);
	SPI_finish();
	if (job == NULL && !missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("job %s does not exist", what),
				 errhint("SELECT name FROM mailer.jobs lists the jobs.")));
	return job;
}

JobRow *
catalog_get_job_by_name(const char *name, bool missing_ok)
{
	return get_job("j.name OPERATOR(pg_catalog.=) $1", TEXTOID, CStringGetTextDatum(name),
				   false, missing_ok, quote_literal_cstr(name));
}

JobRow *
catalog_get_job(int64 job_id, bool with_secrets, bool missing_ok)
{
	return get_job("j.job_id OPERATOR(pg_catalog.=) $1", INT8OID, Int64GetDatum(job_id),
				   with_secrets, missing_ok, psprintf("with id " INT64_FORMAT, job_id));
}

void
catalog_check_owner(JobRow *job, const char *action)
{
	if (has_privs_of_role(GetUserId(), job->owner))
		return;

	/*
	 * mailer.job.owner records no dependency: DROP ROLE succeeds while the
	 * role owns jobs.  Only a superuser can act on them then.
	 */
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(job->owner)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("the owner of job \"%s\" no longer exists", job->name),
				 errdetail("The role with OID %u that created the job was dropped.", job->owner),
				 errhint("A superuser may drop the job with mailer.drop_job('%s'); create it again as another role.",
						 job->name)));
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s job \"%s\"", action, job->name),
			 errdetail("The job is owned by role \"%s\".", GetUserNameFromId(job->owner, false)),
			 errhint("Only the job's owner, a member of the owning role, or a superuser may %s it.", action)));
}

/* The column of catalog_version_matches' statement. */
#define Anum_installed_extversion	1

bool
catalog_version_matches(void)
{
	static bool warned = false;
	char	   *installed;
	bool		matches;

	catalog_exec("SELECT extversion FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) '" MAILER_EXTENSION "'",
				 0, NULL, NULL, NULL, true);
	installed = SPI_processed == 1 ? catalog_text(0, Anum_installed_extversion) : NULL;
	matches = installed != NULL && strcmp(installed, MAILER_VERSION) == 0;
	if (!matches && !warned)
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("mailer jobs wait: the extension's catalog is version %s, the library is %s",
						installed ? installed : "(none)", MAILER_VERSION),
				 errhint("Run ALTER EXTENSION mailer UPDATE in database \"%s\".", get_database_name(MyDatabaseId))));
	warned = !matches;
	return matches;
}

bool
catalog_lock_extension(Oid ext_oid)
{
	LockDatabaseObject(ExtensionRelationId, ext_oid, 0, AccessShareLock);
	return get_extension_oid(MAILER_EXTENSION, true) == ext_oid;
}

Oid
catalog_lock_installed_extension(void)
{
	for (;;)
	{
		Oid			ext_oid = get_extension_oid(MAILER_EXTENSION, true);

		if (!OidIsValid(ext_oid) || catalog_lock_extension(ext_oid))
			return ext_oid;
		/* Dropped (and perhaps created again) while we waited: look again. */
		UnlockDatabaseObject(ExtensionRelationId, ext_oid, 0, AccessShareLock);
	}
}
