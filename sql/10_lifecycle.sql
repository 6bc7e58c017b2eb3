-- The SQL API lifecycle on generator jobs: create_job, mailer.jobs,
-- wait_job, stop_job, start_job, drop_job, restore_job.
-- wait_job reports progress in NOTICEs every few seconds, as often as the
-- machine is slow: the expected output has none.
SET client_min_messages = warning;
\set VERBOSITY default

-- Poll a condition (no fixed sleeps): true once the query returns true.
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
		-- pg_stat_activity is read once per transaction unless told otherwise.
		PERFORM pg_stat_clear_snapshot();
	END LOOP;
END $$;

-- What a user sees of a job.
SELECT column_name, data_type FROM information_schema.columns
 WHERE table_schema = 'mailer' AND table_name = 'jobs' ORDER BY ordinal_position;

CREATE TABLE lc_orders (order_id bigint, customer_id text, amount numeric, ts timestamptz);

--
-- A bounded job: created, started, finished.
--
SELECT mailer.create_job('lc_bounded', $${
  "source": {"type": "generator", "events": 500},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint",
                     "customer_id": "value->>'customer_id'",
                     "amount": "(value->>'amount')::numeric",
                     "ts": "(value->>'ts')::timestamptz"}}],
  "sink": {"type": "table", "table": "lc_orders", "mode": "append"}
}$$) AS job_id \gset
-- create_job returns the new job's id.
SELECT job_id = :job_id AS id_returned, name, owner = current_user::regrole AS owned_by_caller,
	   spec->'source' AS source, desired_state, created_at <= now() AS created_before_now
  FROM mailer.jobs WHERE name = 'lc_bounded';
SELECT mailer.wait_job('lc_bounded', '2 minutes');
-- Finished: no worker, no restarts, no error.
SELECT name, desired_state, state, pid, restarts, last_error, last_error_at
  FROM mailer.jobs WHERE name = 'lc_bounded';
SELECT count(*), count(DISTINCT order_id), min(order_id), max(order_id) FROM lc_orders;
-- The last checkpoint is final and its position is the next event number.
SELECT epoch, positions, final FROM mailer.checkpoints WHERE job_id = :job_id ORDER BY epoch;
-- wait_job on a finished job answers at once, as often as asked.
SELECT mailer.wait_job('lc_bounded');
-- Starting a finished job again writes nothing more: it resumes where it ended.
SELECT mailer.start_job('lc_bounded');
SELECT mailer.wait_job('lc_bounded', '2 minutes');
SELECT count(*) FROM lc_orders;
SELECT epoch, positions, final FROM mailer.checkpoints WHERE job_id = :job_id ORDER BY epoch;

-- Names are checked, and unique.
SELECT mailer.create_job('lc_bounded', '{}');
SELECT mailer.create_job('bad name!', '{}');
SELECT mailer.create_job('', '{}');
SELECT mailer.create_job('..', '{}');
-- An invalid spec creates nothing.
SELECT mailer.create_job('lc_invalid', '{"source": {"type": "generator"}}');
SELECT count(*) FROM mailer.jobs WHERE name = 'lc_invalid';

-- Unknown jobs.
SELECT mailer.start_job('lc_nosuch');
SELECT mailer.stop_job('lc_nosuch');
SELECT mailer.drop_job('lc_nosuch');
SELECT mailer.wait_job('lc_nosuch');
SELECT mailer.restore_job('lc_nosuch', 1);

--
-- restore_job: only a stopped job, only a retained epoch.
--
SELECT mailer.restore_job('lc_bounded', 1);
SELECT mailer.stop_job('lc_bounded');
SELECT name, desired_state, state, pid FROM mailer.jobs WHERE name = 'lc_bounded';
SELECT mailer.restore_job('lc_bounded', 7);
SELECT mailer.restore_job('lc_bounded', 1);
-- Later checkpoints are forgotten.
SELECT epoch, positions, final FROM mailer.checkpoints WHERE job_id = :job_id ORDER BY epoch;
SELECT mailer.restore_job('lc_bounded', 2);
SELECT name, desired_state, state FROM mailer.jobs WHERE name = 'lc_bounded';

-- drop_job returns the id and removes the job with its checkpoints.
SELECT mailer.drop_job('lc_bounded') = :job_id AS dropped_id;
SELECT count(*) FROM mailer.jobs WHERE name = 'lc_bounded';
SELECT count(*) FROM mailer.checkpoints WHERE job_id = :job_id;
-- The rows it wrote stay: they are the user's.
SELECT count(*) FROM lc_orders;
TRUNCATE lc_orders;

--
-- An unbounded job, throttled: running until stopped.
--
SELECT mailer.create_job('lc_unbounded', $${
  "source": {"type": "generator", "events": null, "rate": 2000},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}}],
  "sink": {"type": "table", "table": "lc_orders"},
  "checkpoint": {"interval": "100 milliseconds"}
}$$) AS job_id \gset
SELECT state IN ('starting', 'running') AS starting_or_running FROM mailer.jobs WHERE name = 'lc_unbounded';
SELECT mailer.wait_job('lc_unbounded');
-- Some output is committed, and more keeps coming.
SELECT pg_temp.poll('SELECT count(*) >= 100 FROM lc_orders');
SELECT pg_temp.poll($$SELECT count(*) > 0 FROM mailer.checkpoints c JOIN mailer.jobs j USING (job_id)
                      WHERE j.name = 'lc_unbounded' AND (c.positions->>'next')::bigint >= 100$$);
-- Running: one worker, connected as the owner, whose pid mailer.jobs shows.
SELECT j.state, j.desired_state, a.backend_type, a.usename = current_user AS as_owner,
	   a.datname = current_database() AS in_this_database
  FROM mailer.jobs j JOIN pg_stat_activity a ON a.pid = j.pid
 WHERE j.name = 'lc_unbounded';
SELECT pid AS worker_pid FROM mailer.jobs WHERE name = 'lc_unbounded' \gset
-- One subtask: the job's worker, counting what mailer.metrics counts.
SELECT s.subtask, s.state IN ('starting', 'running') AS live, s.pid = :worker_pid AS jobs_pid,
	   s.records_in > 0 AS reads, s.last_error, m.parallelism
  FROM mailer.subtasks s JOIN mailer.metrics m USING (name)
 WHERE s.name = 'lc_unbounded';
-- A wait on a running job with no time left times out.
\set VERBOSITY terse
SELECT mailer.wait_job('lc_unbounded', '0 seconds');
\set VERBOSITY default

-- stop_job: a final checkpoint, then the worker is gone.
SELECT mailer.stop_job('lc_unbounded');
SELECT name, desired_state, state, pid FROM mailer.jobs WHERE name = 'lc_unbounded';
SELECT pg_temp.poll(format('SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = %s)', :worker_pid));
SELECT final FROM mailer.checkpoints WHERE job_id = :job_id ORDER BY epoch DESC LIMIT 1;
-- Exactly the events before the final checkpoint's position are in the table.
SELECT count(*) = c.next AS all_committed, count(DISTINCT order_id) = c.next AS no_duplicates,
	   coalesce(max(order_id), -1) = c.next - 1 AS no_gap
  FROM lc_orders,
	   (SELECT (positions->>'next')::bigint AS next FROM mailer.checkpoints
		 WHERE job_id = :job_id ORDER BY epoch DESC LIMIT 1) c
 GROUP BY c.next;
-- Stopped stays stopped: nothing is written any more.
SELECT count(*) AS rows_when_stopped FROM lc_orders \gset
SELECT mailer.wait_job('lc_unbounded');
SELECT mailer.stop_job('lc_unbounded');
SELECT count(*) = :rows_when_stopped AS unchanged FROM lc_orders;

-- start_job resumes from the last checkpoint.
SELECT mailer.start_job('lc_unbounded');
SELECT mailer.wait_job('lc_unbounded');
SELECT pg_temp.poll(format('SELECT count(*) > %s FROM lc_orders', :rows_when_stopped));
SELECT name, desired_state, state, pid IS NOT NULL AS has_worker, restarts, last_error
  FROM mailer.jobs WHERE name = 'lc_unbounded';
SELECT mailer.stop_job('lc_unbounded');
SELECT count(*) = c.next AS all_committed, count(DISTINCT order_id) = c.next AS no_duplicates,
	   coalesce(max(order_id), -1) = c.next - 1 AS no_gap
  FROM lc_orders,
	   (SELECT (positions->>'next')::bigint AS next FROM mailer.checkpoints
		 WHERE job_id = :job_id ORDER BY epoch DESC LIMIT 1) c
 GROUP BY c.next;

-- Stop and start in quick succession, a few times: each start runs the job.
SELECT mailer.start_job('lc_unbounded');
SELECT mailer.wait_job('lc_unbounded');
SELECT mailer.stop_job('lc_unbounded');
SELECT mailer.start_job('lc_unbounded');
SELECT mailer.wait_job('lc_unbounded');
SELECT mailer.stop_job('lc_unbounded');
SELECT mailer.start_job('lc_unbounded');
SELECT mailer.wait_job('lc_unbounded');
SELECT state, pid IS NOT NULL AS has_worker FROM mailer.jobs WHERE name = 'lc_unbounded';
SELECT pid AS worker_pid FROM mailer.jobs WHERE name = 'lc_unbounded' \gset
-- One subtask: the job's worker, counting what mailer.metrics counts.
SELECT s.subtask, s.state IN ('starting', 'running') AS live, s.pid = :worker_pid AS jobs_pid,
	   s.records_in > 0 AS reads, s.last_error, m.parallelism
  FROM mailer.subtasks s JOIN mailer.metrics m USING (name)
 WHERE s.name = 'lc_unbounded';

-- drop_job stops a running job and removes it.
SELECT mailer.drop_job('lc_unbounded') = :job_id AS dropped_id;
SELECT pg_temp.poll(format('SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = %s)', :worker_pid));
SELECT count(*) FROM mailer.jobs;
SELECT count(*) FROM mailer.checkpoints WHERE job_id = :job_id;
SELECT count(*) = count(DISTINCT order_id) AS no_duplicates FROM lc_orders;

DROP TABLE lc_orders;
