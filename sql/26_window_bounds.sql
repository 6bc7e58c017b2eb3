-- Bounds of durations and windows (issue 11 review): every duration is at
-- most 100 years, a sliding window puts a record in at most 1000 windows,
-- the generator's rate is a finite number of at most a billion a second.
-- Windows are computed without overflow: before 1970, and at the end of
-- timestamptz's range, where a window that would end past it makes its
-- record a dead letter (22008) instead of a row with an invalid end.
-- wait_job reports progress in NOTICEs every few seconds, as often as the
-- machine is slow: the expected output has none.
SET client_min_messages = warning;
\set VERBOSITY default
SET timezone = 'UTC';
SET datestyle = 'ISO, YMD';

CREATE TABLE wb_out (k text, window_start timestamptz, window_end timestamptz, n bigint,
	PRIMARY KEY (k, window_start));

-- A huge window size: refused (it used to overflow the window array with a
-- pre-1970 event time and crash the server).
SELECT mailer.create_job('wb_boom', $${"source": {"type": "generator", "events": 10, "start_time": "1969-06-01 00:00:00+00"},
  "steps": [{"key_by": {"k": "key"}}, {"window": {"type": "tumbling", "size": "104000000 days"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$);
-- Days that do not fit in 64 bits of microseconds are not wrapped around.
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "key"}},
  {"window": {"type": "tumbling", "size": "2147483647 days"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$);
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "key"}},
  {"window": {"type": "tumbling", "size": "-2147483648 days"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$);
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "key"}},
  {"window": {"type": "session", "gap": "36526 days"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$);
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "key"}},
  {"window": {"type": "tumbling", "size": "1 minute", "allowed_lateness": "106700000 days"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$);
SELECT mailer.describe_job($${"source": {"type": "generator"}, "watermark": {"max_out_of_orderness": "36525 days 1 second"},
  "steps": [{"key_by": {"k": "key"}}, {"window": {"type": "tumbling", "size": "1 minute"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$);
-- 100 years exactly is accepted.
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "key"}},
  {"window": {"type": "tumbling", "size": "36525 days", "allowed_lateness": "36525 days"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$) LIKE '%36525 days%' AS accepted;

-- Sliding windows: at most 1000 per record.
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "key"}},
  {"window": {"type": "sliding", "size": "100 seconds", "slide": "1 microsecond"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$);
SELECT mailer.create_job('wb_slide', $${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "key"}},
  {"window": {"type": "sliding", "size": "1001 seconds", "slide": "1 second"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$);
SELECT mailer.describe_job($${"source": {"type": "generator"}, "steps": [{"key_by": {"k": "key"}},
  {"window": {"type": "sliding", "size": "1000 seconds", "slide": "1 second"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$) LIKE '%size 1000 seconds, slide 1 second%' AS accepted;

-- The generator's rate.
SELECT mailer.describe_job($${"source": {"type": "generator", "rate": 1e400}, "steps": [{"key_by": {"k": "key"}}, {"window": {"type": "tumbling", "size": "1 minute"}}, {"aggregate": {"n": "count(*)"}}], "sink": {"type": "table", "table": "wb_out"}}$$);
SELECT mailer.describe_job($${"source": {"type": "generator", "rate": 1e10}, "steps": [{"key_by": {"k": "key"}}, {"window": {"type": "tumbling", "size": "1 minute"}}, {"aggregate": {"n": "count(*)"}}], "sink": {"type": "table", "table": "wb_out"}}$$);

SELECT mailer.describe_job($${"source": {"type": "generator", "rate": 1e9}, "steps": [{"key_by": {"k": "key"}}, {"window": {"type": "tumbling", "size": "1 minute"}}, {"aggregate": {"n": "count(*)"}}], "sink": {"type": "table", "table": "wb_out"}}$$) LIKE '%1e+09 events per second%' AS accepted;

-- Before 1970, with the largest window: every record in one window.
SELECT mailer.create_job('wb_old', $${"source": {"type": "generator", "events": 10, "start_time": "1969-06-01 00:00:00+00"},
  "steps": [{"key_by": {"k": "'x'"}}, {"window": {"type": "tumbling", "size": "36525 days"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$) AS old_job \gset
SELECT mailer.wait_job('wb_old');
SELECT k, window_start, window_end, n FROM wb_out ORDER BY window_start;
DELETE FROM wb_out;

-- At the end of the range: the records of 294276-12-30 are counted, those
-- of 294276-12-31, whose day window would end past the range, are dead
-- letters.  A session past the range too.
CREATE TABLE wb_sessions (LIKE wb_out INCLUDING ALL);
SELECT mailer.create_job('wb_end', $${"source": {"type": "generator", "events": 4, "start_time": "294276-12-30 23:59:58+00", "step": "1 second"},
  "steps": [{"key_by": {"k": "'x'"}}, {"window": {"type": "tumbling", "size": "1 day"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_out"}}$$) AS end_job \gset
SELECT mailer.create_job('wb_end_sessions', $${"source": {"type": "generator", "events": 4, "start_time": "294276-12-31 23:59:56+00", "step": "1 second"},
  "steps": [{"key_by": {"k": "'x'"}}, {"window": {"type": "session", "gap": "2 seconds", "allowed_lateness": "100 days"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_sessions"}}$$) AS end_sessions_job \gset
SELECT mailer.wait_job('wb_end'), mailer.wait_job('wb_end_sessions');
SELECT k, window_start, window_end, n FROM wb_out ORDER BY window_start;
SELECT "offset", stage, error FROM mailer.dead_letters WHERE job_id = :end_job ORDER BY "offset";
SELECT k, window_start, window_end, n FROM wb_sessions ORDER BY window_start;
SELECT "offset", stage, error FROM mailer.dead_letters WHERE job_id = :end_sessions_job ORDER BY "offset";

-- Sliding windows (panes) whose purge, 100 days after their end, is past
-- the range: they wait for the end of the stream, where every window fires
-- and is purged in one step, purges at the same (infinite) time in the
-- order of their keys.  Each record is in two windows.
CREATE TABLE wb_sliding (LIKE wb_out INCLUDING ALL);
SELECT mailer.create_job('wb_end_sliding', $${"source": {"type": "generator", "events": 60, "keys": 5, "start_time": "294276-12-25 00:00:00+00", "step": "1 hour"},
  "steps": [{"key_by": {"k": "key"}}, {"window": {"type": "sliding", "size": "2 days", "slide": "1 day", "allowed_lateness": "100 days"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "wb_sliding"}, "state": {"backend": "rocksdb"}}$$) AS end_sliding_job \gset
SELECT mailer.wait_job('wb_end_sliding');
SELECT k, window_start, window_end, n FROM wb_sliding ORDER BY k, window_start;
SELECT sum(n) AS records_twice FROM wb_sliding;
SELECT count(*) AS dead_letters FROM mailer.dead_letters WHERE job_id = :end_sliding_job;

SELECT count(mailer.drop_job(name)) FROM mailer.jobs WHERE name LIKE 'wb\_%';
DROP TABLE wb_out, wb_sessions, wb_sliding;
