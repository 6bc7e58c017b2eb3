-- mailer 0.2.0: install script
\echo Use "CREATE EXTENSION mailer" to load this file. \quit

-- CREATE EXTENSION reuses a schema named mailer that exists already, and
-- names in this script resolve through it: one made by another role could
-- hold a function or operator that a view or policy below would pick over
-- pg_catalog's.  The schema must belong to a superuser, be writable by
-- superusers only and hold nothing but this extension's objects.
DO $$
DECLARE
	nsp pg_catalog.oid := pg_catalog.to_regnamespace('mailer');
	ext pg_catalog.oid := (SELECT e.oid FROM pg_catalog.pg_extension e
							WHERE e.extname OPERATOR(pg_catalog.=) 'mailer');
	strays pg_catalog.text;
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_namespace n
					 JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
					WHERE n.oid OPERATOR(pg_catalog.=) nsp AND r.rolsuper)
	   OR EXISTS (SELECT FROM pg_catalog.pg_roles r
				   WHERE NOT r.rolsuper AND pg_catalog.has_schema_privilege(r.oid, nsp, 'CREATE'))
	THEN
		RAISE EXCEPTION 'schema mailer exists and is not safe for the mailer extension'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = 'Schema mailer is owned by a role that is not a superuser, or a role that is not a superuser may create objects in it.',
				  HINT = 'Find out who made schema mailer and why, drop or rename it, then create the extension again.';
	END IF;
	SELECT pg_catalog.string_agg(x, ', ') INTO strays FROM (
		SELECT 'function ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text
		  FROM pg_catalog.pg_proc p
		 WHERE p.pronamespace OPERATOR(pg_catalog.=) nsp
		   AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
							WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
							  AND d.objid OPERATOR(pg_catalog.=) p.oid
							  AND d.refobjid OPERATOR(pg_catalog.=) ext
							  AND d.deptype OPERATOR(pg_catalog.=) 'e')
		UNION ALL
		SELECT 'operator ' OPERATOR(pg_catalog.||) o.oid::pg_catalog.regoperator::pg_catalog.text
		  FROM pg_catalog.pg_operator o
		 WHERE o.oprnamespace OPERATOR(pg_catalog.=) nsp
		UNION ALL
		SELECT 'type ' OPERATOR(pg_catalog.||) t.oid::pg_catalog.regtype::pg_catalog.text
		  FROM pg_catalog.pg_type t
		 WHERE t.typnamespace OPERATOR(pg_catalog.=) nsp AND t.typrelid OPERATOR(pg_catalog.=) 0
		   AND t.typcategory OPERATOR(pg_catalog.<>) 'A'
		   AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
							WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
							  AND d.objid OPERATOR(pg_catalog.=) t.oid
							  AND d.refobjid OPERATOR(pg_catalog.=) ext
							  AND d.deptype OPERATOR(pg_catalog.=) 'e')
		UNION ALL
		SELECT 'relation ' OPERATOR(pg_catalog.||) c.oid::pg_catalog.regclass::pg_catalog.text
		  FROM pg_catalog.pg_class c
		 WHERE c.relnamespace OPERATOR(pg_catalog.=) nsp
		   AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,v,m,f,p,c}'::pg_catalog."char"[])
		   AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
							WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
							  AND d.objid OPERATOR(pg_catalog.=) c.oid
							  AND d.refobjid OPERATOR(pg_catalog.=) ext
							  AND d.deptype OPERATOR(pg_catalog.=) 'e')
		UNION ALL
		SELECT 'collation ' OPERATOR(pg_catalog.||) co.collname::pg_catalog.text
		  FROM pg_catalog.pg_collation co WHERE co.collnamespace OPERATOR(pg_catalog.=) nsp
		UNION ALL
		SELECT 'conversion ' OPERATOR(pg_catalog.||) cv.conname::pg_catalog.text
		  FROM pg_catalog.pg_conversion cv WHERE cv.connamespace OPERATOR(pg_catalog.=) nsp
		UNION ALL
		SELECT 'operator family ' OPERATOR(pg_catalog.||) f.opfname::pg_catalog.text
		  FROM pg_catalog.pg_opfamily f WHERE f.opfnamespace OPERATOR(pg_catalog.=) nsp
		UNION ALL
		SELECT 'extension ' OPERATOR(pg_catalog.||) e.extname::pg_catalog.text
		  FROM pg_catalog.pg_extension e
		 WHERE e.extnamespace OPERATOR(pg_catalog.=) nsp AND e.oid OPERATOR(pg_catalog.<>) ext
	) s(x);
	IF strays IS NOT NULL THEN
		RAISE EXCEPTION 'schema mailer holds objects that are not part of the mailer extension'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'Schema mailer holds ' OPERATOR(pg_catalog.||) strays OPERATOR(pg_catalog.||) '.',
				  HINT = 'Find out who made them and why, move or drop them, then create or update the extension again.';
	END IF;
END
$$;

COMMENT ON SCHEMA mailer IS 'mailer: stream-processing jobs from Kafka into tables';

--
-- Catalog.  The tables are written by mailer's functions, the launcher and
-- the job workers (all as the extension's owner); users read them through
-- the views below.  Rows that users create are dumped by pg_dump.
--

-- The desired state of every job, as the SQL functions set it.
CREATE TABLE mailer.job (
	job_id			bigserial PRIMARY KEY,
	name			text NOT NULL UNIQUE,
	owner			regrole NOT NULL,
	spec			jsonb NOT NULL,			-- as given, secrets replaced by ********
	desired_state	text NOT NULL DEFAULT 'running'
					CHECK (desired_state OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'stopped'])),
	search_path		text NOT NULL,			-- the creator's, so names resolve alike in the worker
	created_at		timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- Secret option values (source.options), readable by superusers only; the
-- job's worker merges them back into the spec it runs.
CREATE TABLE mailer.job_secret (
	job_id			bigint PRIMARY KEY REFERENCES mailer.job ON DELETE CASCADE,
	secrets			jsonb NOT NULL			-- {"json path": "value", ...}
);

-- What the launcher last recorded of a job; only the launcher writes it.
CREATE TABLE mailer.job_status (
	job_id			bigint PRIMARY KEY REFERENCES mailer.job ON DELETE CASCADE,
	state			text NOT NULL DEFAULT 'starting'
					CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['starting', 'running', 'finished', 'stopped', 'failed', 'restarting'])),
	pid				integer,
	restarts		integer NOT NULL DEFAULT 0,
	failures		integer NOT NULL DEFAULT 0,	-- consecutive, for the restart backoff
	last_error		text,
	last_error_at	timestamptz,
	changed_at		timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- One row per subtask of each committed checkpoint, the newest
-- `checkpoint.retain` epochs kept.  Subtask 0's row is the epoch's commit
-- decision: an epoch without it is not committed.
CREATE TABLE mailer.checkpoints (
	job_id			bigint NOT NULL REFERENCES mailer.job ON DELETE CASCADE,
	epoch			bigint NOT NULL,
	positions		jsonb NOT NULL,			-- where each partition resumes
	watermark		timestamptz,
	partition_watermarks jsonb,				-- largest event time per partition (µs since 1970)
	state_ref		text,					-- the state snapshot this epoch restores
	counters		jsonb NOT NULL,
	committed_at	timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	duration_ms		double precision NOT NULL,
	final			boolean NOT NULL DEFAULT false,	-- taken as the worker stopped cleanly
	state_layout	text,					-- the key and aggregate types the state was written with
	subtask			integer NOT NULL DEFAULT 0,	-- whose share of the epoch; 0's row commits it
	parallelism		integer NOT NULL DEFAULT 1,	-- the job's parallelism when the epoch was cut
	partition_records_in jsonb,				-- records read per partition up to the epoch
	cut_epoch		bigint,					-- the barrier cut the epoch was taken at, if one
	PRIMARY KEY (job_id, epoch, subtask)
);

-- Records that failed a step, written with the checkpoint that covers them.
CREATE TABLE mailer.dead_letters (
	job_id			bigint NOT NULL REFERENCES mailer.job ON DELETE CASCADE,
	at				timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	epoch			bigint NOT NULL,
	topic			text,
	partition		integer,
	"offset"		bigint,
	key				bytea,
	value			bytea,
	stage			text NOT NULL,
	error			text NOT NULL
);
CREATE INDEX ON mailer.dead_letters (job_id, epoch);

-- Keyed state of jobs on the memory backend: one row per key, its value as
-- of the job's newest committed checkpoint, updated in place (the fillfactor
-- leaves room on each page for HOT updates: at 40, for two or three versions
-- of each row that a snapshot held by another session keeps from pruning).
-- No index: the worker keeps each row's address and writes it there, and
-- reads the rows only when it opens the state (see docs/ARCHITECTURE.md,
-- "The memory backend's tables").  No foreign key: a checkpoint writes many
-- rows and its mailer.checkpoints row (which has one) already ties them to
-- a live job; drop_job deletes them.
CREATE TABLE mailer.memory_state (
	job_id			bigint NOT NULL,
	key				bytea NOT NULL,
	value			bytea NOT NULL,
	key_group		integer NOT NULL	-- after value: as an update from 0.1.0 leaves it
) WITH (fillfactor = 40);

-- The undo of the memory backend's checkpoints: each key an epoch changed,
-- with its value before (NULL: absent), kept while a retained epoch may be
-- restored.  A row holds many keys of one key group, keys[i] and
-- old_values[i] together, up to about a page: toast_tuple_target at its
-- largest keeps such a row as it is, neither compressed nor split.
CREATE TABLE mailer.memory_undo (
	job_id			bigint NOT NULL,
	epoch			bigint NOT NULL,
	key_group		integer NOT NULL,
	keys			bytea[] NOT NULL,
	old_values		bytea[] NOT NULL
) WITH (toast_tuple_target = 8160);
CREATE INDEX ON mailer.memory_undo (job_id, epoch, key_group);

-- The redo of the memory backend's checkpoints: each key an epoch changed,
-- with its value after (NULL: deleted), packed as the undo is.  A
-- checkpoint writes only this; every few checkpoints one folds the keys
-- changed since the last fold into memory_state (with their undo) instead,
-- but for the new keys it carries into its own redo, and an open replays
-- the redo from the fold it rewound to on (docs/ARCHITECTURE.md, "The
-- memory backend's tables").
CREATE TABLE mailer.memory_redo (
	job_id			bigint NOT NULL,
	epoch			bigint NOT NULL,
	key_group		integer NOT NULL,
	keys			bytea[] NOT NULL,
	new_values		bytea[] NOT NULL
) WITH (toast_tuple_target = 8160);
CREATE INDEX ON mailer.memory_redo (job_id, epoch, key_group);

-- The four tables with no primary key are deleted from (drop_job,
-- restore_job, the undo's cleanup, a dead letter's owner), memory_state's
-- rows updated too (the checkpoints).
-- Under a publication FOR ALL TABLES (a CDC tool's, say) PostgreSQL refuses
-- UPDATE and DELETE on a table without a replica identity, which would stop
-- every memory-backend job; FULL identifies a row by all its columns, what
-- a subscriber needs to apply the change.  It costs nothing below
-- wal_level = logical, and above it the old row in the WAL of each update
-- and delete (the worker's heap-level writes included: heap_update and
-- heap_delete log what the table's identity asks for).
ALTER TABLE mailer.dead_letters REPLICA IDENTITY FULL;
ALTER TABLE mailer.memory_state REPLICA IDENTITY FULL;
ALTER TABLE mailer.memory_undo REPLICA IDENTITY FULL;
ALTER TABLE mailer.memory_redo REPLICA IDENTITY FULL;

SELECT pg_catalog.pg_extension_config_dump('mailer.job', '');
SELECT pg_catalog.pg_extension_config_dump('mailer.job_job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('mailer.job_secret', '');
SELECT pg_catalog.pg_extension_config_dump('mailer.job_status', '');
SELECT pg_catalog.pg_extension_config_dump('mailer.checkpoints', '');
SELECT pg_catalog.pg_extension_config_dump('mailer.dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('mailer.memory_state', '');
SELECT pg_catalog.pg_extension_config_dump('mailer.memory_undo', '');
SELECT pg_catalog.pg_extension_config_dump('mailer.memory_redo', '');

REVOKE ALL ON mailer.job, mailer.job_secret, mailer.job_status, mailer.checkpoints,
	mailer.dead_letters, mailer.memory_state, mailer.memory_undo, mailer.memory_redo FROM PUBLIC;

-- A job's owner (and members of the owning role) may read its rows of these;
-- superusers read everything.  Jobs and checkpoints are no secret; a job's
-- last error may quote its records (a failed cast, a refused row), so only
-- mailer.jobs shows it, to the owner.
GRANT SELECT ON mailer.job, mailer.checkpoints TO PUBLIC;
GRANT SELECT (job_id, state, pid, restarts, failures, last_error_at, changed_at)
	ON mailer.job_status TO PUBLIC;
GRANT SELECT ON mailer.job_secret TO PUBLIC;
GRANT SELECT, DELETE ON mailer.dead_letters TO PUBLIC;
ALTER TABLE mailer.job_secret ENABLE ROW LEVEL SECURITY;
ALTER TABLE mailer.dead_letters ENABLE ROW LEVEL SECURITY;
-- Every function and operator of a policy or view is qualified: names
-- resolve through schema mailer too (see the check at the top).
CREATE POLICY owner_reads ON mailer.job_secret FOR SELECT
	USING (EXISTS (SELECT 1 FROM mailer.job j
					WHERE j.job_id OPERATOR(pg_catalog.=) job_secret.job_id
					  AND pg_catalog.pg_has_role(j.owner, 'USAGE')));
CREATE POLICY owner_reads ON mailer.dead_letters FOR SELECT
	USING (EXISTS (SELECT 1 FROM mailer.job j
					WHERE j.job_id OPERATOR(pg_catalog.=) dead_letters.job_id
					  AND pg_catalog.pg_has_role(j.owner, 'USAGE')));
CREATE POLICY owner_deletes ON mailer.dead_letters FOR DELETE
	USING (EXISTS (SELECT 1 FROM mailer.job j
					WHERE j.job_id OPERATOR(pg_catalog.=) dead_letters.job_id
					  AND pg_catalog.pg_has_role(j.owner, 'USAGE')));

--
-- SQL API.  The functions check that the caller owns the job (or is a
-- superuser) and write the catalog on the caller's behalf.
--

CREATE FUNCTION mailer.create_job(name text, spec jsonb)
RETURNS bigint
AS 'MODULE_PATHNAME', 'mailer_create_job'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION mailer.create_job(text, jsonb) IS
	'Validate a job spec, create the job owned by the caller and start it; returns the job id';

CREATE FUNCTION mailer.describe_job(spec jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'mailer_describe_job'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION mailer.describe_job(jsonb) IS
	'Validate a job spec and return its plan, creating nothing';

CREATE FUNCTION mailer.start_job(name text)
RETURNS text
AS 'MODULE_PATHNAME', 'mailer_start_job'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION mailer.start_job(text) IS
	'Set a job running; it resumes from its last checkpoint; returns its state';

CREATE FUNCTION mailer.stop_job(name text, timeout interval DEFAULT '60 seconds')
RETURNS text
AS 'MODULE_PATHNAME', 'mailer_stop_job'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION mailer.stop_job(text, interval) IS
	'Stop a job after a final checkpoint, waiting for its worker to exit; returns its state';

CREATE FUNCTION mailer.drop_job(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'mailer_drop_job'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION mailer.drop_job(text) IS
	'Stop a job and remove it with its state, checkpoints and dead letters; returns its id';

CREATE FUNCTION mailer.restore_job(name text, epoch bigint DEFAULT NULL, cut_epoch bigint DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'mailer_restore_job'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION mailer.restore_job(text, bigint, bigint) IS
	'Rewind a stopped job to a retained checkpoint, by epoch or by barrier cut epoch (state and source positions); returns the epoch';

CREATE FUNCTION mailer.alter_job(name text, spec jsonb)
RETURNS void
AS 'MODULE_PATHNAME', 'mailer_alter_job'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION mailer.alter_job(text, jsonb) IS
	'Change the spec of a stopped job; only its parallelism may change, and its state moves at the next start';

CREATE FUNCTION mailer.wait_job(name text, timeout interval DEFAULT '60 seconds')
RETURNS text
AS 'MODULE_PATHNAME', 'mailer_wait_job'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION mailer.wait_job(text, interval) IS
	'Wait until the job has committed all input available now (or has ended); returns its state';

-- Text to timestamptz as a cast would, quicker for ISO 8601 with an offset;
-- job expressions use it in place of text::timestamptz.
CREATE FUNCTION mailer._timestamptz_iso(text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'mailer_timestamptz_iso'
LANGUAGE C STRICT STABLE PARALLEL SAFE;

--
-- Views.
--

-- A row per job (per_subtask: per subtask of a running job) with what its
-- workers keep in shared memory.
CREATE FUNCTION mailer._live_jobs(
	per_subtask boolean DEFAULT false,
	OUT job_id bigint, OUT live_state text, OUT pid integer, OUT error text,
	OUT error_at timestamptz, OUT counters jsonb, OUT input_rate double precision,
	OUT last_checkpoint_epoch bigint, OUT last_checkpoint_at timestamptz,
	OUT last_checkpoint_ms bigint, OUT watermark timestamptz,
	OUT state_bytes bigint, OUT consumer_lag bigint,
	OUT state_checkpoint_ms double precision, OUT state_restore_ms double precision,
	OUT waiting_for text, OUT subtask integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'mailer_live_jobs'
LANGUAGE C STRICT VOLATILE;

CREATE FUNCTION mailer._live_partitions(
	OUT job_id bigint, OUT topic text, OUT partition integer,
	OUT "position" bigint, OUT end_offset bigint, OUT records_in bigint,
	OUT watermark timestamptz, OUT idle boolean, OUT offsets_skipped bigint,
	OUT subtask integer, OUT ahead boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'mailer_live_partitions'
LANGUAGE C STRICT VOLATILE;

-- A job's state: the launcher's record, refined by its running worker.  A
-- job set to stopped whose worker has exited is stopped, whether or not the
-- launcher has recorded it yet; pid is that of a live worker only, and of
-- none once the job has finished or failed (its worker is exiting).
-- state and waiting_for (broker, table, lock: while the state is waiting)
-- say what is true now; last_error and last_error_at are the last error
-- and its time, kept once the job has gone on.  A parallel job is one row:
-- its coordinator's pid, and what any of its subtasks waits for.
CREATE VIEW mailer.jobs AS
SELECT j.job_id, j.name, j.owner, j.spec, j.desired_state,
	   CASE
		 WHEN l.live_state IS NOT NULL
			  AND s.state OPERATOR(pg_catalog.<>) ALL (ARRAY['stopped', 'finished', 'failed'])
		   THEN l.live_state
		 -- stop_job has returned, the launcher has not recorded it yet
		 WHEN j.desired_state OPERATOR(pg_catalog.=) 'stopped' AND l.pid IS NULL
			  AND coalesce(s.state, 'starting') OPERATOR(pg_catalog.<>) ALL (ARRAY['finished', 'failed'])
		   THEN 'stopped'
		 ELSE coalesce(s.state, 'starting')
	   END AS state,
	   CASE WHEN s.state OPERATOR(pg_catalog.<>) ALL (ARRAY['stopped', 'finished', 'failed']) THEN l.waiting_for END AS waiting_for,
	   CASE WHEN s.state OPERATOR(pg_catalog.=) ANY (ARRAY['finished', 'failed']) THEN NULL ELSE l.pid END AS pid,	-- a live worker's
	   coalesce(s.restarts, 0) AS restarts,
	   CASE
		 WHEN coalesce(l.error, s.last_error) IS NULL OR pg_catalog.pg_has_role(j.owner, 'USAGE')
		   THEN coalesce(l.error, s.last_error)
		 ELSE '<insufficient privilege>'
	   END AS last_error,
	   coalesce(l.error_at, s.last_error_at) AS last_error_at,
	   j.created_at,
	   coalesce((j.spec OPERATOR(pg_catalog.->>) 'parallelism')::integer, 1) AS parallelism
  FROM mailer.job j
  LEFT JOIN mailer.job_status s ON s.job_id OPERATOR(pg_catalog.=) j.job_id
  LEFT JOIN mailer._live_jobs() l ON l.job_id OPERATOR(pg_catalog.=) j.job_id;

-- One row per job: a running job's counters, rate and lag are the sums over
-- its subtasks, its watermark their least (_live_jobs); a job without a
-- worker shows those of its newest committed epoch, summed likewise over
-- the epoch's rows (one per subtask).
CREATE VIEW mailer.metrics AS
SELECT j.name, j.state,
	   coalesce((l.counters OPERATOR(pg_catalog.->>) 'records_in')::bigint, c.records_in, 0) AS records_in,
	   coalesce((l.counters OPERATOR(pg_catalog.->>) 'records_accepted')::bigint, c.records_accepted, 0) AS records_accepted,
	   coalesce((l.counters OPERATOR(pg_catalog.->>) 'records_out')::bigint, c.records_out, 0) AS records_out,
	   coalesce((l.counters OPERATOR(pg_catalog.->>) 'records_filtered')::bigint, c.records_filtered, 0) AS records_filtered,
	   coalesce((l.counters OPERATOR(pg_catalog.->>) 'records_dead_lettered')::bigint, c.records_dead_lettered, 0) AS records_dead_lettered,
	   coalesce((l.counters OPERATOR(pg_catalog.->>) 'records_skipped')::bigint, c.records_skipped, 0) AS records_skipped,
	   coalesce((l.counters OPERATOR(pg_catalog.->>) 'records_late')::bigint, c.records_late, 0) AS records_late,
	   coalesce(l.input_rate, 0) AS input_rate,
	   l.consumer_lag,
	   coalesce(l.watermark, c.watermark) AS watermark,
	   coalesce(l.last_checkpoint_epoch, c.epoch) AS last_checkpoint_epoch,
	   coalesce(l.last_checkpoint_at, c.committed_at) AS last_checkpoint_at,
	   coalesce(l.last_checkpoint_ms, c.duration_ms::bigint) AS last_checkpoint_ms,
	   l.state_bytes,
	   l.state_checkpoint_ms,
	   l.state_restore_ms,
	   j.parallelism,
	   -- barrier cuts (docs/ARCHITECTURE.md, "Barrier cuts"), NULL for a job
	   -- without a barrier group: the last cut checkpointed at, the cuts
	   -- skipped, the time held at cuts, rewinds to take a cut; partial cuts
	   -- and malformed records since the worker started, and the cut it is
	   -- held at now
	   CASE WHEN b.barrier THEN NULLIF(coalesce((l.counters OPERATOR(pg_catalog.->>) 'last_cut_epoch')::bigint, c.last_cut_epoch, 0), 0) END AS last_cut_epoch,
	   CASE WHEN b.barrier THEN coalesce((l.counters OPERATOR(pg_catalog.->>) 'cuts_skipped')::bigint, c.cuts_skipped, 0) END AS cuts_skipped,
	   CASE WHEN b.barrier THEN coalesce((l.counters OPERATOR(pg_catalog.->>) 'cuts_partial')::bigint, 0) END AS cuts_partial,
	   CASE WHEN b.barrier THEN coalesce((l.counters OPERATOR(pg_catalog.->>) 'cut_records_malformed')::bigint, 0) END AS cut_records_malformed,
	   CASE WHEN b.barrier THEN coalesce((l.counters OPERATOR(pg_catalog.->>) 'cut_held_ms')::bigint, c.cut_held_ms, 0) OPERATOR(pg_catalog./) 1000.0::double precision END AS cut_held_seconds,
	   CASE WHEN b.barrier THEN coalesce((l.counters OPERATOR(pg_catalog.->>) 'cut_rewinds')::bigint, c.cut_rewinds, 0) END AS cut_rewinds,
	   NULLIF((l.counters OPERATOR(pg_catalog.->>) 'cut_holding_epoch')::bigint, 0) AS cut_holding_epoch
  FROM mailer.jobs j
  CROSS JOIN LATERAL (SELECT (j.spec OPERATOR(pg_catalog.->) 'source' OPERATOR(pg_catalog.->>) 'barrier_group') IS NOT NULL AS barrier) b
  LEFT JOIN mailer._live_jobs() l ON l.job_id OPERATOR(pg_catalog.=) j.job_id
  LEFT JOIN LATERAL (
		SELECT c.epoch,
			   pg_catalog.max(c.committed_at) AS committed_at,
			   pg_catalog.max(c.duration_ms) AS duration_ms,
			   -- a subtask without a watermark holds the job's back
			   CASE WHEN pg_catalog.count(c.watermark) OPERATOR(pg_catalog.=) pg_catalog.count(*)
					THEN pg_catalog.min(c.watermark) END AS watermark,
			   pg_catalog.sum((c.counters OPERATOR(pg_catalog.->>) 'records_in')::bigint)::bigint AS records_in,
			   pg_catalog.sum((c.counters OPERATOR(pg_catalog.->>) 'records_accepted')::bigint)::bigint AS records_accepted,
			   pg_catalog.sum((c.counters OPERATOR(pg_catalog.->>) 'records_out')::bigint)::bigint AS records_out,
			   pg_catalog.sum((c.counters OPERATOR(pg_catalog.->>) 'records_filtered')::bigint)::bigint AS records_filtered,
			   pg_catalog.sum((c.counters OPERATOR(pg_catalog.->>) 'records_dead_lettered')::bigint)::bigint AS records_dead_lettered,
			   pg_catalog.sum((c.counters OPERATOR(pg_catalog.->>) 'records_skipped')::bigint)::bigint AS records_skipped,
			   pg_catalog.sum((c.counters OPERATOR(pg_catalog.->>) 'records_late')::bigint)::bigint AS records_late,
			   pg_catalog.max((c.counters OPERATOR(pg_catalog.->>) 'last_cut_epoch')::bigint) AS last_cut_epoch,
			   pg_catalog.sum((c.counters OPERATOR(pg_catalog.->>) 'cuts_skipped')::bigint)::bigint AS cuts_skipped,
			   pg_catalog.sum((c.counters OPERATOR(pg_catalog.->>) 'cut_held_ms')::bigint)::bigint AS cut_held_ms,
			   pg_catalog.sum((c.counters OPERATOR(pg_catalog.->>) 'cut_rewinds')::bigint)::bigint AS cut_rewinds
		  FROM mailer.checkpoints c
		 WHERE c.job_id OPERATOR(pg_catalog.=) j.job_id
		   AND c.epoch OPERATOR(pg_catalog.=) (SELECT pg_catalog.max(d.epoch) FROM mailer.checkpoints d
												WHERE d.job_id OPERATOR(pg_catalog.=) j.job_id
												  AND d.subtask OPERATOR(pg_catalog.=) 0)
		 GROUP BY c.epoch) c ON true;

-- The partitions of running jobs, each with the subtask that reads it.
CREATE VIEW mailer.partition_metrics AS
SELECT j.name, p.subtask, p.topic, p.partition, p.position, p.end_offset,
	   CASE WHEN p.end_offset OPERATOR(pg_catalog.>=) 0 AND p.position OPERATOR(pg_catalog.>=) 0
			THEN greatest(p.end_offset OPERATOR(pg_catalog.-) p.position, 0) END AS lag,
	   p.records_in, p.watermark, p.idle, p.ahead, p.offsets_skipped
  FROM mailer._live_partitions() p
  JOIN mailer.job j ON j.job_id OPERATOR(pg_catalog.=) p.job_id;

-- One row per subtask of a running job (subtask 0 is the coordinator).  A
-- subtask's live error may quote a record: _live_jobs shows it only to
-- those who may see the job's, as mailer.jobs does.
CREATE VIEW mailer.subtasks AS
SELECT j.name, s.subtask, s.pid, s.live_state AS state, s.waiting_for,
	   (s.counters OPERATOR(pg_catalog.->>) 'records_in')::bigint AS records_in,
	   (s.counters OPERATOR(pg_catalog.->>) 'records_accepted')::bigint AS records_accepted,
	   (s.counters OPERATOR(pg_catalog.->>) 'records_out')::bigint AS records_out,
	   (s.counters OPERATOR(pg_catalog.->>) 'records_filtered')::bigint AS records_filtered,
	   (s.counters OPERATOR(pg_catalog.->>) 'records_dead_lettered')::bigint AS records_dead_lettered,
	   (s.counters OPERATOR(pg_catalog.->>) 'records_skipped')::bigint AS records_skipped,
	   (s.counters OPERATOR(pg_catalog.->>) 'records_late')::bigint AS records_late,
	   s.input_rate, s.consumer_lag, s.watermark,
	   s.last_checkpoint_epoch, s.last_checkpoint_at, s.last_checkpoint_ms,
	   s.state_bytes, s.state_checkpoint_ms, s.state_restore_ms,
	   s.error AS last_error, s.error_at AS last_error_at
  FROM mailer._live_jobs(true) s
  JOIN mailer.job j ON j.job_id OPERATOR(pg_catalog.=) s.job_id;

GRANT USAGE ON SCHEMA mailer TO PUBLIC;
GRANT SELECT ON mailer.jobs, mailer.metrics, mailer.partition_metrics, mailer.subtasks TO PUBLIC;

-- A Kafka sink's records of committed epochs that are not yet known to be
-- in the topic: written in each checkpoint's transaction, produced after it
-- commits in one Kafka transaction per checkpoint, and deleted once that
-- commits (docs/ARCHITECTURE.md, "The Kafka sink").  Records are content:
-- no role but the extension's owner reads them.
CREATE TABLE mailer.kafka_outbox (
	job_id			bigint NOT NULL,		-- no foreign key: its check per row would cost a third of a passthrough's CPU; drop_job deletes the rows
	subtask			integer NOT NULL,
	epoch			bigint NOT NULL,
	seq				integer NOT NULL,		-- the record's place in its epoch
	key				bytea,
	value			bytea,					-- null: a tombstone
	headers			bytea,					-- the spec's headers' values, encoded
	PRIMARY KEY (job_id, subtask, epoch, seq)
);

-- How far each subtask's Kafka or Pulsar sink has published.  For Kafka, the
-- Kafka transaction's own epoch marker decides; this row follows it, and
-- holds the transactional id and the generation that restore_job moves on.
-- For Pulsar, this row decides: published_epoch with last_sequence_id, the
-- sequence id of that epoch's last record under the producer of
-- sequence_generation (docs/ARCHITECTURE.md, "The Pulsar sink").
CREATE TABLE mailer.kafka_sink_progress (
	job_id			bigint NOT NULL REFERENCES mailer.job ON DELETE CASCADE,
	subtask			integer NOT NULL,
	transactional_id text NOT NULL,
	generation		integer NOT NULL DEFAULT 1,
	published_epoch	bigint NOT NULL DEFAULT 0,
	published_at	timestamptz,
	restored_to		bigint,					-- restore_job's epoch, until the next publish
	marker_nonce	text NOT NULL,			-- in every marker: one another client commits is not believed
	last_sequence_id bigint NOT NULL DEFAULT -1,	-- Pulsar: the broker holds every sequence id up to it
	sequence_generation integer NOT NULL DEFAULT 1,	-- Pulsar: whose producer name last_sequence_id is
	sent_sequence_id bigint NOT NULL DEFAULT -1,	-- Pulsar: no attempt under that name sent a higher one
	PRIMARY KEY (job_id, subtask)
);

SELECT pg_catalog.pg_extension_config_dump('mailer.kafka_outbox', '');
SELECT pg_catalog.pg_extension_config_dump('mailer.kafka_sink_progress', '');
REVOKE ALL ON mailer.kafka_outbox, mailer.kafka_sink_progress FROM PUBLIC;

-- One row per subtask of a job with a Kafka or Pulsar sink ("sink", or the
-- topic of "sinks"), once its worker has started: what it has published and
-- what waits in the outbox.  The sequence columns are a Pulsar sink's (null
-- for Kafka).
CREATE VIEW mailer.kafka_sinks AS
SELECT j.name AS job, p.subtask,
	   t.sink OPERATOR(pg_catalog.->>) 'type' AS sink_type,
	   t.sink OPERATOR(pg_catalog.->>) 'topic' AS topic,
	   coalesce(t.sink OPERATOR(pg_catalog.->>) 'delivery', 'exactly_once') AS delivery,
	   p.transactional_id, p.generation, p.published_epoch, p.published_at,
	   (SELECT pg_catalog.count(*) FROM mailer.kafka_outbox o
		 WHERE o.job_id OPERATOR(pg_catalog.=) p.job_id
		   AND o.subtask OPERATOR(pg_catalog.=) p.subtask) AS pending_records,
	   CASE WHEN t.sink OPERATOR(pg_catalog.->>) 'type' OPERATOR(pg_catalog.=) 'pulsar'
			THEN p.last_sequence_id END AS last_sequence_id,
	   CASE WHEN t.sink OPERATOR(pg_catalog.->>) 'type' OPERATOR(pg_catalog.=) 'pulsar'
			THEN p.sequence_generation END AS sequence_generation
  FROM mailer.kafka_sink_progress p
  JOIN mailer.job j ON j.job_id OPERATOR(pg_catalog.=) p.job_id
  CROSS JOIN LATERAL (
	SELECT coalesce(j.spec OPERATOR(pg_catalog.->) 'sink',
					(SELECT e FROM pg_catalog.jsonb_array_elements(j.spec OPERATOR(pg_catalog.->) 'sinks') e
					  WHERE e OPERATOR(pg_catalog.->>) 'type' OPERATOR(pg_catalog.<>) 'table' LIMIT 1)) AS sink) t;

GRANT SELECT ON mailer.kafka_sinks TO PUBLIC;

-- The barrier cuts a job decided on (docs/ARCHITECTURE.md, "Barrier cuts"):
-- checkpointed at, or skipped; written in the checkpoint's transaction,
-- the newest checkpoint.retain_cuts + 1000 kept.
CREATE TABLE mailer.job_cuts (
	job_id			bigint NOT NULL REFERENCES mailer.job ON DELETE CASCADE,
	cut_epoch		bigint NOT NULL,
	triggered_at	timestamptz,
	completed_at	timestamptz,
	outcome			text NOT NULL CHECK (outcome IN ('checkpoint', 'skipped')),
	epoch			bigint NOT NULL,		-- the job's checkpoint that recorded it
	PRIMARY KEY (job_id, cut_epoch)
);
SELECT pg_catalog.pg_extension_config_dump('mailer.job_cuts', '');
REVOKE ALL ON mailer.job_cuts FROM PUBLIC;
GRANT SELECT ON mailer.job_cuts TO PUBLIC;

-- A job's barrier cuts: each decided one, whether a retained checkpoint
-- is at it (restore_job(name, cut_epoch => e)), and the one it is held at.
CREATE FUNCTION mailer.cuts(job text)
RETURNS TABLE (cut_epoch bigint, triggered_at timestamptz, completed_at timestamptz,
			   outcome text, checkpoint_epoch bigint, restorable boolean)
LANGUAGE sql STABLE
AS $$
SELECT d.cut_epoch, d.triggered_at, d.completed_at, d.outcome,
	   c.epoch, c.epoch IS NOT NULL
  FROM mailer.job j
  JOIN mailer.job_cuts d ON d.job_id OPERATOR(pg_catalog.=) j.job_id
  LEFT JOIN mailer.checkpoints c ON c.job_id OPERATOR(pg_catalog.=) j.job_id
		AND c.subtask OPERATOR(pg_catalog.=) 0 AND c.cut_epoch OPERATOR(pg_catalog.=) d.cut_epoch
 WHERE j.name OPERATOR(pg_catalog.=) $1
UNION ALL
SELECT m.cut_holding_epoch, NULL, NULL, 'holding', NULL, false
  FROM mailer.metrics m
 WHERE m.name OPERATOR(pg_catalog.=) $1 AND m.cut_holding_epoch IS NOT NULL
ORDER BY 1
$$;
COMMENT ON FUNCTION mailer.cuts(text) IS
	'The barrier cuts a job checkpointed at or skipped, and the one it is held at';
