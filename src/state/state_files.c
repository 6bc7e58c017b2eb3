/*
 * state_files.c
 *		Where jobs keep their files: $PGDATA/mailer/<extension oid>/job_<id>,
 *		and subtask k >= 1 of a parallel job in job_<id>/subtask-<k>.
 *
 * The extension's OID is part of the path so that dropping and creating
 * the extension again (job ids restart at 1) never finds old files.
 */
#include "postgres.h"

#include <dirent.h>
#include <sys/stat.h>

#include "commands/extension.h"
#include "storage/fd.h"

#include "base/mailer.h"
#include "state/state.h"

/* Under the data directory, named for the extension. */
#define STATE_TOP_DIR MAILER_EXTENSION

char *
state_root_dir(void)
{
	return psprintf(STATE_TOP_DIR "/%u", get_extension_oid(MAILER_EXTENSION, false));
}

char *
state_job_dir(int64 job_id)
{
	return psprintf("%s/job_" INT64_FORMAT, state_root_dir(), job_id);
}

/*
 * Subtask 0 keeps the job's directory, where a job of release 0.1.0 (one
 * process) kept its state: such a job needs no move.
 */
char *
state_subtask_dir(int64 job_id, int subtask)
{
	if (subtask == 0)
		return state_job_dir(job_id);
	return psprintf("%s/subtask-%d", state_job_dir(job_id), subtask);
}

void
state_sync_dir(const char *path)
{
	DIR		   *d = AllocateDir(path);
	struct dirent *de;
	char	   *parent = pstrdup(path);
	char	   *slash = strrchr(parent, '/');

	while ((de = ReadDir(d, path)) != NULL)
	{
		char	   *entry;
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		entry = psprintf("%s/%s", path, de->d_name);
		if (stat(entry, &st) == 0 && S_ISREG(st.st_mode))
			fsync_fname(entry, false);
		pfree(entry);
	}
	FreeDir(d);
	fsync_fname(path, true);
	if (slash)
		*slash = '\0';
	else
		strcpy(parent, ".");
	fsync_fname(parent, true);
	pfree(parent);
}

void
state_sync_subtask_dirs(int64 job_id, int subtask)
{
	char	   *root = state_root_dir();

	if (subtask != 0)
		fsync_fname(state_subtask_dir(job_id, subtask), true);
	fsync_fname(state_job_dir(job_id), true);
	fsync_fname(root, true);
	fsync_fname(STATE_TOP_DIR, true);
	fsync_fname(".", true);
}

static bool
is_live(const char *name, int64 *live, int n)
{
	int64		id;
	char		rest;

	if (sscanf(name, "job_" INT64_FORMAT "%c", &id, &rest) != 1)
		return false;
	for (int i = 0; i < n; i++)
		if (live[i] == id)
			return true;
	return false;
}

/* A live job's directory goes with all its subtasks' (they are inside it). */
void
state_remove_orphans(int64 *live_job_ids, int njobs)
{
	Oid			ext = get_extension_oid(MAILER_EXTENSION, true);
	char		current[32];
	DIR		   *top;
	struct dirent *de;

	snprintf(current, sizeof(current), "%u", ext);
	top = AllocateDir(STATE_TOP_DIR);
	if (top == NULL)
		return;					/* no job has run yet */
	while ((de = ReadDir(top, STATE_TOP_DIR)) != NULL)
	{
		char	   *path;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		path = psprintf(STATE_TOP_DIR "/%s", de->d_name);
		if (!OidIsValid(ext) || strcmp(de->d_name, current) != 0)
		{
			/* files of an earlier installation of the extension */
			rmtree(path, true);
			continue;
		}
		{
			DIR		   *jobs = AllocateDir(path);
			struct dirent *je;

			while ((je = ReadDir(jobs, path)) != NULL)
			{
				if (strcmp(je->d_name, ".") == 0 || strcmp(je->d_name, "..") == 0)
					continue;
				if (!is_live(je->d_name, live_job_ids, njobs))
					rmtree(psprintf("%s/%s", path, je->d_name), true);
			}
			FreeDir(jobs);
		}
	}
	FreeDir(top);
}
