-- describe_job: the plan of a spec, as a person reads it; creates nothing.
\set VERBOSITY default
SET timezone = 'UTC';
SET datestyle = 'ISO, YMD';
\pset format unaligned

CREATE TABLE ds_raw (key text, value jsonb, topic text, "offset" bigint, "timestamp" timestamptz);
CREATE TABLE ds_orders (order_id bigint, customer_id text, amount numeric(10,2), item text,
						ts timestamptz, loaded_at timestamptz DEFAULT now());
CREATE TABLE ds_last (customer_id text PRIMARY KEY, order_id integer, amount numeric(8,1), ts text);
CREATE TABLE ds_seen (customer_id text PRIMARY KEY);
CREATE TABLE ds_codes (id bigint GENERATED ALWAYS AS IDENTITY, code text, n int);
CREATE UNIQUE INDEX ON ds_codes (code);
CREATE SCHEMA "DS Schema";
CREATE TABLE "DS Schema"."Totals" (customer_id text, window_start timestamptz, window_end timestamptz,
								   orders bigint, total numeric, PRIMARY KEY (customer_id, window_start));
CREATE TABLE ds_running (customer_id text PRIMARY KEY, orders bigint, biggest numeric, average numeric);

-- All defaults: the record's own fields go to the columns of the same name.
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "ds_raw"}}');

-- Every generator option, event time, watermark, each stateless step, casts.
SELECT mailer.describe_job($${
  "source": {"type": "generator", "events": 1000, "rate": 250.5, "keys": 7, "seed": 42,
             "start_time": "2024-02-29 12:00:00+00", "step": "1 minute"},
  "event_time": "(value->>'ts')::timestamptz",
  "watermark": {"max_out_of_orderness": "5 seconds", "idle_timeout": "30 seconds"},
  "steps": [
    {"filter": "(value->>'amount')::numeric > 10"},
    {"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key",
             "amount": "value->'amount'"}},
    {"flat_map": "jsonb_array_elements_text(jsonb_build_array('a', 'b'))"},
    {"map": {"item": "upper(value)", "ts": "timestamp"}}
  ],
  "sink": {"type": "table", "table": "ds_orders", "mode": "append"},
  "checkpoint": {"interval": "250 milliseconds", "retain": 3},
  "on_error": "skip"
}$$);

-- A table with a primary key: upsert by default, the key as conflict target.
SELECT mailer.describe_job($${
  "source": {"type": "generator", "events": 100},
  "steps": [{"map": {"customer_id": "key", "order_id": "value->'order_id'",
                     "amount": "value->'amount'", "ts": "(value->>'ts')::timestamptz"}}],
  "sink": {"type": "table", "table": "ds_last"}
}$$);
-- Key columns only: DO NOTHING.
SELECT mailer.describe_job($${
  "source": {"type": "generator", "events": 100},
  "steps": [{"map": {"customer_id": "key"}}],
  "sink": {"type": "table", "table": "ds_seen", "mode": "upsert"}
}$$);
-- Conflict columns named in "key" (a unique index); identity columns are left alone.
SELECT mailer.describe_job($${
  "source": {"type": "generator", "format": "text"},
  "steps": [{"map": {"code": "key", "n": "length(value)"}}],
  "sink": {"type": "table", "table": "ds_codes", "key": ["code"]},
  "on_error": "fail"
}$$);
-- The same table appended to.
SELECT mailer.describe_job($${
  "source": {"type": "generator", "format": "bytes"},
  "steps": [{"map": {"code": "key", "n": "length(value)"}}],
  "sink": {"type": "table", "table": "ds_codes", "mode": "append"}
}$$);

-- Keyed stages (described; they run in a later version of this build).
SELECT mailer.describe_job($${
  "source": {"type": "generator", "keys": 10},
  "event_time": "(value->>'ts')::timestamptz",
  "watermark": {"max_out_of_orderness": "2 seconds"},
  "steps": [
    {"key_by": {"customer_id": "value->>'customer_id'"}},
    {"window": {"type": "tumbling", "size": "1 minute", "allowed_lateness": "10 seconds", "emit": "update"}},
    {"aggregate": {"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}}
  ],
  "sink": {"type": "table", "table": "\"DS Schema\".\"Totals\""},
  "state": {"backend": "memory"}
}$$);
SELECT mailer.describe_job($${
  "source": {"type": "generator"},
  "steps": [
    {"key_by": {"customer_id": "key"}},
    {"window": {"type": "sliding", "size": "1 hour", "slide": "15 minutes"}},
    {"aggregate": {"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}}
  ],
  "sink": {"type": "table", "table": "\"DS Schema\".\"Totals\"", "mode": "append"}
}$$);
SELECT mailer.describe_job($${
  "source": {"type": "generator"},
  "steps": [
    {"key_by": {"customer_id": "key"}},
    {"window": {"type": "session", "gap": "90 seconds"}},
    {"aggregate": {"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}}
  ],
  "sink": {"type": "table", "table": "\"DS Schema\".\"Totals\""}
}$$);
-- Windows over Kafka: partitions far ahead of the slowest are paused
-- (watermark alignment), by default 10 seconds ahead, or as set, or never.
\set kafka_windows '{"source": {"type": "kafka", "brokers": "localhost:9", "topic": "orders"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "tumbling", "size": "1 minute"}}, {"aggregate": {"orders": "count(*)", "total": "sum(partition)"}}], "sink": {"type": "table", "table": "\\"DS Schema\\".\\"Totals\\""}}'
SELECT mailer.describe_job(:'kafka_windows');
SELECT mailer.describe_job(:'kafka_windows'::jsonb || '{"watermark": {"max_drift": "2 minutes"}}')
       ~ 'partitions more than 2 minutes ahead of the slowest are paused' AS two_minutes,
       mailer.describe_job(:'kafka_windows'::jsonb || '{"watermark": {"max_drift": null}}') ~ 'ahead' AS null_drift_mentioned;
SELECT mailer.describe_job($${
  "source": {"type": "generator"},
  "steps": [
    {"key_by": {"customer_id": "key"}},
    {"aggregate": {"orders": "count(*)", "biggest": "max((value->>'amount')::numeric)",
                   "average": "avg((value->>'amount')::numeric)"}}
  ],
  "sink": {"type": "table", "table": "ds_running"}
}$$);

-- A parallel job: four subtasks, the generator's events in eight partitions,
-- the keyed state in 16 key groups.
SELECT mailer.describe_job($${
  "source": {"type": "generator", "partitions": 8},
  "steps": [
    {"key_by": {"customer_id": "key"}},
    {"aggregate": {"orders": "count(*)", "biggest": "max((value->>'amount')::numeric)",
                   "average": "avg((value->>'amount')::numeric)"}}
  ],
  "sink": {"type": "table", "table": "ds_running"},
  "parallelism": 4,
  "key_groups": 16
}$$);

-- describe_job created nothing.
SELECT count(*) FROM mailer.jobs;

DROP TABLE ds_raw, ds_orders, ds_last, ds_seen, ds_codes, ds_running;
DROP SCHEMA "DS Schema" CASCADE;
