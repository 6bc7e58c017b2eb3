-- The benchmark's database objects: a fresh mailer extension, the sink
-- tables of every benchmark job, and a log of every checkpoint.  Run by
-- test/bench/run.sh with psql before the first job; idempotent.
SET client_min_messages = warning;

-- A fresh extension: no jobs, state or checkpoints left from earlier runs.
DROP EXTENSION IF EXISTS mailer CASCADE;
CREATE EXTENSION mailer;

CREATE SCHEMA IF NOT EXISTS bench;

-- mailer.checkpoints keeps only the newest checkpoint.retain rows; this
-- trigger keeps every checkpoint's duration and counters for the report.
-- It runs inside the checkpoint's own transaction, after duration_ms was
-- measured, and costs one small insert per checkpoint.
DROP TABLE IF EXISTS bench.checkpoint_log;
CREATE TABLE bench.checkpoint_log (
	job_id			bigint,
	epoch			bigint,
	duration_ms		double precision,
	committed_at	timestamptz,
	records_in		bigint
);
CREATE OR REPLACE FUNCTION bench.log_checkpoint() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO bench.checkpoint_log
	VALUES (NEW.job_id, NEW.epoch, NEW.duration_ms, NEW.committed_at,
			(NEW.counters->>'records_in')::bigint);
	RETURN NULL;
END
$$;
CREATE TRIGGER bench_checkpoint_log AFTER INSERT ON mailer.checkpoints
	FOR EACH ROW EXECUTE FUNCTION bench.log_checkpoint();

-- Sinks.  Ordinary (logged) tables, as a user's would be.
DROP TABLE IF EXISTS bench.passthrough, bench.totals, bench.windows, bench.latency;

-- Passthrough: the filter rejects every order, so nothing reaches it.
CREATE TABLE bench.passthrough (key text, value jsonb);

-- Keyed running totals: one row per customer, upserted at each checkpoint.
CREATE TABLE bench.totals (
	customer_id		text PRIMARY KEY,
	orders			bigint,
	total			numeric
);

-- Tumbling, sliding and session windows: one row per customer and window.
CREATE TABLE bench.windows (
	customer_id		text,
	window_start	timestamptz,
	window_end		timestamptz,
	orders			bigint,
	total			numeric,
	PRIMARY KEY (customer_id, window_start)
);

-- Latency (and the append throughput job): every order is a row; seen is
-- the time the checkpoint's insert wrote it, just before its COMMIT.
CREATE TABLE bench.latency (
	order_id		bigint,
	sent			bigint,			-- the producer's send time, µs since 1970
	seen			timestamptz DEFAULT clock_timestamp()
);
