-- Records that fail: a record whose step, event time or sink row raises an
-- error becomes a dead letter (its source position, key, value, stage and
-- error), written with the checkpoint; the others go on.  on_error skip
-- counts them, fail stops the job.  And mailer.metrics counts it all.
-- wait_job reports progress in NOTICEs every few seconds, as often as the
-- machine is slow: the expected output has none.
SET client_min_messages = warning;
\set VERBOSITY default
SET timezone = 'UTC';
SET datestyle = 'ISO, YMD';

SELECT column_name, data_type FROM information_schema.columns
 WHERE table_schema = 'mailer' AND table_name = 'dead_letters' ORDER BY ordinal_position;
SELECT column_name, data_type FROM information_schema.columns
 WHERE table_schema = 'mailer' AND table_name = 'metrics' ORDER BY ordinal_position;

-- Every event as the generator makes it, to compare dead letters with.
CREATE TABLE dl_events (key text, value jsonb, "offset" bigint);
SELECT mailer.create_job('dl_events', '{"source": {"type": "generator", "events": 20}, "sink": {"type": "table", "table": "dl_events"}}') > 0 AS created;

-- A map that divides by zero for event 5.
CREATE TABLE dl_out (order_id bigint, r numeric);
SELECT mailer.create_job('dl_map', $${"source": {"type": "generator", "events": 20},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}}, {"map": {"r": "1 / (order_id - 5)"}}],
  "sink": {"type": "table", "table": "dl_out"}}$$) AS map_job \gset
SELECT mailer.wait_job('dl_events'), mailer.wait_job('dl_map');
SELECT count(*), count(*) FILTER (WHERE order_id = 5) AS event_5, sum(order_id) = 190 - 5 AS others_all_there FROM dl_out;
SELECT topic, partition, "offset", stage, error, epoch >= 1 AS with_a_checkpoint FROM mailer.dead_letters WHERE job_id = :map_job;
-- The dead letter holds the message as it came: its key and value.
SELECT convert_from(d.key, 'UTF8') = e.key AS same_key, convert_from(d.value, 'UTF8')::jsonb = e.value AS same_value
  FROM mailer.dead_letters d JOIN dl_events e USING ("offset") WHERE d.job_id = :map_job;
SELECT name, state, records_in, records_accepted, records_filtered, records_dead_lettered, records_skipped, records_out
  FROM mailer.metrics WHERE name = 'dl_map';

-- Every stage: event time, filter, flat_map, and casts to the sink's columns.
CREATE TABLE dl_stages (order_id bigint, small smallint);
SELECT mailer.create_job('dl_stages', $${"source": {"type": "generator", "events": 20},
  "event_time": "CASE WHEN (value->>'order_id')::int <> 2 THEN (value->>'ts')::timestamptz END",
  "steps": [{"filter": "(value->>'order_id')::int / ((value->>'order_id')::int - 4) IS NOT NULL"},
            {"flat_map": "jsonb_array_elements(CASE WHEN (value->>'order_id')::int = 7 THEN value ELSE jsonb_build_array(value) END)"},
            {"map": {"order_id": "(value->>'order_id')::bigint", "small": "(value->>'order_id')::int * 3000"}}],
  "sink": {"type": "table", "table": "dl_stages"}}$$) AS job_id \gset
SELECT mailer.wait_job('dl_stages');
SELECT "offset", stage, error, convert_from(value, 'UTF8')::jsonb->'order_id' AS order_id
  FROM mailer.dead_letters WHERE job_id = :job_id ORDER BY "offset";
SELECT array_agg(order_id ORDER BY order_id) FROM dl_stages;
SELECT records_in, records_accepted, records_dead_lettered, records_out FROM mailer.metrics WHERE name = 'dl_stages';

-- Rows the table refuses: alone among their chunk, they become dead letters
-- holding the row; every other row is written.
CREATE TABLE dl_checked (order_id bigint CHECK (order_id % 7 <> 3), customer_id text);
SELECT mailer.create_job('dl_checked', $${"source": {"type": "generator", "events": 1000},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
  "sink": {"type": "table", "table": "dl_checked"}}$$) AS job_id \gset
SELECT mailer.wait_job('dl_checked');
SELECT count(*), count(*) FILTER (WHERE order_id % 7 = 3) AS refused_rows_written FROM dl_checked;
SELECT count(*), bool_and("offset" % 7 = 3) AS only_refused, bool_and(stage = 'sink') AS at_sink,
	   min(error) AS error, count(DISTINCT error) AS errors, bool_and(key IS NULL) AS no_key,
	   bool_and((convert_from(value, 'UTF8')::jsonb->>'order_id')::bigint = "offset") AS row_in_value
  FROM mailer.dead_letters WHERE job_id = :job_id;
SELECT convert_from(value, 'UTF8')::jsonb - 'customer_id' AS row FROM mailer.dead_letters
 WHERE job_id = :job_id ORDER BY "offset" LIMIT 2;
-- Appending duplicates to a primary key: the first of each key is written.
CREATE TABLE dl_first (customer_id text PRIMARY KEY, order_id bigint);
SELECT mailer.create_job('dl_first', $${"source": {"type": "generator", "events": 1000, "keys": 10},
  "steps": [{"map": {"customer_id": "key", "order_id": "(value->>'order_id')::bigint"}}],
  "sink": {"type": "table", "table": "dl_first", "mode": "append"}}$$) AS job_id \gset
SELECT mailer.wait_job('dl_first');
SELECT count(*) FROM dl_first;
SELECT count(*) AS dead_letters, min(error) AS error FROM mailer.dead_letters WHERE job_id = :job_id;
CREATE TABLE dl_all (customer_id text, order_id bigint);
SELECT mailer.create_job('dl_all', $${"source": {"type": "generator", "events": 1000, "keys": 10},
  "steps": [{"map": {"customer_id": "key", "order_id": "(value->>'order_id')::bigint"}}],
  "sink": {"type": "table", "table": "dl_all"}}$$) > 0 AS created;
SELECT mailer.wait_job('dl_all');
SELECT count(*) AS not_first FROM (SELECT * FROM dl_first EXCEPT
	SELECT customer_id, min(order_id) FROM dl_all GROUP BY customer_id) d;
SELECT records_in, records_accepted, records_dead_lettered, records_out,
	   records_out + records_dead_lettered = records_in AS adds_up
  FROM mailer.metrics WHERE name = 'dl_first';

-- on_error skip: counted, not kept.
CREATE TABLE dl_skip (order_id bigint, r numeric);
SELECT mailer.create_job('dl_skip', $${"source": {"type": "generator", "events": 20}, "on_error": "skip",
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}}, {"map": {"r": "1 / (order_id - 5)"}}],
  "sink": {"type": "table", "table": "dl_skip"}}$$) AS job_id \gset
SELECT mailer.wait_job('dl_skip');
SELECT count(*) FROM dl_skip;
SELECT count(*) AS dead_letters FROM mailer.dead_letters WHERE job_id = :job_id;
SELECT records_in, records_accepted, records_dead_lettered, records_skipped, records_out FROM mailer.metrics WHERE name = 'dl_skip';

-- on_error fail: the job fails at the bad record and writes nothing of
-- its batch; it says why; starting it again fails again.
CREATE TABLE dl_fail (order_id bigint, r numeric);
SELECT mailer.create_job('dl_fail', $${"source": {"type": "generator", "events": 20}, "on_error": "fail",
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}}, {"map": {"r": "1 / (order_id - 5)"}}],
  "sink": {"type": "table", "table": "dl_fail"}}$$) AS job_id \gset
SELECT mailer.wait_job('dl_fail');
SELECT name, desired_state, state, pid, restarts, last_error, last_error_at IS NOT NULL AS error_time
  FROM mailer.jobs WHERE name = 'dl_fail';
SELECT count(*) FROM dl_fail;
SELECT count(*) AS dead_letters FROM mailer.dead_letters WHERE job_id = :job_id;
SELECT last_error_at AS failed_at FROM mailer.jobs WHERE name = 'dl_fail' \gset
SELECT mailer.start_job('dl_fail');
SELECT mailer.wait_job('dl_fail');
SELECT state, restarts, last_error, last_error_at > :'failed_at' AS failed_again FROM mailer.jobs WHERE name = 'dl_fail';

-- drop_job takes the job's dead letters with it.
SELECT mailer.drop_job('dl_map') = :map_job AS dropped;
SELECT count(*) FROM mailer.dead_letters WHERE job_id = :map_job;

SELECT count(*) AS dropped FROM (SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 'dl\_%') d;
SELECT count(*) FROM mailer.dead_letters;
DROP TABLE dl_events, dl_out, dl_stages, dl_checked, dl_first, dl_all, dl_skip, dl_fail;
