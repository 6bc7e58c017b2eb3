-- The extension installs into the mailer schema; the launcher runs.
SET client_min_messages = warning;
-- Jobs an earlier run left: drop_job waits for their workers to exit, so none
-- outlives the catalog and writes into the next one.
DO $$ BEGIN
	IF EXISTS (SELECT FROM pg_extension WHERE extname = 'mailer') THEN
		PERFORM mailer.drop_job(name) FROM mailer.jobs;
	END IF;
END $$;
DROP EXTENSION IF EXISTS mailer CASCADE;
RESET client_min_messages;
CREATE EXTENSION mailer;

SELECT extname, extversion, nspname
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE extname = 'mailer';

-- One launcher, connected to mailer.database (this database).
SELECT count(*) AS launchers, bool_and(datname = current_database()) AS in_this_database
  FROM pg_stat_activity WHERE backend_type = 'mailer launcher';

SELECT name, setting, context FROM pg_settings
 WHERE name IN ('mailer.database', 'mailer.max_jobs') ORDER BY name;

-- Unknown settings under the reserved prefix are refused.
SET mailer.no_such_setting = 1;
