# The memory backend's heap-level checkpoint writes (src/state/
# memory_rows.c) against SQL's answer.  Running totals over 400 keys on the
# memory backend: each key's row is updated at its address many times,
# first while a long transaction's snapshot keeps pruning from freeing the
# pages (they fill: updates that are not HOT, with new index entries),
# then with the worker killed by SIGKILL after a checkpoint wrote its rows
# and undo but before the commit, and before the writes (118 restores
# after updates in place).  The totals equal SQL's over the events (a second job writes
# each event into a table), each key has one row, and the primary key
# holds an entry for every row (amcheck).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use IPC::Run;
use MailerTest;
use Test::More;

my $N = 14_000;

fresh_extension();
test_point_release();
psql(<<'SQL');
DROP TABLE IF EXISTS t159_raw, t159_totals;
CREATE TABLE t159_raw (key text, value jsonb, "timestamp" timestamptz);
CREATE TABLE t159_totals (customer_id text PRIMARY KEY, n bigint, total numeric);
CREATE EXTENSION IF NOT EXISTS amcheck;
SQL

my $gen = qq{"source": {"type": "generator", "events": $N, "keys": 400, "seed": 159,
	"start_time": "2030-01-01 00:00:00+00", "step": "10 milliseconds", "rate": RATE}};
psql(qq{SELECT mailer.create_job('t159_raw', \$spec\${@{[ $gen =~ s/RATE/100000/r ]},
	"sink": {"type": "table", "table": "t159_raw"}}\$spec\$)});
psql(qq{SELECT mailer.create_job('t159_totals', \$spec\${@{[ $gen =~ s/RATE/1000/r ]},
	"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}},
			  {"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}],
	"sink": {"type": "table", "table": "t159_totals"}, "state": {"backend": "memory"},
	"checkpoint": {"interval": "50 milliseconds", "retain": 30}}\$spec\$)});
my $job_id = psql("SELECT job_id FROM mailer.job WHERE name = 't159_totals'");
my $max_epoch = "SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $job_id";
wait_for_sql('t159_totals checkpoints', "SELECT ($max_epoch) >= 3", 't', 30);

# A snapshot held for 3 seconds: no version the updates leave can go, the
# pages fill, and rows move to other pages (a HOT update never does).
psql("DROP TABLE IF EXISTS t159_before; CREATE TABLE t159_before AS "
	. "SELECT key, (ctid::text::point)[0] AS page FROM mailer.memory_state WHERE job_id = $job_id");
my $snapshot_sql = "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM t159_raw; "
	. "SELECT pg_sleep(3); COMMIT;";
my ($out, $err) = ('', '');
my $holder = IPC::Run::start([ 'psql', '-X', '-q', '-c', $snapshot_sql ], '>', \$out, '2>', \$err);
$holder->finish;
cmp_ok(psql("SELECT count(*) FROM t159_before b JOIN mailer.memory_state m ON m.job_id = $job_id "
		. "AND m.key = b.key WHERE (m.ctid::text::point)[0] <> b.page"), '>', 0,
	'updates that were not HOT moved rows to other pages');

for my $point (qw(memory_checkpoint_written checkpoint_after_ext_check))
{
	my $before = psql($max_epoch);
	my $from = test_point_hold($point);
	my $pid = test_point_wait_reached($point, $from, 30);
	ok($pid, "$point: the worker is held there");
	my $launcher = launcher_pid();
	is(kill('KILL', $pid), 1, "$point: SIGKILL to the worker");
	wait_server_ready(not_launcher => $launcher);
	test_point_release();
	wait_for_sql("$point: the job checkpoints again", "SELECT ($max_epoch) > $before + 2", 't', 30);
}

for my $job (qw(t159_raw t159_totals))
{
	is(wait_job($job, 60), 'finished', "$job ends finished");
}
same_rows('SELECT customer_id, n, total FROM t159_totals',
	q{SELECT value->>'customer_id', count(*), sum((value->>'amount')::numeric) FROM t159_raw GROUP BY 1},
	'the totals of the killed and restored memory job are SQL\'s');
is(psql("SELECT count(*) FROM mailer.memory_state WHERE job_id = $job_id"),
	psql('SELECT count(*) FROM t159_totals'), 'one state row per key');
is(psql("SELECT count(DISTINCT key) FROM mailer.memory_state WHERE job_id = $job_id"),
	psql('SELECT count(*) FROM t159_totals'), 'no key has two rows');
psql_ok("SELECT bt_index_check('mailer.memory_state_pkey', true)",
	'every state row has its primary key entry (amcheck)');

psql("SELECT mailer.drop_job('t159_totals')");
psql("SELECT mailer.drop_job('t159_raw')");
psql('DROP TABLE t159_raw, t159_totals, t159_before');

done_testing();
