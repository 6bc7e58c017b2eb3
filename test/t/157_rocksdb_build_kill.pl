# The RocksDB checkpoint writes its SST file on a thread from prepare to
# the snapshot (state_rocksdb.c, rocks_prepare).  A keyed job whose one
# checkpoint (the final one) holds about 110k changed keys is held at test
# point rocksdb_after_prepare, while the thread sorts and writes them:
# - terminated (pg_terminate_backend, mailer.termination_grace = 0): the
#   FATAL exit joins the thread and unlinks its file (rocks_exit), and the
#   worker exits cleanly, with no crash of the server;
# - its next worker, held at the same point, killed (SIGKILL): the server
#   reinitializes, the next open removes the leftover ingest file.
# Then the job finishes with exactly what SQL computes from the same
# events, and no ingest file is left beside live/.
# On a server of its own (MailerCluster): a SIGKILL reinitializes it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use Test::More;

mailer_node();
fresh_extension();
psql("ALTER SYSTEM SET mailer.termination_grace = 0; SELECT pg_reload_conf();");

psql(<<'SQL');
DROP TABLE IF EXISTS t157_raw, t157_totals;
CREATE TABLE t157_raw (key text, value jsonb, "timestamp" timestamptz);
CREATE TABLE t157_totals (customer_id text PRIMARY KEY, n bigint, total numeric);
SQL

my $events = 200000;
my $gen = qq{"source": {"type": "generator", "events": $events, "keys": 150000, "seed": 157,
	"start_time": "2030-01-01 00:00:00+00", "step": "1 millisecond"}};
psql(qq{SELECT mailer.create_job('t157_raw', \$spec\${$gen,
	"sink": {"type": "table", "table": "t157_raw"}}\$spec\$)});
is(wait_job('t157_raw'), 'finished', 't157_raw ends finished');

# The first worker opens its state before the second point is named.
my $from = test_point_hold('rocksdb_after_prepare');
psql(qq{SELECT mailer.create_job('t157', \$spec\${$gen,
	"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}},
			  {"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}],
	"sink": {"type": "table", "table": "t157_totals"},
	"checkpoint": {"interval": "1 hour"}, "state": {"backend": "rocksdb"}}\$spec\$)});
my $dir = job_state_dir('t157');

my $pid = test_point_wait_reached('rocksdb_after_prepare', $from);
ok($pid, 'the worker is held after prepare, its build thread started');
wait_until('the build thread has opened its file', sub { scalar(my @f = glob("$dir/ingest-*.sst")) }, 60);
# The next worker held before it opens the state (and removes leftovers).
test_point_hold('rocksdb_after_prepare', 'worker_before_open_state');
my $from2 = pg_log_size();
is(psql("SELECT pg_terminate_backend($pid)"), 't', 'the held worker terminated');
wait_until('the terminated worker is gone', sub { !kill(0, $pid) }, 60);
test_point_wait_reached('worker_before_open_state', $from2);
# The exit dropped the build (joined the thread, unlinked its file), not
# the next open, which is held.
is(scalar(my @f = glob("$dir/ingest-*.sst")), 0, 'the exit joined the build and removed its file');
test_point_release('rocksdb_after_prepare');
my $log = pg_log_since($from2);
unlike($log, qr/terminated by signal|server process .* was terminated|all server processes terminated/,
	'a clean exit, no crash of the server');
like($log, qr/\[$pid\][^\n]*FATAL/, 'the worker exited by FATAL while its thread had a build');

# The next worker reaches the same point; killed there.
my $pid2 = test_point_wait_reached('rocksdb_after_prepare', $from2);
isnt($pid2, $pid, 'a new worker held after prepare');
wait_until('its build thread has opened its file', sub { scalar(my @f = glob("$dir/ingest-*.sst")) }, 60);
my $launcher = launcher_pid();
is(kill('KILL', $pid2), 1, 'SIGKILL sent to the held worker');
wait_server_ready(not_launcher => $launcher);
test_point_release();

is(wait_job('t157'), 'finished', 't157 ends finished');
is(scalar(my @g = glob("$dir/ingest-*.sst")), 0, 'no ingest file left beside live/');
same_rows('SELECT customer_id, n, total FROM t157_totals',
	q{SELECT value->>'customer_id', count(*), sum((value->>'amount')::numeric) FROM t157_raw GROUP BY 1},
	'every key\'s total is what SQL computes');
is(psql('SELECT sum(n) FROM t157_totals'), $events, 'every event counted once');
cmp_ok(psql('SELECT count(*) FROM t157_totals'), '>=', 100000, 'a large epoch');

psql("ALTER SYSTEM RESET mailer.termination_grace; SELECT pg_reload_conf();");
psql("SELECT mailer.drop_job('t157'); SELECT mailer.drop_job('t157_raw')");
psql('DROP TABLE t157_raw, t157_totals');
done_testing();
