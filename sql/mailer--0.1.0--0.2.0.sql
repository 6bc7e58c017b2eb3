-- mailer 0.1.0 -> 0.2.0: upgrade script.
-- Every change to the catalog or the SQL surface in 0.2.0 is made here too,
-- so that ALTER EXTENSION mailer UPDATE gives what a fresh install has.
\echo Use "ALTER EXTENSION mailer UPDATE TO '0.2.0'" to load this file. \quit

-- partition_metrics.offsets_skipped: offsets that retention deleted before
-- the job read them.
DROP VIEW mailer.partition_metrics;
DROP FUNCTION mailer._live_partitions();
CREATE FUNCTION mailer._live_partitions(
	OUT job_id bigint, OUT topic text, OUT partition integer,
	OUT "position" bigint, OUT end_offset bigint, OUT records_in bigint,
	OUT watermark timestamptz, OUT idle boolean, OUT offsets_skipped bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'mailer_live_partitions'
LANGUAGE C STRICT VOLATILE;
CREATE VIEW mailer.partition_metrics AS
SELECT j.name, p.topic, p.partition, p.position, p.end_offset,
	   CASE WHEN p.end_offset >= 0 AND p.position >= 0
			THEN greatest(p.end_offset - p.position, 0) END AS lag,
	   p.records_in, p.watermark, p.idle, p.offsets_skipped
  FROM mailer._live_partitions() p
  JOIN mailer.job j USING (job_id);
GRANT SELECT ON mailer.partition_metrics TO PUBLIC;
