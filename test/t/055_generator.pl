# Windows over the generator source (a bounded stream: 5000 events, one
# every 250 ms of event time from 2030-01-01 00:00:00 UTC, over 7 keys):
# the event time defaults to the generator's ts, the end of the stream moves
# the watermark past every window, and the jobs end in state 'finished'
# having emitted every window.  The expected windows come from a second,
# non-windowed job writing every event into a table, and from the
# generator's known shape (240 events per minute).
# Then a transient failure of the sink during the final checkpoint: the
# worker exits with an error, the launcher restarts it, and the restarted
# worker still emits every window.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use Test::More;

# On a server of its own (MailerCluster): a worker killed with SIGKILL
# makes the postmaster restart every backend.
mailer_node();
fresh_extension();

psql(<<'SQL');
DROP TABLE IF EXISTS gen_raw, gen_tumbling, gen_sliding, gen_sessions, gen_retry, gen_fail, gen_compact;
DROP FUNCTION IF EXISTS gen_fail_check();
CREATE TABLE gen_raw (key text, value jsonb, "timestamp" timestamptz);
CREATE TABLE gen_tumbling (customer_id text, window_start timestamptz, window_end timestamptz,
	n bigint, total numeric, PRIMARY KEY (customer_id, window_start));
CREATE TABLE gen_sliding (LIKE gen_tumbling INCLUDING ALL);
CREATE TABLE gen_sessions (LIKE gen_tumbling INCLUDING ALL);
CREATE TABLE gen_retry (LIKE gen_tumbling INCLUDING ALL);
SQL

my $gen = q{"source": {"type": "generator", "events": 5000, "keys": 7, "seed": 55,
	"start_time": "2030-01-01 00:00:00+00", "step": "250 milliseconds"}};
my $agg = q{{"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}};

sub window_job
{
	my ($name, $table, $window, $backend) = @_;
	psql(qq{SELECT mailer.create_job('$name', \$spec\${$gen,
		"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}}, {"window": $window}, $agg],
		"sink": {"type": "table", "table": "$table"},
		"checkpoint": {"interval": "100 milliseconds"}, "state": {"backend": "$backend"}}\$spec\$)});
}

psql(qq{SELECT mailer.create_job('gen_raw', \$spec\${$gen,
	"sink": {"type": "table", "table": "gen_raw"}}\$spec\$)});
window_job('gen_tumbling', 'gen_tumbling', '{"type": "tumbling", "size": "1 minute"}', 'rocksdb');
window_job('gen_sliding', 'gen_sliding', '{"type": "sliding", "size": "1 minute", "slide": "20 seconds"}', 'memory');
window_job('gen_sessions', 'gen_sessions', '{"type": "session", "gap": "3 seconds"}', 'rocksdb');

for my $job (qw(gen_raw gen_tumbling gen_sliding gen_sessions))
{
	is(wait_job($job), 'finished', "$job ends finished");
	is(psql("SELECT state FROM mailer.jobs WHERE name = '$job'"), 'finished', "$job: state finished");
	is(job_metric($job, 'records_in'), '5000', "$job: 5000 records read");
}
is(psql('SELECT count(*) FROM gen_raw'), '5000', 'the non-windowed job wrote every event');
is(psql(q{SELECT count(*) FROM gen_raw WHERE "timestamp" <> (value->>'ts')::timestamptz}), '0',
	"the generator's message timestamp is its ts");
is(psql(q{SELECT min((value->>'ts')::timestamptz) || ' ' || max((value->>'ts')::timestamptz) FROM gen_raw}),
	psql(q{SELECT '2030-01-01 00:00:00+00'::timestamptz || ' ' || '2030-01-01 00:20:49.75+00'::timestamptz}),
	'event n at start_time + n * 250 ms');

my $tumbling = q{SELECT value->>'customer_id' AS customer_id,
	date_bin('1 minute', (value->>'ts')::timestamptz, '1970-01-01 00:00:00+00') AS window_start,
	date_bin('1 minute', (value->>'ts')::timestamptz, '1970-01-01 00:00:00+00') + interval '1 minute' AS window_end,
	count(*) AS n, sum((value->>'amount')::numeric) AS total FROM gen_raw GROUP BY 1, 2, 3};
same_rows('SELECT customer_id, window_start, window_end, n, total FROM gen_tumbling', $tumbling,
	'tumbling: every window emitted, as the raw events give');
# The generator's shape: 240 events a minute over 1250 s, the last minute
# (20:00 to 20:50) holding 200.
is(psql(q{SELECT string_agg(DISTINCT s::text, ',') FROM (SELECT sum(n) AS s FROM gen_tumbling GROUP BY window_start
		  HAVING window_start < '2030-01-01 00:20:00+00') w}), '240', 'tumbling: 240 events in each full minute');
is(psql(q{SELECT count(DISTINCT window_start) || ' ' || sum(n) FILTER (WHERE window_start = '2030-01-01 00:20:00+00')
		  FROM gen_tumbling}), '21 200', 'tumbling: 21 minutes, 200 events in the last');

my $sliding = q{
	SELECT value->>'customer_id' AS customer_id, s AS window_start, s + interval '1 minute' AS window_end,
		   count(*) AS n, sum((value->>'amount')::numeric) AS total
	  FROM gen_raw,
		   generate_series(date_bin('20 seconds', (value->>'ts')::timestamptz, '1970-01-01 00:00:00+00') - interval '40 seconds',
						   date_bin('20 seconds', (value->>'ts')::timestamptz, '1970-01-01 00:00:00+00'), interval '20 seconds') s
	 GROUP BY 1, 2, 3};
same_rows('SELECT customer_id, window_start, window_end, n, total FROM gen_sliding', $sliding,
	'sliding: every window emitted, as the raw events give');
is(psql('SELECT sum(n) FROM gen_sliding'), 15000, 'sliding: each event in 3 windows');

same_rows('SELECT customer_id, window_start, window_end, n, total FROM gen_sessions', q{
	WITH e AS (SELECT value->>'customer_id' AS k, (value->>'ts')::timestamptz AS ts,
					  (value->>'amount')::numeric AS a FROM gen_raw),
	marked AS (
		SELECT k, ts, a, CASE WHEN ts - lag(ts) OVER (PARTITION BY k ORDER BY ts) < interval '3 seconds'
							  THEN 0 ELSE 1 END AS starts FROM e),
	numbered AS (SELECT *, sum(starts) OVER (PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING) AS session FROM marked)
	SELECT k, min(ts), max(ts) + interval '3 seconds', count(*), sum(a) FROM numbered GROUP BY k, session},
	'sessions: every session emitted, as the raw events give');
cmp_ok(psql('SELECT count(*) FROM gen_sessions'), '>=', 100, 'many sessions');

# Finished, every window was purged: the memory backend has no row left.
my $sliding_id = psql("SELECT job_id FROM mailer.job WHERE name = 'gen_sliding'");
is(psql("SELECT count(*) FROM mailer.memory_state WHERE job_id = $sliding_id"),
	'0', 'memory backend: no state left once the job finished');

for my $job ('gen_tumbling', 'gen_sessions')
{
	my $keys = rocksdb_keys($job);
  SKIP:
	{
		skip 'ldb (rocksdb-tools) is not installed', 1 unless $keys;
		is(join(' ', @$keys), '0x0065706F6368', "$job: RocksDB holds nothing but the epoch once the job finished");
	}
}

# A sink that fails (not a row's fault: an error the worker exits on) while
# gen_fail.fail is set.  The job's worker fails at its final checkpoint,
# after the end of the stream fired every window; restarted by the
# launcher once the failure is gone, it replays and emits them all.
psql(<<'SQL');
CREATE TABLE gen_fail (fail boolean);
INSERT INTO gen_fail VALUES (true);
CREATE FUNCTION gen_fail_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT fail FROM gen_fail) THEN
		RAISE EXCEPTION 'the sink is failing' USING ERRCODE = 'XX000';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER gen_fail_check BEFORE INSERT OR UPDATE ON gen_retry FOR EACH ROW EXECUTE FUNCTION gen_fail_check();
SQL
psql(qq{SELECT mailer.create_job('gen_retry', \$spec\${$gen,
	"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}}, {"window": {"type": "tumbling", "size": "1 minute"}}, $agg],
	"sink": {"type": "table", "table": "gen_retry"},
	"checkpoint": {"interval": "1 hour"}}\$spec\$)});
wait_for_sql('gen_retry failed and is restarted',
	q{SELECT restarts > 0 AND last_error LIKE '%the sink is failing%' FROM mailer.jobs WHERE name = 'gen_retry'}, 't', 60);
psql('UPDATE gen_fail SET fail = false');
wait_for_sql('gen_retry finished', q{SELECT state FROM mailer.jobs WHERE name = 'gen_retry'}, 'finished', 60);
same_rows('SELECT customer_id, window_start, window_end, n, total FROM gen_retry', $tumbling,
	'after the restart, every window emitted');

# The memory backend's undo cleanup: with checkpoint.retain 2 and a
# checkpoint every 100 ms, the job's undo of older epochs is deleted after
# each commit, and its worker is killed after twenty checkpoints.  The
# restarted worker still emits every window, and deletes the undo the
# killed one left: none older than the retained epochs remains.  Every
# checkpoint folds (a fold of a longer interval would carry these
# short-lived panes to its redo, and write no undo for them:
# 221_memory_redo_fold tests that).
setting_until_exit('mailer.memory_fold_checkpoints', 1);
psql('CREATE TABLE gen_compact (LIKE gen_tumbling INCLUDING ALL)');
psql(qq{SELECT mailer.create_job('gen_compact', \$spec\${"source": {"type": "generator", "events": 5000, "keys": 7,
		"seed": 55, "start_time": "2030-01-01 00:00:00+00", "step": "250 milliseconds", "rate": 1000},
	"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}},
			  {"window": {"type": "sliding", "size": "1 minute", "slide": "20 seconds"}}, $agg],
	"sink": {"type": "table", "table": "gen_compact"}, "state": {"backend": "memory"},
	"checkpoint": {"interval": "100 milliseconds", "retain": 2}}\$spec\$)});
my $compact_id = psql("SELECT job_id FROM mailer.job WHERE name = 'gen_compact'");
my $max_epoch = "SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $compact_id";
wait_for_sql('gen_compact past twenty checkpoints', "SELECT ($max_epoch) >= 21", 't', 60);
my $launcher = launcher_pid();
kill 'KILL', worker_pid('gen_compact');
wait_server_ready(not_launcher => $launcher);
is(wait_job('gen_compact'), 'finished', 'gen_compact, killed after twenty checkpoints, ends finished');
same_rows('SELECT customer_id, window_start, window_end, n, total FROM gen_compact', $sliding,
	'gen_compact: every window emitted after the kill');
cmp_ok(psql($max_epoch), '>=', 25, 'gen_compact: checkpoints after the restart');
wait_for_sql('gen_compact: no undo older than the retained epochs',
	"SELECT count(*) FROM mailer.memory_undo WHERE job_id = $compact_id AND epoch <= "
	. "(SELECT min(epoch) FROM mailer.checkpoints WHERE job_id = $compact_id)", '0', 30);
cmp_ok(psql("SELECT count(*) FROM mailer.memory_undo WHERE job_id = $compact_id"), '>', 0,
	'gen_compact: the undo the retained checkpoints need is kept');

for my $job (qw(gen_raw gen_tumbling gen_sliding gen_sessions gen_retry gen_compact))
{
	psql("SELECT mailer.drop_job('$job')");
}

done_testing();
