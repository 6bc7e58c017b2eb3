-- The tables of `make bench`: medians over the rounds of what run.sh
-- recorded in the temporary table r (section, job, backend, run, metric,
-- value).  Ratios are taken within a round, then their median is shown.
CREATE TEMP VIEW m AS
SELECT section, job, backend, metric,
	   percentile_cont(0.5) WITHIN GROUP (ORDER BY value) AS v, count(value) AS n
  FROM r GROUP BY 1, 2, 3, 4;
CREATE FUNCTION pg_temp.g(s text, j text, b text, k text) RETURNS numeric
LANGUAGE sql AS $$ SELECT v::numeric FROM m WHERE section = s AND job = j AND backend = b AND metric = k $$;

-- How many rounds of a job hit BENCH_JOB_TIMEOUT (measured on what they read).
CREATE FUNCTION pg_temp.timed_out(s text, j text, b text) RETURNS bigint
LANGUAGE sql AS $$ SELECT coalesce(sum(value), 0)::bigint FROM r
					WHERE section = s AND job = j AND backend = b AND metric = 'timed_out' $$;

\pset format aligned
\pset tuples_only off
\pset footer off
\echo
\echo 'Throughput: records/s and CPU per million records; ratio = records/s over the raw librdkafka records/s of the same round'
SELECT job, backend,
	   round(pg_temp.g(section, job, backend, 'records_per_s')) AS "records/s",
	   round(pg_temp.g(section, job, backend, 'cpu_s_per_m'), 2) AS "CPU-s/M worker",
	   round(pg_temp.g(section, job, backend, 'server_cpu_s_per_m'), 2) AS "CPU-s/M rest of server",
	   round(pg_temp.g(section, job, backend, 'ratio_to_raw'), 3) AS "ratio to raw",
	   round(pg_temp.g(section, job, backend, 'ckpt_ms_median'), 1) AS "ckpt ms",
	   round(pg_temp.g(section, job, backend, 'hwm_mb')) AS "peak RSS MB",
	   max(n) AS runs,
	   pg_temp.timed_out(section, job, backend) AS "timed out"
  FROM m WHERE section = 'throughput'
 GROUP BY section, job, backend
 ORDER BY array_position(ARRAY['raw', 'passthrough', 'append', 'totals', 'tumbling', 'sliding', 'session', 'distinct'], job),
		  backend DESC;

\echo 'Parallelism: the same jobs and topic (8 partitions) at each parallelism; CPU-s/M summed over every subtask; ratios to parallelism 1 within a round'
SELECT split_part(job, '_p', 1) AS job, backend,
	   substring(job FROM '_p([0-9]+)$')::int AS parallelism,
	   round(pg_temp.g(section, job, backend, 'records_per_s')) AS "records/s",
	   round(pg_temp.g(section, job, backend, 'cpu_s_per_m'), 2) AS "CPU-s/M subtasks",
	   round(pg_temp.g(section, job, backend, 'server_cpu_s_per_m'), 2) AS "CPU-s/M rest of server",
	   round(pg_temp.g(section, job, backend, 'broker_cpu_s_per_m'), 2) AS "CPU-s/M broker",
	   round(pg_temp.g(section, job, backend, 'job_cores'), 2) AS "cores busy: subtasks",
	   round(pg_temp.g(section, job, backend, 'broker_cores'), 2) AS "broker",
	   round(pg_temp.g(section, job, backend, 'other_cores'), 2) AS "other",
	   round(pg_temp.g(section, job, backend, 'idle_cores'), 2) AS "idle",
	   round(pg_temp.g(section, job, backend, 'steal_cores'), 2) AS "stolen",
	   round(pg_temp.g(section, job, backend, 'rate_ratio_to_p1'), 3) AS "records/s ratio",
	   round(pg_temp.g(section, job, backend, 'cpu_ratio_to_p1'), 3) AS "CPU/record ratio",
	   round(pg_temp.g(section, job, backend, 'ckpt_ms_median'), 1) AS "ckpt ms",
	   (SELECT round(v) FROM m WHERE section = 'parallelism' AND metric = 'cores') AS cores,
	   max(n) AS runs,
	   pg_temp.timed_out(section, job, backend) AS "timed out"
  FROM m WHERE section = 'parallelism' AND job <> 'machine'
 GROUP BY section, job, backend
 ORDER BY 1, 2 DESC, 3;
-- The goals of issue 13 at parallelism 2.
SELECT split_part(job, '_p', 1) AS job, backend,
	   round(pg_temp.g(section, job, backend, 'cpu_ratio_to_p1'), 3)
		 AS "exchange + alignment overhead: CPU per record, parallelism 2 / 1 (goal <= 1.15)",
	   round(pg_temp.g(section, job, backend, 'rate_ratio_to_p1'), 3) AS "records/s, 2 / 1 (goal >= 1.5)",
	   max(n) AS runs
  FROM m WHERE section = 'parallelism' AND job LIKE '%\_p2'
 GROUP BY section, job, backend
 ORDER BY 1, 2 DESC;

\echo 'Against Apache Flink: tumbling window, RocksDB, 1 s checkpoints, parallelism 1, same CPU (mailer writes a table, Flink a discarding sink)'
SELECT job AS engine,
	   round(pg_temp.g(section, job, backend, 'records_per_s')) AS "records/s",
	   round(pg_temp.g(section, job, backend, 'events_per_cpu_s')) AS "events/CPU-s",
	   round(pg_temp.g(section, job, backend, 'cpu_s_per_m'), 2) AS "CPU-s/M",
	   round(pg_temp.g(section, job, backend, 'process_cpu_s_per_m'), 2) AS "CPU-s/M whole JVM",
	   max(n) AS runs
  FROM m WHERE section = 'flink' AND job IN ('mailer', 'flink')
 GROUP BY section, job, backend
 ORDER BY job DESC;
SELECT round(v::numeric, 2) AS "mailer/Flink events per CPU-s (median of per-round ratios)", n AS runs
  FROM m WHERE section = 'flink' AND metric = 'mailer_over_flink_per_cpu';

\echo 'Kafka sink (issue 14): the orders into a Kafka topic exactly once; 1 s checkpoints (raw: a transaction per second); engine CPU = mailer worker + rest of server, raw program, Flink JVM over execute()'
SELECT split_part(job, '_', 1) AS engine, coalesce(nullif(split_part(job, '_', 2), ''), 'passthrough') AS job,
	   round(pg_temp.g(section, job, backend, 'records_per_s')) AS "records/s",
	   round(pg_temp.g(section, job, backend, 'cpu_s_per_m'), 2) AS "CPU-s/M process",
	   round(pg_temp.g(section, job, backend, 'server_cpu_s_per_m'), 2) AS "CPU-s/M rest of server",
	   round(pg_temp.g(section, job, backend, 'broker_cpu_s_per_m'), 2) AS "CPU-s/M broker",
	   round(pg_temp.g(section, job, backend, 'records_per_cpu_s')) AS "records/CPU-s",
	   round(pg_temp.g(section, job, backend, 'startup_cpu_s'), 1) AS "start-up CPU-s",
	   round(pg_temp.g(section, job, backend, 'net_cpu_s_per_m'), 2) AS "CPU-s/M net of start-up",
	   round(pg_temp.g(section, job, backend, 'records_out_topic')) AS "records in topic",
	   round(pg_temp.g(section, job, backend, 'ckpt_ms_median'), 1) AS "ckpt ms",
	   max(n) FILTER (WHERE metric = 'records_per_s') AS runs,
	   pg_temp.timed_out(section, job, backend) AS "timed out"
  FROM m WHERE section = 'kafka_sink' AND job NOT LIKE 'ratio\_%'
 GROUP BY section, job, backend
 ORDER BY array_position(ARRAY['raw', 'mailer_passthrough', 'flink_passthrough', 'mailer_totals', 'flink_totals'], job);
SELECT replace(job, 'ratio_', '') AS job,
	   round(pg_temp.g(section, job, backend, 'mailer_over_raw_per_cpu'), 3) AS "mailer/raw records per CPU-s",
	   round(pg_temp.g(section, job, backend, 'flink_over_raw_per_cpu'), 3) AS "Flink/raw",
	   round(pg_temp.g(section, job, backend, 'mailer_over_flink_per_cpu'), 2) AS "mailer/Flink",
	   round(pg_temp.g(section, job, backend, 'mailer_over_flink_net_per_cpu'), 2) AS "mailer/Flink net of its start-up",
	   round(pg_temp.g(section, job, backend, 'mailer_over_raw_rate'), 3) AS "mailer/raw records/s",
	   max(n) AS runs
  FROM m WHERE section = 'kafka_sink' AND job LIKE 'ratio\_%'
 GROUP BY section, job, backend
 ORDER BY 1;
\echo 'State scaling: keyed running totals (ckpt ms = mailer.checkpoints.duration_ms; last_checkpoint_ms and its state share state_checkpoint_ms sampled from mailer.metrics; state restore ms = mailer.metrics.state_restore_ms after the kill; memory of the worker sampled every 0.2 s from /proc: peak own = anonymous + file pages (its heap, RocksDB, librdkafka, its libraries), and the p99 and median of the same over the samples, peak shared = the shared buffers it touched (RssShmem), peak RSS = VmHWM, the kernel''s peak of both)'
SELECT replace(job, 'keys_', '') AS keys, backend,
	   round(pg_temp.g(section, job, backend, 'distinct_keys')) AS "distinct keys",
	   round(pg_temp.g(section, job, backend, 'records_per_s')) AS "records/s",
	   round(pg_temp.g(section, job, backend, 'cpu_s_per_m'), 2) AS "CPU-s/M",
	   round(pg_temp.g(section, job, backend, 'ckpt_ms_median'), 1) AS "ckpt ms med",
	   round(pg_temp.g(section, job, backend, 'ckpt_ms_max'), 1) AS "ckpt ms max",
	   round(pg_temp.g(section, job, backend, 'last_ckpt_ms_median')) AS "last_ckpt ms med",
	   round(pg_temp.g(section, job, backend, 'last_ckpt_ms_max')) AS "last_ckpt ms max",
	   round(pg_temp.g(section, job, backend, 'state_ckpt_ms_median'), 1) AS "state ckpt ms med",
	   round(pg_temp.g(section, job, backend, 'state_ckpt_ms_max'), 1) AS "state ckpt ms max",
	   round(pg_temp.g(section, job, backend, 'state_restore_ms'), 1) AS "state restore ms",
	   round(pg_temp.g(section, job, backend, 'restore_s'), 2) AS "restore s",
	   round(pg_temp.g(section, job, backend, 'restore_server_up_s'), 2) AS "server up s",
	   round(pg_temp.g(section, job, backend, 'restore_job_running_s'), 2) AS "job running s",
	   round(pg_temp.g(section, job, backend, 'peak_private_mb')) AS "peak own MB",
	   round(pg_temp.g(section, job, backend, 'own_p99_mb')) AS "own MB p99",
	   round(pg_temp.g(section, job, backend, 'own_p50_mb')) AS "own MB median",
	   round(pg_temp.g(section, job, backend, 'peak_anon_mb')) AS "peak anon MB",
	   round(pg_temp.g(section, job, backend, 'peak_shmem_mb')) AS "peak shared MB",
	   round(pg_temp.g(section, job, backend, 'peak_total_mb')) AS "peak total MB (VmHWM)",
	   round(pg_temp.g(section, job, backend, 'rss_mb')) AS "RSS MB at end",
	   round(pg_temp.g(section, job, backend, 'disk_mb'), 1) AS "state MB",
	   max(n) AS runs,
	   pg_temp.timed_out(section, job, backend) AS "timed out"
  FROM m WHERE section = 'state'
 GROUP BY section, job, backend
 ORDER BY replace(job, 'keys_', '')::bigint, backend DESC;

\echo 'Latency from produce to visible in the sink table (append job, 1 s checkpoints)'
SELECT replace(replace(job, 'rate_', ''), 'pct', '%') AS "of max rate",
	   round(pg_temp.g(section, job, backend, 'target_records_per_s')) AS "records/s",
	   round(pg_temp.g(section, job, backend, 'produced_records_per_s')) AS "produced records/s",
	   round(pg_temp.g(section, job, backend, 'p50_ms')) AS "p50 ms",
	   round(pg_temp.g(section, job, backend, 'p99_ms')) AS "p99 ms",
	   round(pg_temp.g(section, job, backend, 'max_ms')) AS "max ms",
	   max(n) AS runs
  FROM m WHERE section = 'latency' AND job LIKE 'rate_%'
 GROUP BY section, job, backend
 ORDER BY 1;

\echo 'Pulsar source: the passthrough job against a raw WebSocket reader of the same topic; ratio = records/s over the raw reader''s of the same round'
SELECT job, backend,
	   round(pg_temp.g(section, job, backend, 'records_per_s')) AS "records/s",
	   round(pg_temp.g(section, job, backend, 'cpu_s_per_m'), 2) AS "CPU-s/M worker",
	   round(pg_temp.g(section, job, backend, 'server_cpu_s_per_m'), 2) AS "CPU-s/M rest of server",
	   round(pg_temp.g(section, job, backend, 'broker_cpu_s_per_m'), 2) AS "CPU-s/M broker",
	   round(pg_temp.g(section, job, backend, 'ratio_to_raw'), 3) AS "ratio to raw",
	   max(n) AS runs,
	   pg_temp.timed_out(section, job, backend) AS "timed out"
  FROM m WHERE section = 'pulsar'
 GROUP BY section, job, backend
 ORDER BY job <> 'raw', job;

\echo 'The HTTP worker (issue 15): its CPU as a share of one core, with the scrape section''s jobs'
SELECT CASE job WHEN 'idle' THEN 'idle (history sampler)'
				WHEN 'metrics_and_jobs' THEN '/metrics + /api/jobs every second'
				ELSE '/api/jobs + 20 /api/jobs/<name> every second' END AS load,
	   round(100 * pg_temp.g(section, job, backend, 'cpu_share'), 3) AS "% of a core",
	   round(pg_temp.g(section, job, backend, 'bytes_per_round')) AS "bytes a second",
	   round(1000 * pg_temp.g(section, job, backend, 'seconds_per_round'), 1) AS "ms a second",
	   max(n) AS runs
  FROM m WHERE section = 'scrape'
 GROUP BY section, job, backend
 ORDER BY 2;

\echo 'Sink upsert: one checkpoint of changed keys (mailer.checkpoints.duration_ms of a stateless job; CPU of its worker meanwhile) against psql INSERT ... SELECT ... ON CONFLICT DO UPDATE of the same rows, same table (CPU of its backend); new keys and existing keys'
SELECT replace(job, 'ratio_', '') AS keys,
	   round(pg_temp.g(section, 'mailer_' || replace(job, 'ratio_', ''), backend, 'rows_per_s')) AS "mailer rows/s",
	   round(pg_temp.g(section, 'psql_' || replace(job, 'ratio_', ''), backend, 'rows_per_s')) AS "psql rows/s",
	   round(pg_temp.g(section, 'mailer_' || replace(job, 'ratio_', ''), backend, 'ckpt_ms'), 1) AS "mailer ms",
	   round(pg_temp.g(section, 'psql_' || replace(job, 'ratio_', ''), backend, 'ckpt_ms'), 1) AS "psql ms",
	   round(pg_temp.g(section, job, backend, 'psql_over_mailer'), 2) AS "psql/mailer (goal <= 1.2)",
	   round(pg_temp.g(section, 'mailer_' || replace(job, 'ratio_', ''), backend, 'cpu_s'), 2) AS "mailer CPU-s",
	   round(pg_temp.g(section, 'psql_' || replace(job, 'ratio_', ''), backend, 'cpu_s'), 2) AS "psql CPU-s",
	   round(pg_temp.g(section, job, backend, 'psql_over_mailer_cpu'), 2) AS "rows per CPU-s psql/mailer",
	   max(n) AS runs
  FROM m WHERE section = 'sink' AND job LIKE 'ratio\_%'
 GROUP BY section, job, backend
 ORDER BY 1 DESC;

\echo 'The worker''s memory at a checkpoint that emits many rows: a sliding job with emit update over the same orders (one pane), whose one checkpoint emits four windows a key; the worker''s own memory (anonymous + file pages) sampled every 0.2 s'
SELECT job, backend,
	   round(pg_temp.g(section, job, backend, 'own_p50_mb'), 1) AS "own MB, median",
	   round(pg_temp.g(section, job, backend, 'peak_private_mb'), 1) AS "own MB, peak",
	   round(pg_temp.g(section, job, backend, 'ckpt_ms'), 1) AS "checkpoint ms",
	   max(n) AS runs
  FROM m WHERE section = 'sink' AND job = 'sliding_update'
 GROUP BY section, job, backend;
