-- alter_job: a stopped job's parallelism changes; nothing else may, and
-- the errors say where the spec differs.
-- wait_job reports progress in NOTICEs every few seconds, as often as the
-- machine is slow: the expected output has none.
SET client_min_messages = warning;
\set VERBOSITY default

CREATE TABLE aj_orders (order_id bigint, customer_id text, amount numeric);
CREATE ROLE regress_mailer_alter LOGIN;

-- The spec as the user gives it.
CREATE TEMP TABLE aj_given AS SELECT $${
  "source": {"type": "generator", "events": 100},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint",
                     "customer_id": "value->>'customer_id'",
                     "amount": "(value->>'amount')::numeric"}}],
  "sink": {"type": "table", "table": "aj_orders", "mode": "append"}
}$$::jsonb AS spec;
SELECT mailer.create_job('aj_job', (SELECT spec FROM aj_given)) > 0 AS created;
-- create_job pinned the key groups (and the sink) into the stored spec.
SELECT spec->'key_groups' AS key_groups, spec->'sink' AS sink, parallelism
  FROM mailer.jobs WHERE name = 'aj_job';
SELECT mailer.wait_job('aj_job', '2 minutes');

-- A job that is not stopped.
SELECT mailer.alter_job('aj_job', (SELECT spec || '{"parallelism": 2}' FROM mailer.jobs WHERE name = 'aj_job'));
SELECT mailer.stop_job('aj_job');

-- A job that does not exist.
SELECT mailer.alter_job('aj_none', '{}');

-- Not the owner.
SET ROLE regress_mailer_alter;
SELECT mailer.alter_job('aj_job', (SELECT spec || '{"parallelism": 2}' FROM mailer.jobs WHERE name = 'aj_job'));
RESET ROLE;

-- Any other change is refused at its JSON path.
SELECT mailer.alter_job('aj_job', (SELECT jsonb_set(spec, '{source,events}', '200') || '{"parallelism": 2}'
									 FROM mailer.jobs WHERE name = 'aj_job'));
SELECT mailer.alter_job('aj_job', (SELECT jsonb_set(spec, '{steps,0,map,amount}', '"1"')
									 FROM mailer.jobs WHERE name = 'aj_job'));
SELECT mailer.alter_job('aj_job', (SELECT spec || '{"on_error": "skip"}' FROM mailer.jobs WHERE name = 'aj_job'));
SELECT mailer.alter_job('aj_job', (SELECT spec || '{"key_groups": 64, "parallelism": 2}' FROM mailer.jobs WHERE name = 'aj_job'));
SELECT mailer.alter_job('aj_job', (SELECT jsonb_set(spec, '{steps}', spec->'steps' || '[{"filter": "true"}]')
									 FROM mailer.jobs WHERE name = 'aj_job'));

-- The new spec is judged as create_job judges one.
SELECT mailer.alter_job('aj_job', (SELECT spec || '{"parallelism": 0}' FROM mailer.jobs WHERE name = 'aj_job'));
SELECT mailer.alter_job('aj_job', (SELECT spec || '{"parallelism": 9}' FROM mailer.jobs WHERE name = 'aj_job'));
SELECT mailer.alter_job('aj_job', (SELECT spec || '{"parallelism": 200}' FROM mailer.jobs WHERE name = 'aj_job'));
SELECT mailer.alter_job('aj_job', (SELECT spec || '{"colour": "blue"}' FROM mailer.jobs WHERE name = 'aj_job'));
SET mailer.max_parallelism_per_job = 64;
SELECT mailer.alter_job('aj_job', (SELECT spec || '{"parallelism": 40}' FROM mailer.jobs WHERE name = 'aj_job'));
RESET mailer.max_parallelism_per_job;

-- The parallelism changes; the spec as stored, or as first given (the
-- pinned fields are the same), both do.
SELECT mailer.alter_job('aj_job', (SELECT spec || '{"parallelism": 2}' FROM mailer.jobs WHERE name = 'aj_job'));
SELECT spec->'parallelism' AS parallelism_in_spec, parallelism, state
  FROM mailer.jobs WHERE name = 'aj_job';
SELECT name, parallelism FROM mailer.metrics WHERE name = 'aj_job';
SELECT mailer.alter_job('aj_job', (SELECT spec FROM aj_given));
SELECT spec->'parallelism' AS parallelism_in_spec, spec->'key_groups' AS key_groups, parallelism
  FROM mailer.jobs WHERE name = 'aj_job';

-- A secret option: its mask in the spec means unchanged; another value is a change.
CREATE TEMP TABLE aj_kafka AS SELECT $${
  "source": {"type": "kafka", "brokers": "localhost:1", "topic": "aj",
             "options": {"sasl.password": "aj-secret-1"}},
  "steps": [{"map": {"customer_id": "key"}}],
  "sink": {"type": "table", "table": "aj_orders", "mode": "append"}
}$$::jsonb AS spec;
SELECT mailer.create_job('aj_secret', (SELECT spec FROM aj_kafka)) > 0 AS created;
SELECT mailer.stop_job('aj_secret');
SELECT spec->'source'->'options' AS options FROM mailer.jobs WHERE name = 'aj_secret';
SELECT mailer.alter_job('aj_secret', (SELECT jsonb_set(spec, '{source,options,sasl.password}', '"aj-secret-2"')
										FROM mailer.jobs WHERE name = 'aj_secret'));
SELECT mailer.alter_job('aj_secret', (SELECT spec || '{"parallelism": 2}' FROM mailer.jobs WHERE name = 'aj_secret'));
SELECT spec->'parallelism' AS parallelism, spec->'source'->'options' AS options
  FROM mailer.jobs WHERE name = 'aj_secret';
SELECT s.secrets FROM mailer.job_secret s JOIN mailer.job j USING (job_id) WHERE j.name = 'aj_secret';

-- An owner who is not a superuser alters its job, secrets and all.
GRANT SELECT, INSERT ON aj_orders TO regress_mailer_alter;
GRANT SELECT ON aj_kafka TO regress_mailer_alter;
SET ROLE regress_mailer_alter;
SELECT mailer.create_job('aj_owned', (SELECT spec FROM aj_kafka)) > 0 AS created;
SELECT mailer.stop_job('aj_owned');
SELECT mailer.alter_job('aj_owned', (SELECT spec || '{"parallelism": 3}' FROM mailer.jobs WHERE name = 'aj_owned'));
SELECT parallelism FROM mailer.jobs WHERE name = 'aj_owned';
SELECT mailer.drop_job('aj_owned') > 0 AS dropped;
RESET ROLE;

SELECT mailer.drop_job('aj_job') > 0 AS dropped, mailer.drop_job('aj_secret') > 0 AS dropped;
DROP TABLE aj_orders;
DROP OWNED BY regress_mailer_alter;
DROP ROLE regress_mailer_alter;
