-- The stateless steps: filter, map and flat_map, over the record's fields
-- and the fields earlier steps made, in order.
-- wait_job reports progress in NOTICEs every few seconds, as often as the
-- machine is slow: the expected output has none.
SET client_min_messages = warning;
\set VERBOSITY default
SET timezone = 'UTC';
SET datestyle = 'ISO, YMD';

-- filter: a record passes when the expression is true; false and NULL drop it.
CREATE TABLE st_filtered (order_id bigint);
SELECT mailer.create_job('st_filter', $${"source": {"type": "generator", "events": 1000},
  "steps": [{"filter": "(value->>'order_id')::int % 3 = 0"},
            {"filter": "CASE WHEN (value->>'order_id')::int % 2 = 0 THEN true END"},
            {"map": {"order_id": "(value->>'order_id')::bigint"}}],
  "sink": {"type": "table", "table": "st_filtered"}}$$) > 0 AS created;
SELECT mailer.wait_job('st_filter');
SELECT count(*), min(order_id), max(order_id), bool_and(order_id % 6 = 0) AS all_multiples_of_6,
	   count(*) = (SELECT count(*) FROM generate_series(0, 999) n WHERE n % 6 = 0) AS none_missing
  FROM st_filtered;
SELECT records_in, records_accepted, records_filtered, records_out FROM mailer.metrics WHERE name = 'st_filter';

-- map: adds fields and replaces them.  Every field of one map step sees the
-- record as it was before the step; later steps see what it made.
CREATE FUNCTION st_cents(numeric) RETURNS bigint LANGUAGE sql IMMUTABLE AS 'SELECT ($1 * 100)::bigint';
CREATE TABLE st_mapped (key text, order_id bigint, amount numeric, cents bigint, customer text,
						old_key text, tag text, nothing text, "offset" bigint, topic text, "partition" int,
						"timestamp" timestamptz, value jsonb);
SELECT mailer.create_job('st_map', $${"source": {"type": "generator", "events": 500, "keys": 5},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "amount": "(value->>'amount')::numeric",
                     "customer": "value->>'customer_id'", "old_key": "key",
                     "key": "upper(key)", "value": "value - 'ts'"}},
            {"map": {"cents": "st_cents(amount)", "tag": "key || '/' || order_id", "nothing": "NULL"}}],
  "sink": {"type": "table", "table": "st_mapped"}}$$) > 0 AS created;
SELECT mailer.wait_job('st_map');
SELECT count(*) AS rows,
	   count(*) FILTER (WHERE key <> upper(old_key)) AS key_not_replaced,
	   count(*) FILTER (WHERE customer <> old_key) AS map_saw_new_key,
	   count(*) FILTER (WHERE tag <> upper(old_key) || '/' || order_id) AS later_step_saw_old_key,
	   count(*) FILTER (WHERE cents <> amount * 100) AS bad_cents,
	   count(*) FILTER (WHERE value ? 'ts' OR NOT value ? 'amount') AS value_not_replaced,
	   count(*) FILTER (WHERE nothing IS NOT NULL) AS not_null,
	   count(*) FILTER (WHERE "offset" <> order_id OR topic <> 'generator' OR "partition" <> 0
						   OR "timestamp" <> timestamptz '2025-01-01 00:00:00+00' + order_id * interval '10 milliseconds') AS bad_record_fields
  FROM st_mapped;
SELECT DISTINCT key FROM st_mapped ORDER BY key;

-- flat_map: each value the function returns becomes a record of its own,
-- with the other fields of the record it came from; zero values, zero records.
CREATE TABLE st_items (order_id bigint, value jsonb, n int);
SELECT mailer.create_job('st_flat', $${"source": {"type": "generator", "events": 100},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}},
            {"flat_map": "jsonb_array_elements(CASE WHEN order_id % 10 = 0 THEN '[]'::jsonb ELSE jsonb_build_array(1, 2, 3) END)"},
            {"filter": "value::int <> 2"},
            {"map": {"n": "value::int"}}],
  "sink": {"type": "table", "table": "st_items"}}$$) > 0 AS created;
SELECT mailer.wait_job('st_flat');
SELECT count(*), count(DISTINCT order_id) AS orders, count(*) FILTER (WHERE order_id % 10 = 0) AS from_empty_arrays,
	   array_agg(DISTINCT n ORDER BY n) AS ns, bool_and(value = to_jsonb(n)) AS value_is_element
  FROM st_items;
SELECT (SELECT count(*) FROM st_items) = (SELECT count(*) * 2 FROM generate_series(0, 99) n WHERE n % 10 <> 0) AS as_expected;
SELECT records_in, records_accepted, records_filtered, records_out FROM mailer.metrics WHERE name = 'st_flat';

-- flat_map over a text value: the pieces of each message.
CREATE TABLE st_words (key text, value text);
SELECT mailer.create_job('st_words', $${"source": {"type": "generator", "events": 50, "format": "text"},
  "steps": [{"flat_map": "regexp_split_to_table(value, ', ')"}],
  "sink": {"type": "table", "table": "st_words"}}$$) > 0 AS created;
SELECT mailer.wait_job('st_words');
SELECT count(*) AS pieces, count(*) FILTER (WHERE value LIKE '{"order_id": %') AS firsts,
	   count(*) FILTER (WHERE value LIKE '"customer_id": "c%"') AS customers,
	   count(*) FILTER (WHERE value LIKE '"amount": %') AS amounts,
	   count(*) FILTER (WHERE value LIKE '"ts": "%"}') AS lasts
  FROM st_words;

SELECT count(*) AS dropped FROM (SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 'st\_%') d;
DROP TABLE st_filtered, st_mapped, st_items, st_words;
DROP FUNCTION st_cents(numeric);
