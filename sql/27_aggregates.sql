-- General aggregates (issue 19): what an aggregate step refuses, each an
-- ERROR naming the JSON path of the call, with a HINT, and its SQLSTATE
-- (after each statement) for callers that test them.  What it accepts is
-- checked against SQL's own answers by the TAP tests 161 to 166.
\set VERBOSITY default

CREATE TABLE agg_out (k text PRIMARY KEY, x float8, t text, i int, b bigint, xm xml);
CREATE TABLE agg_win (k text, window_start timestamptz, window_end timestamptz, xm xml, t text[],
	PRIMARY KEY (k, window_start));

-- Ordered-set and hypothetical-set aggregates (WITHIN GROUP): their state
-- is every input, sorted at the end; refused, saying so.
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"x": "percentile_cont(0.5) WITHIN GROUP (ORDER BY (value->>'amount')::float8)"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"t": "mode() WITHIN GROUP (ORDER BY value->>'customer_id')"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "rank(10) WITHIN GROUP (ORDER BY (value->>'amount')::numeric)"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE

-- No such aggregate; a function that is not an aggregate.
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "no_such_aggregate(value->>'amount')"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "no_such_schema.count(*)"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"t": "lower(value->>'customer_id')"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "sum(*)"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "1 + count(*)"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE

-- Window functions (OVER), nested aggregates, subqueries.
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "count(*) OVER ()"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "row_number() OVER (ORDER BY value->>'amount')"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "sum(count(*))"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "count(*) FILTER (WHERE count(*) > 1)"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "max((SELECT 1))"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "count(*) FILTER (WHERE EXISTS (SELECT 1))"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE

-- DISTINCT and ORDER BY need an equality and an ordering of the type.
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"b": "count(DISTINCT value::json)"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"t": "string_agg(value->>'customer_id', ',' ORDER BY value::json)"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE

-- The sink column must take the aggregate's result type.
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"i": "array_agg(value->>'customer_id')"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE

-- A session merges sessions through the combine function: xmlagg has
-- none, and is refused there (it serves a keyed job and a tumbling window);
-- array_agg, whose inputs are kept, is accepted.
SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"key_by": {"k": "value->>'customer_id'"}}, {"window": {"type": "session", "gap": "1 minute"}},
  {"aggregate": {"xm": "xmlagg(xmlelement(name item, value->>'customer_id'))"}}],
  "sink": {"type": "table", "table": "agg_win"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS accepted FROM (SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"key_by": {"k": "value->>'customer_id'"}}, {"aggregate": {"xm": "xmlagg(xmlelement(name item, value->>'customer_id'))"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$)) d;
SELECT count(*) AS accepted FROM (SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"key_by": {"k": "value->>'customer_id'"}}, {"window": {"type": "tumbling", "size": "1 minute"}},
  {"aggregate": {"xm": "xmlagg(xmlelement(name item, value->>'customer_id'))"}}],
  "sink": {"type": "table", "table": "agg_win"}}$$)) d;
SELECT count(*) AS accepted FROM (SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"key_by": {"k": "value->>'customer_id'"}}, {"window": {"type": "session", "gap": "1 minute"}},
  {"aggregate": {"t": "array_agg(value->>'customer_id' ORDER BY value->>'customer_id')"}}],
  "sink": {"type": "table", "table": "agg_win"}}$$)) d;

-- create_job refuses the same way and creates nothing.
SELECT mailer.create_job('agg_job', $${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "value->>'customer_id'"}},
  {"aggregate": {"x": "percentile_cont(0.5) WITHIN GROUP (ORDER BY (value->>'amount')::float8)"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM mailer.jobs WHERE name = 'agg_job';

-- Keys are compared byte by byte: a key_by field under a nondeterministic
-- collation (which finds other bytes equal) is refused.
CREATE COLLATION agg_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
SELECT mailer.describe_job($${"source": {"type": "generator"},
  "steps": [{"key_by": {"k": "value->>'customer_id' COLLATE agg_ci"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "agg_out"}}$$);
\echo :LAST_ERROR_SQLSTATE
DROP COLLATION agg_ci;

-- The per-key limit of kept inputs and internal states: 1MB by default.
SHOW mailer.aggregate_state_limit;

DROP TABLE agg_out, agg_win;
