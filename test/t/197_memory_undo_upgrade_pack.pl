# ALTER EXTENSION mailer UPDATE from 0.1.0 packs the memory backend's
# versions into undo rows (one per job, epoch and key group, any size):
# in a scratch database (no launcher runs there), 0.1.0's memory_state is
# filled with versions of 600 keys (some long, some with odd bytes) over
# epochs 1 to 12, deletions and values past a page among them, with
# checkpoints 1 to 10; after the update the state is the versions at 10,
# and the rewind statements of state_memory.c (rewind_rows, copied here)
# to each epoch 1 to 10 give exactly the versions at that epoch, with and
# without a unique index a DBA added on the key.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

psql('DROP DATABASE IF EXISTS t197');
psql('CREATE DATABASE t197');
{
	local $ENV{PGDATABASE} = 't197';
	psql(<<'SQL');
CREATE EXTENSION mailer VERSION '0.1.0';
SELECT setseed(0.197);
INSERT INTO mailer.job (name, owner, spec, desired_state, search_path)
VALUES ('u197', current_user::regrole, '{"source": {"type": "generator"}, "state": {"backend": "memory"}}', 'stopped', 'public');
INSERT INTO mailer.checkpoints (job_id, epoch, positions, counters, duration_ms)
SELECT 1, e, '{}', '{}', 1 FROM generate_series(1, 10) e;
INSERT INTO mailer.memory_state (job_id, key, epoch, value)
SELECT 1, k.key, e,
       CASE WHEN random() < 0.2 THEN NULL
            WHEN random() < 0.05 THEN convert_to(repeat(md5(random()::text), 700), 'UTF8')
            ELSE decode(md5(random()::text), 'hex') END
  FROM (SELECT 'A'::bytea || convert_to(CASE WHEN i % 50 = 0 THEN repeat('long' || i, 500) ELSE 'c' || i END, 'UTF8')
                 || CASE WHEN i % 7 = 0 THEN '\x00ff00'::bytea ELSE ''::bytea END AS key, i
          FROM generate_series(1, 600) i) k,
       generate_series(1, 12) e
 WHERE random() < 0.4;
CREATE TABLE public.v197 AS SELECT * FROM mailer.memory_state;
ALTER EXTENSION mailer UPDATE;
CREATE FUNCTION public.want197(e bigint) RETURNS TABLE (key bytea, value bytea) LANGUAGE sql AS $w$
  SELECT key, value FROM (SELECT DISTINCT ON (key) key, value FROM public.v197 WHERE epoch <= e ORDER BY key, epoch DESC) x
   WHERE value IS NOT NULL $w$;
CREATE FUNCTION public.diff197(e bigint) RETURNS bigint LANGUAGE sql AS $w$
  SELECT count(*) FROM ((SELECT key, value FROM mailer.memory_state EXCEPT SELECT * FROM public.want197(e))
    UNION ALL (SELECT * FROM public.want197(e) EXCEPT SELECT key, value FROM mailer.memory_state)) d $w$;
-- the rewind, then its mismatches, rolled back by the exception
CREATE FUNCTION public.rewind197(e bigint) RETURNS bigint LANGUAGE plpgsql AS $f$
DECLARE n bigint;
BEGIN
  BEGIN
    DELETE FROM mailer.memory_state m USING (SELECT DISTINCT e.key
      FROM mailer.memory_undo c, LATERAL pg_catalog.unnest(c.keys) AS e(key)
      WHERE c.job_id = 1 AND c.epoch > rewind197.e AND c.key_group >= 0 AND c.key_group < 128) u
      WHERE m.job_id = 1 AND m.key_group >= 0 AND m.key_group < 128 AND m.key = u.key;
    WITH u AS (SELECT DISTINCT ON (e.key) e.key, c.key_group, e.value
      FROM mailer.memory_undo c,
      LATERAL ROWS FROM (pg_catalog.unnest(c.keys), pg_catalog.unnest(c.old_values)) AS e(key, value)
      WHERE c.job_id = 1 AND c.epoch > rewind197.e AND c.key_group >= 0 AND c.key_group < 128
      ORDER BY e.key, c.epoch),
    i AS (INSERT INTO mailer.memory_state (job_id, key, key_group, value)
      SELECT 1, key, key_group, value FROM u WHERE value IS NOT NULL)
    DELETE FROM mailer.memory_undo WHERE job_id = 1 AND epoch > rewind197.e AND key_group >= 0 AND key_group < 128;
    n := public.diff197(rewind197.e);
    RAISE EXCEPTION 'undo';
  EXCEPTION WHEN raise_exception THEN RETURN n;
  END;
END $f$;
SQL
	is(psql('SELECT extversion FROM pg_extension WHERE extname = \'mailer\''), '0.2.0', 'updated to 0.2.0');
	cmp_ok(psql('SELECT max(cardinality(keys)) FROM mailer.memory_undo'), '>', 1, 'rows hold several keys');
	is(psql('SELECT count(*) FROM mailer.memory_undo WHERE cardinality(keys) <> cardinality(old_values)'), '0',
		'keys and old values pair up');
	is(psql('SELECT public.diff197(10)'), '0', 'the state is the versions at the last checkpoint');
	is(psql(q{SELECT string_agg(e || ':' || public.rewind197(e), ' ' ORDER BY e) FROM generate_series(1, 10) e}),
		join(' ', map { "$_:0" } 1 .. 10), 'a rewind to each epoch gives its versions exactly');
	# The table has no index; a unique one a DBA adds on the key is never
	# violated by the rewind, which deletes a key's row before it inserts one.
	psql('CREATE UNIQUE INDEX u197_key ON mailer.memory_state (job_id, key)');
	is(psql(q{SELECT string_agg(e || ':' || public.rewind197(e), ' ' ORDER BY e) FROM generate_series(1, 10) e}),
		join(' ', map { "$_:0" } 1 .. 10), 'so does each with a unique index on the key');
}
psql('DROP DATABASE t197');
done_testing();
