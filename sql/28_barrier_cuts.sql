-- Barrier cuts (issue 17): what create_job, describe_job, alter_job,
-- restore_job and mailer.cuts refuse or show without a broker.  The jobs
-- aligning on cuts of a real Kafka are test/t/170..172.
\set VERBOSITY default

CREATE TABLE bc_orders (customer_id text, value jsonb);

-- The spec: accepted, with the defaults shown by describe_job.
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}}') IS NOT NULL AS described;
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g",
  "barrier_topic": "bc_barrier"}, "sink": {"type": "table", "table": "bc_orders", "mode": "append"},
  "checkpoint": {"between_cuts": true, "retain_cuts": 1}}') IS NOT NULL AS described;

-- Refused: a barrier group on a generator.
SELECT mailer.describe_job('{"source": {"type": "generator", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}}');
SELECT mailer.describe_job('{"source": {"type": "generator", "barrier_topic": "bc_barrier"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}}');
-- Accepted: a parallel job, whose subtasks align on the same cuts.
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}, "parallelism": 2}') IS NOT NULL AS described;
-- barrier_group and barrier_topic: non-empty strings.
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": 7},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}}');
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": ""},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}}');
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g",
  "barrier_topic": ""}, "sink": {"type": "table", "table": "bc_orders", "mode": "append"}}');
-- checkpoint.retain_cuts: an integer, at least 1; between_cuts: a boolean.
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}, "checkpoint": {"retain_cuts": 0}}');
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}, "checkpoint": {"retain_cuts": 2.5}}');
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}, "checkpoint": {"retain_cuts": "2"}}');
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}, "checkpoint": {"between_cuts": "yes"}}');
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}, "checkpoint": {"between_cuts": 1}}');

-- A job with a barrier group, stopped before it ever checkpoints.
SELECT mailer.create_job('bc_job', '{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}}') > 0 AS created;
SELECT mailer.stop_job('bc_job');

-- mailer.cuts: no cut seen yet.
SELECT * FROM mailer.cuts('bc_job');
SELECT * FROM mailer.cuts('bc_no_such_job');

-- restore_job: exactly one of epoch and cut_epoch; a cut without a checkpoint.
SELECT mailer.restore_job('bc_job');
SELECT mailer.restore_job('bc_job', epoch => 1, cut_epoch => 1);
SELECT mailer.restore_job('bc_job', cut_epoch => 1);
SELECT mailer.restore_job('bc_job', 1);

-- The SQLSTATEs of the refusals: 22023 or 0A000 for a barrier group where
-- none can be, 22023 for the values and restores.
\set VERBOSITY sqlstate
SELECT mailer.describe_job('{"source": {"type": "generator", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}}');
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}, "checkpoint": {"retain_cuts": 0}}');
SELECT mailer.describe_job('{"source": {"type": "kafka", "brokers": "localhost:1", "topic": "bc", "barrier_group": "g"},
  "sink": {"type": "table", "table": "bc_orders", "mode": "append"}, "checkpoint": {"between_cuts": "yes"}}');
SELECT mailer.restore_job('bc_job');
SELECT mailer.restore_job('bc_job', cut_epoch => 1);
\set VERBOSITY default

-- The new columns.
SELECT last_cut_epoch, cuts_skipped, cuts_partial, cut_records_malformed, cut_held_seconds,
       cut_rewinds, cut_holding_epoch
  FROM mailer.metrics WHERE name = 'bc_job';
SELECT count(*) AS cut_checkpoints FROM mailer.checkpoints WHERE cut_epoch IS NOT NULL;

SELECT mailer.drop_job('bc_job') > 0 AS dropped;
DROP TABLE bc_orders;
