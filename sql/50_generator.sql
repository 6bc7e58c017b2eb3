-- The generator source: a bounded job's exact output.  Event n has
-- order_id n, ts = start_time + n * step, key = its customer_id "c<k>" with
-- k < keys, and an amount with two decimals; customer and amount are a
-- hash of (seed, n), so they are compared between jobs, not hard-coded.
-- wait_job reports progress in NOTICEs every few seconds, as often as the
-- machine is slow: the expected output has none.
SET client_min_messages = warning;
\set VERBOSITY default
SET timezone = 'UTC';
SET datestyle = 'ISO, YMD';

CREATE TABLE gen_a (key text, value jsonb, topic text, partition int, "offset" bigint, "timestamp" timestamptz);
CREATE TABLE gen_b (LIKE gen_a);
CREATE TABLE gen_c (LIKE gen_a);
CREATE TABLE gen_default (LIKE gen_a);
CREATE TABLE gen_seed1 (LIKE gen_a);

-- The same spec twice, and once with another seed.
SELECT mailer.create_job('gen_a', $${"source": {"type": "generator", "events": 1000, "keys": 10, "seed": 7,
  "start_time": "2024-06-01 00:00:00+00", "step": "1 second"}, "sink": {"type": "table", "table": "gen_a"}}$$) > 0 AS created;
SELECT mailer.create_job('gen_b', $${"source": {"type": "generator", "events": 1000, "keys": 10, "seed": 7,
  "start_time": "2024-06-01 00:00:00+00", "step": "1 second"}, "sink": {"type": "table", "table": "gen_b"}}$$) > 0 AS created;
SELECT mailer.create_job('gen_c', $${"source": {"type": "generator", "events": 1000, "keys": 10, "seed": 8,
  "start_time": "2024-06-01 00:00:00+00", "step": "1 second"}, "sink": {"type": "table", "table": "gen_c"}}$$) > 0 AS created;
SELECT mailer.wait_job('gen_a'), mailer.wait_job('gen_b'), mailer.wait_job('gen_c');

-- Exactly events 0 .. 999, once each.
SELECT count(*), count(DISTINCT "offset"), min("offset"), max("offset"), sum("offset") FROM gen_a;
-- The record: topic, partition, offset = order_id, timestamp = ts.
SELECT topic, partition, count(*) FROM gen_a GROUP BY 1, 2;
SELECT count(*) FILTER (WHERE (value->>'order_id')::bigint <> "offset") AS order_id_not_offset,
	   count(*) FILTER (WHERE (value->>'ts')::timestamptz
						  <> timestamptz '2024-06-01 00:00:00+00' + "offset" * interval '1 second') AS ts_not_start_plus_n_steps,
	   count(*) FILTER (WHERE "timestamp" <> (value->>'ts')::timestamptz) AS timestamp_not_ts,
	   count(*) FILTER (WHERE value->>'ts' !~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$') AS ts_not_iso_utc,
	   count(*) FILTER (WHERE key IS DISTINCT FROM value->>'customer_id') AS key_not_customer,
	   count(*) FILTER (WHERE key !~ '^c\d+$' OR substr(key, 2)::int NOT BETWEEN 0 AND 9) AS customer_out_of_keys,
	   count(*) FILTER (WHERE jsonb_typeof(value->'amount') <> 'number'
						   OR scale((value->>'amount')::numeric) <> 2
						   OR (value->>'amount')::numeric NOT BETWEEN 0 AND 999.99) AS bad_amount
  FROM gen_a;
SELECT min(value->>'ts') AS first_ts, max(value->>'ts') AS last_ts FROM gen_a;
-- The value has exactly these fields.
SELECT DISTINCT ARRAY(SELECT jsonb_object_keys(value) ORDER BY 1) AS fields FROM gen_a;
-- All ten customers occur, and no other.
SELECT count(DISTINCT key) AS customers FROM gen_a;

-- Deterministic: the same spec gives the same events.
SELECT (SELECT count(*) FROM gen_b) AS b_rows,
	   (SELECT count(*) FROM (SELECT * FROM gen_a EXCEPT ALL SELECT * FROM gen_b) d) AS a_not_b,
	   (SELECT count(*) FROM (SELECT * FROM gen_b EXCEPT ALL SELECT * FROM gen_a) d) AS b_not_a;
-- Another seed: the same order ids and times, other customers and amounts.
SELECT count(*) AS rows,
	   count(*) FILTER (WHERE a.value->'ts' = c.value->'ts' AND a."timestamp" = c."timestamp") AS same_ts,
	   count(*) FILTER (WHERE a.key <> c.key) > 500 AS customers_differ,
	   count(*) FILTER (WHERE a.value->'amount' <> c.value->'amount') > 900 AS amounts_differ
  FROM gen_a a JOIN gen_c c USING ("offset");

-- The defaults: 100 keys, seed 1, from 2025-01-01 00:00:00+00 every 10 milliseconds.
SELECT mailer.create_job('gen_default', '{"source": {"type": "generator", "events": 20000}, "sink": {"type": "table", "table": "gen_default"}}') > 0 AS created;
SELECT mailer.create_job('gen_seed1', $${"source": {"type": "generator", "events": 20000, "keys": 100, "seed": 1,
  "start_time": "2025-01-01 00:00:00+00", "step": "10 milliseconds"}, "sink": {"type": "table", "table": "gen_seed1"}}$$) > 0 AS created;
SELECT mailer.wait_job('gen_default'), mailer.wait_job('gen_seed1');
SELECT count(*), min("timestamp"), max("timestamp"), count(DISTINCT key) <= 100 AS within_keys,
	   count(*) FILTER (WHERE substr(key, 2)::int NOT BETWEEN 0 AND 99) AS customer_out_of_keys,
	   count(*) FILTER (WHERE key IS DISTINCT FROM value->>'customer_id') AS key_not_customer
  FROM gen_default;
SELECT (SELECT count(*) FROM (SELECT * FROM gen_default EXCEPT ALL SELECT * FROM gen_seed1) d) AS default_not_explicit,
	   (SELECT count(*) FROM (SELECT * FROM gen_seed1 EXCEPT ALL SELECT * FROM gen_default) d) AS explicit_not_default;

-- Sums computed from the generator's definition: order ids 0 .. n-1,
-- times start + n * step; the amounts, split by a filter into two jobs,
-- add up to the whole.
CREATE TABLE gen_orders (order_id bigint, amount numeric, ts timestamptz);
CREATE TABLE gen_small (LIKE gen_orders);
CREATE TABLE gen_large (LIKE gen_orders);
SELECT mailer.create_job('gen_orders', $${"source": {"type": "generator", "events": 5000, "seed": 3, "step": "1 minute"},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "amount": "(value->>'amount')::numeric",
                     "ts": "(value->>'ts')::timestamptz"}}],
  "sink": {"type": "table", "table": "gen_orders"}}$$) > 0 AS created;
SELECT mailer.create_job('gen_small', $${"source": {"type": "generator", "events": 5000, "seed": 3, "step": "1 minute"},
  "steps": [{"filter": "(value->>'amount')::numeric < 500"},
            {"map": {"order_id": "(value->>'order_id')::bigint", "amount": "(value->>'amount')::numeric",
                     "ts": "(value->>'ts')::timestamptz"}}],
  "sink": {"type": "table", "table": "gen_small"}}$$) > 0 AS created;
SELECT mailer.create_job('gen_large', $${"source": {"type": "generator", "events": 5000, "seed": 3, "step": "1 minute"},
  "steps": [{"filter": "(value->>'amount')::numeric >= 500"},
            {"map": {"order_id": "(value->>'order_id')::bigint", "amount": "(value->>'amount')::numeric",
                     "ts": "(value->>'ts')::timestamptz"}}],
  "sink": {"type": "table", "table": "gen_large"}}$$) > 0 AS created;
SELECT mailer.wait_job('gen_orders'), mailer.wait_job('gen_small'), mailer.wait_job('gen_large');
SELECT count(*) = 5000 AS count_ok,
	   sum(order_id) = 5000::numeric * 4999 / 2 AS order_id_sum_ok,
	   sum(extract(epoch FROM ts - timestamptz '2025-01-01 00:00:00+00')) = 60 * (5000::numeric * 4999 / 2) AS ts_sum_ok,
	   bool_and(ts = timestamptz '2025-01-01 00:00:00+00' + order_id * interval '1 minute') AS every_ts_ok
  FROM gen_orders;
SELECT (SELECT count(*) FROM gen_small) + (SELECT count(*) FROM gen_large) = 5000 AS counts_add_up,
	   (SELECT count(*) FROM gen_small) > 0 AND (SELECT count(*) FROM gen_large) > 0 AS both_sides,
	   (SELECT sum(amount) FROM gen_small) + (SELECT sum(amount) FROM gen_large)
		 = (SELECT sum(amount) FROM gen_orders) AS sums_add_up,
	   (SELECT count(*) FROM (SELECT * FROM gen_orders EXCEPT ALL
							   (SELECT * FROM gen_small UNION ALL SELECT * FROM gen_large)) d) AS missing;
-- The metrics agree with the tables.
SELECT name, state, records_in, records_accepted, records_filtered, records_out,
	   records_in = records_accepted + records_filtered AS in_is_accepted_plus_filtered
  FROM mailer.metrics WHERE name IN ('gen_orders', 'gen_small', 'gen_large') ORDER BY name;
SELECT (SELECT records_out FROM mailer.metrics WHERE name = 'gen_small') = (SELECT count(*) FROM gen_small) AS small_out_ok,
	   (SELECT records_filtered FROM mailer.metrics WHERE name = 'gen_small') = (SELECT count(*) FROM gen_large) AS small_filtered_ok;

-- No events: finished at once, nothing written.
CREATE TABLE gen_none (LIKE gen_a);
SELECT mailer.create_job('gen_none', '{"source": {"type": "generator", "events": 0}, "sink": {"type": "table", "table": "gen_none"}}') AS job_id \gset
SELECT mailer.wait_job('gen_none');
SELECT positions, final FROM mailer.checkpoints WHERE job_id = :job_id;
SELECT name, state, records_in, records_out FROM mailer.metrics WHERE name = 'gen_none';
SELECT count(*) FROM gen_none;

-- A rate holds the job back: 1000 events at 4000 per second take at least
-- a quarter of a second, and come out the same.
CREATE TABLE gen_rated (LIKE gen_a);
SELECT mailer.create_job('gen_rated', $${"source": {"type": "generator", "events": 1000, "keys": 10, "seed": 7, "rate": 4000,
  "start_time": "2024-06-01 00:00:00+00", "step": "1 second"}, "sink": {"type": "table", "table": "gen_rated"},
  "checkpoint": {"interval": "50 milliseconds"}}$$) AS job_id \gset
SELECT mailer.wait_job('gen_rated');
SELECT max(c.committed_at) - j.created_at >= interval '250 milliseconds' AS throttled
  FROM mailer.checkpoints c JOIN mailer.jobs j USING (job_id) WHERE j.name = 'gen_rated' GROUP BY j.created_at;
SELECT (SELECT count(*) FROM (SELECT * FROM gen_a EXCEPT ALL SELECT * FROM gen_rated) d) AS a_not_rated,
	   (SELECT count(*) FROM (SELECT * FROM gen_rated EXCEPT ALL SELECT * FROM gen_a) d) AS rated_not_a;

SELECT count(*) AS dropped FROM (SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 'gen\_%') d;
SELECT count(*) FROM mailer.jobs;
DROP TABLE gen_a, gen_b, gen_c, gen_default, gen_seed1, gen_orders, gen_small, gen_large, gen_none, gen_rated;
