-- Table sinks: fields go to the columns of the same name, cast to the
-- column types; append inserts every record, upsert keeps one row per key
-- (the newest record's), updating the other columns.
-- wait_job reports progress in NOTICEs every few seconds, as often as the
-- machine is slow: the expected output has none.
SET client_min_messages = warning;
\set VERBOSITY default
SET timezone = 'UTC';
SET datestyle = 'ISO, YMD';

-- Every event, for comparison: customer, order, amount as the generator made them.
CREATE TABLE sk_all (customer_id text, order_id bigint, amount numeric);
SELECT mailer.create_job('sk_all', $${"source": {"type": "generator", "events": 3000, "keys": 20, "seed": 5},
  "steps": [{"map": {"customer_id": "key", "order_id": "(value->>'order_id')::bigint",
                     "amount": "(value->>'amount')::numeric"}}],
  "sink": {"type": "table", "table": "sk_all"}}$$) > 0 AS created;

-- Append with casts: jsonb to integer and to numeric(8,1) (rounded), text to
-- timestamptz and to a domain; columns without a field get their default;
-- identity and generated columns are the table's business.
CREATE DOMAIN sk_code AS text CHECK (VALUE ~ '^c\d+$');
CREATE TABLE sk_append (
	id			bigint GENERATED ALWAYS AS IDENTITY,
	customer_id	sk_code,
	order_id	integer,
	amount		numeric(8,1),
	ts			timestamptz,
	doubled		numeric GENERATED ALWAYS AS (amount * 2) STORED,
	source		text DEFAULT 'mailer',
	loaded		boolean DEFAULT true);
SELECT mailer.create_job('sk_append', $${"source": {"type": "generator", "events": 3000, "keys": 20, "seed": 5},
  "steps": [{"map": {"customer_id": "key", "order_id": "value->'order_id'", "amount": "value->'amount'",
                     "ts": "value->>'ts'"}}],
  "sink": {"type": "table", "table": "sk_append"}}$$) > 0 AS created;

-- Upsert on the primary key: the newest record of each customer.
CREATE TABLE sk_latest (customer_id text PRIMARY KEY, order_id bigint, amount numeric(8,1), updates int DEFAULT 0);
INSERT INTO sk_latest VALUES ('c0', -1, 0, 0), ('zz', -1, 0, 0);
SELECT mailer.create_job('sk_latest', $${"source": {"type": "generator", "events": 3000, "keys": 20, "seed": 5},
  "steps": [{"map": {"customer_id": "key", "order_id": "(value->>'order_id')::bigint",
                     "amount": "(value->>'amount')::numeric"}}],
  "sink": {"type": "table", "table": "sk_latest"}}$$) > 0 AS created;

-- Upsert on a unique index named in "key", over several checkpoints.
CREATE TABLE sk_keyed (id serial PRIMARY KEY, customer_id text, order_id bigint, amount text);
CREATE UNIQUE INDEX ON sk_keyed (customer_id);
SELECT mailer.create_job('sk_keyed', $${"source": {"type": "generator", "events": 3000, "keys": 20, "seed": 5, "rate": 20000},
  "steps": [{"map": {"customer_id": "key", "order_id": "(value->>'order_id')::bigint",
                     "amount": "value->>'amount'"}}],
  "sink": {"type": "table", "table": "sk_keyed", "mode": "upsert", "key": ["customer_id"]},
  "checkpoint": {"interval": "20 milliseconds"}}$$) > 0 AS created;

-- Upsert of key columns only: one row per key, written once.
CREATE TABLE sk_customers (customer_id text PRIMARY KEY, first_seen timestamptz DEFAULT '2000-01-01');
SELECT mailer.create_job('sk_customers', $${"source": {"type": "generator", "events": 3000, "keys": 20, "seed": 5},
  "steps": [{"map": {"customer_id": "key"}}],
  "sink": {"type": "table", "table": "sk_customers"}}$$) > 0 AS created;

-- A table with a primary key, appended to: mode append is an INSERT.
CREATE TABLE sk_orders (order_id bigint PRIMARY KEY, customer_id text);
SELECT mailer.create_job('sk_orders', $${"source": {"type": "generator", "events": 3000, "keys": 20, "seed": 5},
  "steps": [{"map": {"customer_id": "key", "order_id": "(value->>'order_id')::bigint"}}],
  "sink": {"type": "table", "table": "sk_orders", "mode": "append"}}$$) > 0 AS created;

SELECT mailer.wait_job('sk_all'), mailer.wait_job('sk_append'), mailer.wait_job('sk_latest'),
	   mailer.wait_job('sk_keyed'), mailer.wait_job('sk_customers'), mailer.wait_job('sk_orders');

SELECT count(*), count(DISTINCT order_id), count(DISTINCT customer_id) FROM sk_all;

-- append: every event once, cast as the columns say
SELECT count(*) = 3000 AS all_rows, count(DISTINCT id) = 3000 AS identities,
	   bool_and(source = 'mailer' AND loaded) AS defaults,
	   bool_and(doubled = amount * 2) AS generated,
	   bool_and(ts = timestamptz '2025-01-01 00:00:00+00' + order_id * interval '10 milliseconds') AS ts_cast,
	   bool_and(scale(amount) = 1) AS amount_scale
  FROM sk_append;
SELECT count(*) AS not_in_all FROM (
	SELECT customer_id::text, order_id::bigint, amount FROM sk_append
	EXCEPT ALL
	SELECT customer_id, order_id, round(amount, 1) FROM sk_all) d;

-- upsert: one row per customer, holding its last order
SELECT count(*) FROM sk_latest;
SELECT count(*) AS not_last_order FROM (
	SELECT customer_id, order_id, amount FROM sk_latest WHERE customer_id <> 'zz'
	EXCEPT
	(SELECT DISTINCT ON (customer_id) customer_id, order_id, round(amount, 1) FROM sk_all
	  ORDER BY customer_id, order_id DESC)) d;
-- rows the job never saw are left alone; columns it does not feed keep their value
SELECT customer_id, order_id <> -1 AS updated, amount <> 0 AS amount_updated, updates FROM sk_latest WHERE customer_id IN ('c0', 'zz') ORDER BY 1;
SELECT count(*) FILTER (WHERE updates <> 0) AS updates_touched FROM sk_latest;

SELECT count(*), count(DISTINCT id) FROM sk_keyed;
SELECT count(*) AS not_last_order FROM (
	SELECT customer_id, order_id, amount::numeric FROM sk_keyed
	EXCEPT
	(SELECT DISTINCT ON (customer_id) customer_id, order_id, amount FROM sk_all
	  ORDER BY customer_id, order_id DESC)) d;
SELECT count(*) > 1 AS several_checkpoints FROM mailer.checkpoints c JOIN mailer.jobs j USING (job_id)
 WHERE j.name = 'sk_keyed';

SELECT count(*), bool_and(first_seen = '2000-01-01') AS defaults,
	   count(*) = (SELECT count(DISTINCT customer_id) FROM sk_all) AS every_customer
  FROM sk_customers;

SELECT count(*), count(DISTINCT order_id) FROM sk_orders;

-- The metrics: every record written once by the append jobs; the upserts
-- wrote fewer rows than records, at most one per key per checkpoint.
SELECT name, state, records_in, records_accepted, records_out = records_accepted AS out_is_accepted,
	   records_out <= records_accepted AS out_at_most_accepted, records_dead_lettered
  FROM mailer.metrics WHERE name LIKE 'sk\_%' ORDER BY name;

SELECT count(*) AS dropped FROM (SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 'sk\_%') d;
DROP TABLE sk_all, sk_append, sk_latest, sk_keyed, sk_customers, sk_orders;
DROP DOMAIN sk_code;
