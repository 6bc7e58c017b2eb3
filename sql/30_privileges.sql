-- Jobs and privileges: the caller owns the job it creates; only the owner
-- (a member of the owning role, or a superuser) controls it; the owner
-- must hold every privilege the job uses, and its worker runs as the owner.
-- wait_job reports progress in NOTICEs every few seconds, as often as the
-- machine is slow: the expected output has none.
SET client_min_messages = warning;
\set VERBOSITY default

CREATE FUNCTION pg_temp.poll(cond text, timeout interval DEFAULT '60 seconds')
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	deadline timestamptz := clock_timestamp() + timeout;
	ok boolean;
BEGIN
	LOOP
		EXECUTE cond INTO ok;
		IF ok THEN
			RETURN true;
		END IF;
		IF clock_timestamp() > deadline THEN
			RAISE EXCEPTION 'timed out waiting for: %', cond;
		END IF;
		PERFORM pg_sleep(0.01);
		PERFORM pg_stat_clear_snapshot();
	END LOOP;
END $$;

CREATE ROLE regress_mailer_owner LOGIN;
CREATE ROLE regress_mailer_other LOGIN;
CREATE ROLE regress_mailer_nologin NOLOGIN;

CREATE TABLE pv_orders (order_id bigint, customer_id text);
CREATE TABLE pv_last (customer_id text PRIMARY KEY, order_id bigint);
CREATE TABLE pv_cols (order_id bigint, customer_id text);
CREATE FUNCTION pv_secret(bigint) RETURNS bigint LANGUAGE sql IMMUTABLE AS 'SELECT $1';
REVOKE EXECUTE ON FUNCTION pv_secret(bigint) FROM PUBLIC;
GRANT SELECT ON pv_orders TO regress_mailer_owner;

-- A role that cannot log in cannot own a job: its worker could not connect.
SET ROLE regress_mailer_nologin;
SELECT mailer.create_job('pv_nologin', '{"source": {"type": "generator"}, "sink": {"type": "table", "table": "pv_orders"}}');
RESET ROLE;

--
-- The owner must hold the privileges the job will use.
--
SET ROLE regress_mailer_owner;
-- no INSERT on the sink table
SELECT mailer.create_job('pv_job', $${"source": {"type": "generator", "events": 10},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}}],
  "sink": {"type": "table", "table": "pv_orders"}}$$);
RESET ROLE;
GRANT INSERT (order_id) ON pv_cols TO regress_mailer_owner;
SET ROLE regress_mailer_owner;
-- INSERT on some columns only: enough for a job that writes those
SELECT mailer.describe_job($${"source": {"type": "generator", "events": 10},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}}],
  "sink": {"type": "table", "table": "pv_cols"}}$$) LIKE '%Sink: append into public.pv_cols%' AS accepted;
-- ... not for one that writes another column
SELECT mailer.describe_job($${"source": {"type": "generator", "events": 10},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
  "sink": {"type": "table", "table": "pv_cols"}}$$);
RESET ROLE;
-- An upsert needs INSERT, SELECT and UPDATE: any two are not enough.
GRANT INSERT, SELECT ON pv_last TO regress_mailer_owner;
SET ROLE regress_mailer_owner;
SELECT mailer.describe_job($${"source": {"type": "generator", "events": 10},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
  "sink": {"type": "table", "table": "pv_last"}}$$);
RESET ROLE;
REVOKE SELECT ON pv_last FROM regress_mailer_owner;
GRANT UPDATE ON pv_last TO regress_mailer_owner;
SET ROLE regress_mailer_owner;
SELECT mailer.describe_job($${"source": {"type": "generator", "events": 10},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
  "sink": {"type": "table", "table": "pv_last"}}$$);
RESET ROLE;
GRANT SELECT ON pv_last TO regress_mailer_owner;
SET ROLE regress_mailer_owner;
SELECT mailer.describe_job($${"source": {"type": "generator", "events": 10},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
  "sink": {"type": "table", "table": "pv_last"}}$$) LIKE '%Sink: upsert into public.pv_last%' AS accepted;
-- EXECUTE on every function an expression calls
SELECT mailer.describe_job($${"source": {"type": "generator", "events": 10},
  "steps": [{"map": {"order_id": "pv_secret((value->>'order_id')::bigint)"}}],
  "sink": {"type": "table", "table": "pv_cols"}}$$);
SELECT mailer.describe_job($${"source": {"type": "generator", "events": 10},
  "steps": [{"filter": "pv_secret(\"offset\") > 0"}, {"map": {"order_id": "\"offset\""}}],
  "sink": {"type": "table", "table": "pv_cols"}}$$);
SELECT count(*) FROM mailer.jobs;
RESET ROLE;

--
-- A job belongs to the role that created it, and runs as that role.
--
GRANT INSERT ON pv_orders TO regress_mailer_owner;
SET ROLE regress_mailer_owner;
SELECT mailer.create_job('pv_job', $${"source": {"type": "generator", "events": null, "rate": 1000},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
  "sink": {"type": "table", "table": "pv_orders"},
  "checkpoint": {"interval": "100 milliseconds"}}$$) > 0 AS created;
SELECT mailer.wait_job('pv_job');
RESET ROLE;
SELECT name, owner, desired_state, state FROM mailer.jobs WHERE name = 'pv_job';
SELECT a.usename, a.backend_type FROM mailer.jobs j JOIN pg_stat_activity a ON a.pid = j.pid
 WHERE j.name = 'pv_job';

-- Another role sees the job, but may not control it.
SET ROLE regress_mailer_other;
SELECT name, owner, state FROM mailer.jobs WHERE name = 'pv_job';
SELECT name, state FROM mailer.metrics WHERE name = 'pv_job';
SELECT mailer.stop_job('pv_job');
SELECT mailer.drop_job('pv_job');
SELECT mailer.start_job('pv_job');
SELECT mailer.restore_job('pv_job', 1);
RESET ROLE;
SELECT name, desired_state, state FROM mailer.jobs WHERE name = 'pv_job';

-- A member of the owning role may.
GRANT regress_mailer_owner TO regress_mailer_other;
SET ROLE regress_mailer_other;
SELECT mailer.stop_job('pv_job');
SELECT mailer.start_job('pv_job');
SELECT mailer.wait_job('pv_job');
RESET ROLE;
REVOKE regress_mailer_owner FROM regress_mailer_other;

-- The worker writes with the owner's privileges: take INSERT away and the
-- job fails and retries; give it back and the job goes on, exactly once.
REVOKE INSERT ON pv_orders FROM regress_mailer_owner;
SELECT pg_temp.poll($$SELECT restarts > 0 AND (last_error LIKE '%permission denied for table pv_orders%'
                                             OR last_error LIKE '%may not insert into column%')
                       FROM mailer.jobs WHERE name = 'pv_job'$$);
GRANT INSERT ON pv_orders TO regress_mailer_owner;
SELECT mailer.wait_job('pv_job', '5 minutes');

-- A superuser may control any job.
SELECT mailer.stop_job('pv_job');
SELECT count(*) = c.next AS all_committed, count(DISTINCT order_id) = c.next AS no_duplicates
  FROM pv_orders,
	   (SELECT (positions->>'next')::bigint AS next FROM mailer.checkpoints k JOIN mailer.jobs j USING (job_id)
		 WHERE j.name = 'pv_job' ORDER BY epoch DESC LIMIT 1) c
 GROUP BY c.next;
SELECT mailer.drop_job('pv_job') > 0 AS dropped;
SELECT count(*) FROM mailer.jobs;

DROP TABLE pv_orders, pv_last, pv_cols;
DROP FUNCTION pv_secret(bigint);
DROP ROLE regress_mailer_owner, regress_mailer_other, regress_mailer_nologin;
