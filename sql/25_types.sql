-- Types a job cannot hold.  Key fields and aggregate values live in the
-- job's state as bytes and are read back after a restart; a pseudo-type's
-- values (a cstring, an anonymous record, void) have no such bytes.  Every
-- field, key and aggregate argument of such a type is refused with the JSON
-- path of its expression, by describe_job and create_job alike, before a
-- worker could ever run it.
-- wait_job reports progress in NOTICEs every few seconds, as often as the
-- machine is slow: the expected output has none.
SET client_min_messages = warning;
\set VERBOSITY default

CREATE TABLE types_totals (k text PRIMARY KEY, n bigint);
CREATE TABLE types_rows (c text, k text);

-- The key of the issue: textout() makes a cstring (it crashed the server).
SELECT mailer.describe_job($${"source": {"type": "generator", "events": 10},
  "steps": [{"key_by": {"k": "textout('0000'||(value->>'customer_id'))"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "types_totals"}}$$);
SELECT mailer.create_job('types_cstring_key', $${"source": {"type": "generator", "events": 10},
  "steps": [{"key_by": {"k": "textout('0000'||(value->>'customer_id'))"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "types_totals"}}$$);
SELECT count(*) AS jobs FROM mailer.jobs WHERE name = 'types_cstring_key';
-- The cast the hint suggests is accepted.
SELECT mailer.create_job('types_text_key', $${"source": {"type": "generator", "events": 10},
  "steps": [{"key_by": {"k": "textout('0000'||(value->>'customer_id'))::text"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "types_totals"}}$$) > 0 AS created;
SELECT mailer.wait_job('types_text_key');
SELECT count(*) AS keys, sum(n) AS records, bool_and(k LIKE '0000%') AS keys_as_made FROM types_totals;
SELECT mailer.drop_job('types_text_key') > 0 AS dropped;

-- A key that is an anonymous record: its row type exists in one backend only.
SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"key_by": {"k": "row(value->>'customer_id', 1)"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "types_totals"}}$$);
-- Other pseudo-types, as a map field, a later map field, a flat_map value.
SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"map": {"c": "value->>'customer_id'", "v": "pg_sleep(0)"}}],
  "sink": {"type": "table", "table": "types_rows"}}$$);
SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"map": {"c": "value->>'customer_id'"}}, {"map": {"k": "textout(c)"}}],
  "sink": {"type": "table", "table": "types_rows"}}$$);
SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"flat_map": "unnest(ARRAY[textout(key), textout(key)])"}],
  "sink": {"type": "table", "table": "types_rows"}}$$);
-- Aggregate arguments: min and max keep theirs in the state.
SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"key_by": {"k": "value->>'customer_id'"}}, {"aggregate": {"n": "max(row(key, 1))"}}],
  "sink": {"type": "table", "table": "types_totals"}}$$);
SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"key_by": {"k": "value->>'customer_id'"}}, {"aggregate": {"n": "count(row(key, value))"}}],
  "sink": {"type": "table", "table": "types_totals"}}$$);

-- Through a domain, the base type counts: a domain over text is a text.
CREATE DOMAIN types_code AS text CHECK (VALUE <> '');
CREATE TABLE types_codes (k types_code PRIMARY KEY, n bigint);
SELECT mailer.create_job('types_domain_key', $${"source": {"type": "generator", "events": 10},
  "steps": [{"key_by": {"k": "(value->>'customer_id')::types_code"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "types_codes"}}$$) > 0 AS created;
SELECT mailer.wait_job('types_domain_key');
SELECT count(*) AS keys, sum(n) AS records FROM types_codes;
SELECT mailer.drop_job('types_domain_key') > 0 AS dropped;

DROP TABLE types_totals, types_rows, types_codes;
DROP DOMAIN types_code;
