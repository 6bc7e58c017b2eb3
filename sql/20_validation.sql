-- Every validation error a user can make: each is an ERROR naming the JSON
-- path of the mistake, with a HINT saying what is accepted.  describe_job
-- validates exactly as create_job does; a few create_job calls show it.
\set VERBOSITY default

CREATE TABLE val_orders (order_id bigint, customer_id text, amount numeric(10,2), note text);
CREATE TABLE val_totals (customer_id text PRIMARY KEY, orders bigint, total numeric);
CREATE TABLE val_required (order_id bigint NOT NULL, note text);
CREATE TABLE val_other (a int);
CREATE TABLE val_unique (code text UNIQUE, note text);
CREATE VIEW val_view AS SELECT * FROM val_orders;

-- The document itself.
SELECT mailer.describe_job('[]');
SELECT mailer.describe_job('"a job"');
SELECT mailer.describe_job('{}');
SELECT mailer.describe_job('{"source": {"type": "generator"}}');
SELECT mailer.describe_job('{"sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "colour": "blue"}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "version": 2}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "version": "1"}');

-- source
SELECT mailer.describe_job('{"source": "generator", "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "file"}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": 1}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "evnts": 10}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "topic": "orders"}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "format": "xml"}, "sink": {"type": "table", "table": "val_orders"}}');
-- generator options: wrong types, bad values
SELECT mailer.describe_job('{"source": {"type": "generator", "events": "10"}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "events": 1.5}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "events": -1}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "events": 1e30}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "rate": 0}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "rate": "fast"}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "keys": 0}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "keys": null}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "seed": true}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "start_time": "yesterday-ish"}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "start_time": 1735689600}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "partitions": 0}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "partitions": 1025}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "partitions": "4"}, "sink": {"type": "table", "table": "val_orders"}}');
-- intervals
SELECT mailer.describe_job('{"source": {"type": "generator", "step": "soon"}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "step": 10}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "step": "1 month"}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "step": "-1 second"}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "checkpoint": {"interval": "0"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "checkpoint": {"interval": "1 millisecond"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "checkpoint": {"interval": "1 year"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "checkpoint": {"retain": 0}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "checkpoint": {"every": "1 second"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "watermark": {"max_out_of_orderness": "a while"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "watermark": {"idle_timeout": "0 seconds"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "watermark": {"max_drift": "0 seconds"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "watermark": {"max_drift": 10}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "watermark": {"max_drift": "1 month"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "watermark": {"lag": "1 second"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "watermark": "5 seconds"}');
-- other top-level options
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "on_error": "ignore"}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "state": {"backend": "disk"}}');
-- parallelism and key groups (a valid parallelism is in 40_describe)
CREATE FUNCTION pg_temp.sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE;
END $$;
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "parallelism": 0}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "parallelism": 65}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "parallelism": "2"}');
-- more than mailer.max_parallelism_per_job (8 by default)
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "parallelism": 9}');
-- a superuser may raise it; the test cluster has max_prepared_transactions = 32
SET mailer.max_parallelism_per_job = 64;
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "parallelism": 40}');
SELECT mailer.create_job('val_too_parallel', '{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "parallelism": 34}');
SELECT pg_temp.sqlstate_of($$SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "parallelism": 40}')$$) AS object_not_in_prerequisite_state;
RESET mailer.max_parallelism_per_job;
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "key_groups": 0}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "key_groups": 32769}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "key_groups": 2, "parallelism": 4}');

-- steps: shape and order
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": {"filter": "true"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": ["filter"]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "true", "map": {"note": "key"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "true"}, {"reduce": "sum"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": true}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": ""}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": "key"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"": "key"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": 42}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"window": {"type": "tumbling", "size": "1 minute"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"key_by": {"note": "key"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "tumbling", "size": "1 minute"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "tumbling", "size": "1 minute"}}, {"filter": "true"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"aggregate": {"orders": "count(*)"}}, {"map": {"note": "key"}}]}');
-- window options
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"size": "1 minute"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "hopping", "size": "1 minute"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "tumbling"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "tumbling", "size": "0 seconds"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "tumbling", "size": "1 minute", "gap": "1 second"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "sliding", "size": "1 minute", "slide": "7 seconds"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "sliding", "size": "1 minute", "slide": "2 minutes"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "session", "size": "1 minute"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "tumbling", "size": "1 minute", "emit": "often"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "tumbling", "size": "1 minute", "lateness": "1 minute"}}, {"aggregate": {"orders": "count(*)"}}]}');
-- aggregates
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"aggregate": {"orders": "median(1)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"aggregate": {"orders": 1}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"aggregate": {"orders": "count(*)", "customer_id": "count(*)"}}]}');
-- an aggregate output the sink table has no column for
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"aggregate": {"orders": "count(*)", "biggest": "max((value->>''amount'')::numeric)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key", "region": "''eu''"}}, {"aggregate": {"orders": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"key_by": {"customer_id": "key"}}, {"window": {"type": "tumbling", "size": "1 minute"}}, {"aggregate": {"orders": "count(*)"}}]}');

-- Expressions: an unknown column, not parsing, not one expression,
-- wrong type for filter and event_time, not allowed in a step.
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "amount > 10"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "(value->>''order_id'')::bigint"}}, {"map": {"note": "customer"}}]}');
-- map fields see the record as it was before the step
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "1", "note": "order_id::text"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "value->>''amount'' >"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "value->>''amount > 0"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "1; DROP TABLE val_orders"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "1 FROM val_orders"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "1 AS id"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "*"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "value->>''amount''"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "1"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "event_time": "value->''ts''"}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "event_time": "42"}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "event_time": "no_such_field"}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "count(*)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "row_number() OVER ()"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "(SELECT 1)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "generate_series(1, 2)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"flat_map": "value->''items''"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"flat_map": "jsonb_each(value)"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "no_such_function(key)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "''abc''::integer"}}]}');
-- Validation runs nothing of the spec (constant folding would run its
-- IMMUTABLE functions as the caller): 1/0 is the worker's to meet.
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "key = ''c1'' OR 1/0 > 0"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator", "format": "text"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "value->>''amount'' > ''1''"}]}');

-- sink
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": "val_orders"}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"table": "val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "kafka", "topic": "out"}}');
-- The Pulsar sink: the source's address checks, the Kafka sink's record.
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "topic": "persistent://t/ns/out"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "wss://b:8443", "topic": "persistent://t/ns/out"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080/x", "topic": "persistent://t/ns/out"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080", "topic": "out"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080", "topic": "persistent://t/../out"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080", "topic": "persistent://t/ns/out-partition-1"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080", "topic": "persistent://t/ns/out", "options": {"sasl.password": "x"}}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080", "topic": "persistent://t/ns/out", "delivery": "at_least_once"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080", "topic": "persistent://t/ns/out", "format": "xml"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080", "topic": "persistent://t/ns/out", "properties": [1]}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080", "topic": "persistent://t/ns/out", "value": "nosuch + 1"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sinks": [{"type": "pulsar", "service_url": "http://b:8080", "topic": "persistent://t/ns/out"}, {"type": "kafka", "brokers": "b:9092", "topic": "out"}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080", "topic": "persistent://t/ns/out", "key": "key", "value": "value", "format": "text", "properties": {"src": "''gen''"}}}');
-- Pulsar security (README, "Pulsar"): a token, TLS with the broker verified,
-- the CA inline or as a server file.  A token's value is never shown.
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "https://b:8443/x", "topic": "persistent://t/ns/out"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out", "options": {"tls.verify": "false"}}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out", "options": {"auth.token": ""}}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out", "options": {"auth.token": "Bearer val-secret-1"}}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out", "options": {"auth.token": {"val": "secret"}}}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "http://b:8080", "topic": "persistent://t/ns/out", "options": {"tls.ca.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out", "options": {"tls.ca.pem": "MIIB"}}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out", "options": {"tls.ca.location": "ca.pem"}}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out", "options": {"tls.ca.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "tls.ca.location": "/etc/ca.pem"}}}');
SELECT mailer.describe_job('{"source": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/in", "options": {"auth.token": "val.secret.2", "tls.ca.location": "/etc/ca.pem"}}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out", "options": {"auth.token": "val.secret.3", "tls.ca.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}}');
-- A role without pg_read_server_files names no server file: the CA goes inline.
CREATE ROLE regress_mailer_val_plain;
SET ROLE regress_mailer_val_plain;
SELECT mailer.describe_job('{"source": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/in", "options": {"tls.ca.location": "/etc/ca.pem"}}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out"}}');
SELECT mailer.describe_job('{"source": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/in", "options": {"auth.token": "val.secret.4", "tls.ca.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out", "options": {"tls.ca.location": "/etc/ca.pem"}}}');
RESET ROLE;
GRANT pg_read_server_files TO regress_mailer_val_plain;
SET ROLE regress_mailer_val_plain;
SELECT mailer.describe_job('{"source": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/in", "options": {"tls.ca.location": "/etc/ca.pem"}}, "sink": {"type": "pulsar", "service_url": "https://b:8443", "topic": "persistent://t/ns/out"}}') LIKE '%option tls.ca.location = /etc/ca.pem%' AS accepted;
RESET ROLE;
DROP ROLE regress_mailer_val_plain;
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": 42}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders", "columns": ["a"]}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "no_such_table"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "no_such_schema.val_orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val orders"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_view"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders", "mode": "merge"}}');
-- upsert without a key
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders", "mode": "upsert"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders", "key": ["order_id"]}, "steps": [{"map": {"order_id": "(value->>''order_id'')::bigint"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders", "key": ["no_such_column"]}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders", "key": "order_id"}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders", "key": []}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders", "key": [1]}}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals", "mode": "append", "key": ["customer_id"]}}');
-- upsert whose conflict column gets no field
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_unique", "key": ["code"]}, "steps": [{"map": {"note": "key"}}]}');
-- a NOT NULL column without a default that no field feeds
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_required"}, "steps": [{"map": {"note": "key"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_totals"}, "steps": [{"map": {"orders": "1"}}]}');
-- no column of the table is named after a field
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_other"}}');
-- a field that cannot be cast to its column
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"map": {"order_id": "point(1, 2)"}}]}');
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_other"}, "steps": [{"map": {"a": "now()"}}]}');

-- create_job validates the same way and creates nothing.
SELECT mailer.create_job('val_job', '{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "amount > 10"}]}');
SELECT mailer.create_job('val_job', '{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders", "mode": "upsert"}}');
SELECT mailer.create_job('val_job', '{"source": {"type": "generator", "step": "1 month"}, "sink": {"type": "table", "table": "val_orders"}}');
SELECT count(*) FROM mailer.jobs WHERE name = 'val_job';

-- The errcodes, for callers that test them.
\set VERBOSITY terse
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "colour": "blue"}');
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "no_such_table"}}');
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "amount > 10"}]}');
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "value->>''amount'' >"}]}');
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job('{"source": {"type": "generator"}, "sink": {"type": "table", "table": "val_orders"}, "steps": [{"filter": "value->>''amount''"}]}');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default

DROP VIEW val_view;
DROP TABLE val_orders, val_totals, val_required, val_other, val_unique;
