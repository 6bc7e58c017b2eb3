-- mailer 0.1.0 -> 0.2.0: upgrade script.
-- Every change to the catalog or the SQL surface in 0.2.0 is made here too,
-- so that ALTER EXTENSION mailer UPDATE gives what a fresh install has.
\echo Use "ALTER EXTENSION mailer UPDATE TO '0.2.0'" to load this file. \quit

-- mailer.jobs.waiting_for: what a waiting job waits for.  The live function
-- returns one more column, so it and the views over it are made again.
DROP VIEW mailer.metrics;
DROP VIEW mailer.jobs;
DROP FUNCTION mailer._live_jobs();

CREATE FUNCTION mailer._live_jobs(
	OUT job_id bigint, OUT live_state text, OUT pid integer, OUT error text,
	OUT error_at timestamptz, OUT counters jsonb, OUT input_rate double precision,
	OUT last_checkpoint_epoch bigint, OUT last_checkpoint_at timestamptz,
	OUT last_checkpoint_ms bigint, OUT watermark timestamptz,
	OUT state_bytes bigint, OUT consumer_lag bigint,
	OUT state_checkpoint_ms double precision, OUT state_restore_ms double precision,
	OUT waiting_for text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'mailer_live_jobs'
LANGUAGE C STRICT VOLATILE;

-- A job's state: the launcher's record, refined by its running worker.  A
-- job set to stopped whose worker has exited is stopped, whether or not the
-- launcher has recorded it yet; pid is that of a live worker only, and of
-- none once the job has finished or failed (its worker is exiting).
-- state and waiting_for (broker, table, lock: while the state is waiting)
-- say what is true now; last_error and last_error_at are the last error
-- and its time, kept once the job has gone on.
CREATE VIEW mailer.jobs AS
SELECT j.job_id, j.name, j.owner, j.spec, j.desired_state,
	   CASE
		 WHEN l.live_state IS NOT NULL AND s.state NOT IN ('stopped', 'finished', 'failed')
		   THEN l.live_state
		 -- stop_job has returned, the launcher has not recorded it yet
		 WHEN j.desired_state = 'stopped' AND l.pid IS NULL
			  AND coalesce(s.state, 'starting') NOT IN ('finished', 'failed')
		   THEN 'stopped'
		 ELSE coalesce(s.state, 'starting')
	   END AS state,
	   CASE WHEN s.state NOT IN ('stopped', 'finished', 'failed') THEN l.waiting_for END AS waiting_for,
	   CASE WHEN s.state IN ('finished', 'failed') THEN NULL ELSE l.pid END AS pid,	-- a live worker's
	   coalesce(s.restarts, 0) AS restarts,
	   CASE
		 WHEN coalesce(l.error, s.last_error) IS NULL OR pg_catalog.pg_has_role(j.owner, 'USAGE')
		   THEN coalesce(l.error, s.last_error)
		 ELSE '<insufficient privilege>'
	   END AS last_error,
	   coalesce(l.error_at, s.last_error_at) AS last_error_at,
	   j.created_at
  FROM mailer.job j
  LEFT JOIN mailer.job_status s USING (job_id)
  LEFT JOIN mailer._live_jobs() l USING (job_id);

CREATE VIEW mailer.metrics AS
SELECT j.name, j.state,
	   coalesce((l.counters->>'records_in')::bigint, (c.counters->>'records_in')::bigint, 0) AS records_in,
	   coalesce((l.counters->>'records_accepted')::bigint, (c.counters->>'records_accepted')::bigint, 0) AS records_accepted,
	   coalesce((l.counters->>'records_out')::bigint, (c.counters->>'records_out')::bigint, 0) AS records_out,
	   coalesce((l.counters->>'records_filtered')::bigint, (c.counters->>'records_filtered')::bigint, 0) AS records_filtered,
	   coalesce((l.counters->>'records_dead_lettered')::bigint, (c.counters->>'records_dead_lettered')::bigint, 0) AS records_dead_lettered,
	   coalesce((l.counters->>'records_skipped')::bigint, (c.counters->>'records_skipped')::bigint, 0) AS records_skipped,
	   coalesce((l.counters->>'records_late')::bigint, (c.counters->>'records_late')::bigint, 0) AS records_late,
	   coalesce(l.input_rate, 0) AS input_rate,
	   l.consumer_lag,
	   coalesce(l.watermark, c.watermark) AS watermark,
	   coalesce(l.last_checkpoint_epoch, c.epoch) AS last_checkpoint_epoch,
	   coalesce(l.last_checkpoint_at, c.committed_at) AS last_checkpoint_at,
	   coalesce(l.last_checkpoint_ms, c.duration_ms::bigint) AS last_checkpoint_ms,
	   l.state_bytes,
	   l.state_checkpoint_ms,
	   l.state_restore_ms
  FROM mailer.jobs j
  LEFT JOIN mailer._live_jobs() l USING (job_id)
  LEFT JOIN LATERAL (SELECT * FROM mailer.checkpoints c
					  WHERE c.job_id = j.job_id ORDER BY epoch DESC LIMIT 1) c ON true;

GRANT SELECT ON mailer.jobs, mailer.metrics TO PUBLIC;
