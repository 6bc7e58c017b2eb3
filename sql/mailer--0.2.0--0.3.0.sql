-- mailer 0.2.0 -> 0.3.0: the Kafka sink.
-- A fresh install runs mailer--0.2.0.sql and then this script, so that the
-- two ways to 0.3.0 cannot differ.
\echo Use "ALTER EXTENSION mailer UPDATE TO '0.3.0'" to load this file. \quit

-- A Kafka sink's records of committed epochs that are not yet known to be
-- in the topic: written in each checkpoint's transaction, produced after it
-- commits in one Kafka transaction per checkpoint, and deleted once that
-- commits (docs/ARCHITECTURE.md, "The Kafka sink").  Records are content:
-- no role but the extension's owner reads them.
CREATE TABLE mailer.kafka_outbox (
	job_id			bigint NOT NULL REFERENCES mailer.job ON DELETE CASCADE,
	subtask			integer NOT NULL,
	epoch			bigint NOT NULL,
	seq				integer NOT NULL,		-- the record's place in its epoch
	key				bytea,
	value			bytea,					-- null: a tombstone
	headers			bytea,					-- the spec's headers' values, encoded
	PRIMARY KEY (job_id, subtask, epoch, seq)
);

-- How far each subtask's Kafka sink has published.  The Kafka transaction's
-- own epoch marker decides; this row follows it, and holds the transactional
-- id and the generation that restore_job moves on.
CREATE TABLE mailer.kafka_sink_progress (
	job_id			bigint NOT NULL REFERENCES mailer.job ON DELETE CASCADE,
	subtask			integer NOT NULL,
	transactional_id text NOT NULL,
	generation		integer NOT NULL DEFAULT 1,
	published_epoch	bigint NOT NULL DEFAULT 0,
	published_at	timestamptz,
	PRIMARY KEY (job_id, subtask)
);

SELECT pg_catalog.pg_extension_config_dump('mailer.kafka_outbox', '');
SELECT pg_catalog.pg_extension_config_dump('mailer.kafka_sink_progress', '');
REVOKE ALL ON mailer.kafka_outbox, mailer.kafka_sink_progress FROM PUBLIC;

-- One row per subtask of a job with a Kafka sink, once its worker has
-- started: what it has published and what waits in the outbox.
CREATE VIEW mailer.kafka_sinks AS
SELECT j.name AS job, p.subtask,
	   j.spec OPERATOR(pg_catalog.->) 'sink' OPERATOR(pg_catalog.->>) 'topic' AS topic,
	   coalesce(j.spec OPERATOR(pg_catalog.->) 'sink' OPERATOR(pg_catalog.->>) 'delivery', 'exactly_once') AS delivery,
	   p.transactional_id, p.generation, p.published_epoch, p.published_at,
	   (SELECT pg_catalog.count(*) FROM mailer.kafka_outbox o
		 WHERE o.job_id OPERATOR(pg_catalog.=) p.job_id
		   AND o.subtask OPERATOR(pg_catalog.=) p.subtask) AS pending_records
  FROM mailer.kafka_sink_progress p
  JOIN mailer.job j ON j.job_id OPERATOR(pg_catalog.=) p.job_id;

GRANT SELECT ON mailer.kafka_sinks TO PUBLIC;
