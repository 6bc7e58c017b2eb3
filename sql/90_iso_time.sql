-- Job expressions read text::timestamptz through mailer._timestamptz_iso:
-- it must give what the cast gives, for every form, in any time zone.
SET TimeZone = 'America/New_York';
WITH t(s) AS (VALUES
  ('2025-06-01T12:00:00Z'), ('2025-06-01 12:00:00.123456+02:00'), ('2025-06-01T12:00:00.5-0330'),
  ('2025-06-01T12:00:00+05'), ('2024-02-29T23:59:59.999999Z'), ('1999-12-31T23:59:59.9+14:00'),
  ('2025-06-01T12:00:00'), ('2025-06-01T24:00:00Z'), ('2025-06-01 12:00:00 Europe/Paris'),
  ('0001-01-01T00:00:00Z'), ('2025-06-01T12:00:00.1234567Z'), ('2025-06-01T12:00:00+05:'),
  ('2025-06-01T12:00:00z'), ('June 1, 2025 12:00 UTC'), ('epoch'), ('infinity'))
SELECT s, mailer._timestamptz_iso(s) IS NOT DISTINCT FROM s::timestamptz AS same
  FROM t ORDER BY s;
-- Errors are the cast's errors.
SELECT mailer._timestamptz_iso('2023-02-29T00:00:00Z');
SELECT mailer._timestamptz_iso('not a time');
-- A job's expression uses it: describe_job shows the expression as written.
CREATE TABLE iso_t (ts timestamptz);
SELECT mailer.describe_job('{"source": {"type": "generator", "events": 1},
  "event_time": "(value->>''ts'')::timestamptz",
  "steps": [{"map": {"ts": "(value->>''ts'')::timestamptz"}}],
  "sink": {"type": "table", "table": "iso_t"}}') ~ 'ts timestamp with time zone := \(value->>''ts''\)::timestamptz' AS shown;
DROP TABLE iso_t;
RESET TimeZone;
