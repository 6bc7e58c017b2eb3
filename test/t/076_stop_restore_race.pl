# stop_job and restore_job against a worker that is about to run (issue 11,
# item 8).  A stopped job is started and stopped again while its new worker
# has been registered but has not claimed its slot; then the job is restored
# to an older epoch R while that worker may still read the checkpoint of
# the newest epoch L.  stop_job must not return while that worker can
# still run, and no worker may run while restore_job rewrites the
# checkpoints: otherwise its final checkpoint undoes the restore (memory
# backend: state as of R, positions as of L, records lost).  Test points
# hold the worker before it claims its slot and before it opens the
# state; the races are played in one order, whatever the timing.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $N = 30_000;

fresh_extension();
test_point_release();
psql("DROP TABLE IF EXISTS t076; CREATE TABLE t076 (customer_id text PRIMARY KEY, n bigint, total numeric)");
my $job_id = psql(qq{SELECT mailer.create_job('t076', \$\${
	"source": {"type": "generator", "events": $N, "rate": 5000, "keys": 7},
	"steps": [{"key_by": {"customer_id": "key"}},
	          {"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}],
	"sink": {"type": "table", "table": "t076"},
	"checkpoint": {"interval": "200 milliseconds"}, "state": {"backend": "memory"}}\$\$)});

wait_until('a few checkpoints', sub {
	psql("SELECT count(*) >= 4 FROM mailer.checkpoints WHERE job_id = $job_id") eq 't' });
is(psql("SELECT mailer.stop_job('t076')"), 'stopped', 'stop the job mid-run');
my ($L, $R) = split /\|/, psql("SELECT max(epoch), max(epoch) - 2 FROM mailer.checkpoints WHERE job_id = $job_id");
cmp_ok(psql("SELECT max((positions->>'next')::bigint) FROM mailer.checkpoints WHERE job_id = $job_id"),
	'<', $N, "stopped before the end, at epoch $L");

sub alive
{
	my ($pid) = @_;
	return kill(0, $pid) || $!{EPERM};
}

# Start: the launcher registers a worker; hold it before its slot is its own.
my $from = test_point_hold('worker_before_claim', 'worker_before_open_state');
is(psql("SELECT mailer.start_job('t076')"), 'starting', 'start the job again');
my $worker = test_point_wait_reached('worker_before_claim', $from);

# Stop it at once: stop_job may return only when that worker cannot run.
my $stop = psql_session("SELECT mailer.stop_job('t076', '2 minutes');\n");
my $stop_state = wait_until('stop_job returned or waits on the worker', sub {
	return 'returned' if psql_session_output($stop) =~ /stopped/;
	return psql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%stop_job(''t076''%'
		AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()") eq '1' ? 'waiting' : undef;
});
is($stop_state, 'waiting', 'stop_job waits while a registered worker may still run');
if ($stop_state eq 'waiting')
{
	# Let the worker run up to opening the state: it sees the stop and exits.
	test_point_release('worker_before_open_state');
	wait_until('stop_job returns', sub { psql_session_output($stop) =~ /stopped/ });
}
my ($out, $err) = psql_session_finish($stop);
chomp $out;
is($out, 'stopped', 'stop_job says stopped') or diag($err);

# Restore, in a transaction still open while the worker (if any) goes on
# and reads the checkpoints.
my $restore = psql_session("BEGIN;\nSELECT mailer.restore_job('t076', $R);\n");
wait_until('restore_job answered', sub { psql_session_output($restore) =~ /\d/ || ${ $restore->{err} } ne '' });
test_point_release('worker_before_open_state');
wait_until('the worker exited or read the checkpoint', sub {
	!alive($worker) || scalar(pg_log_since($from) =~ /\[$worker\] [^\n]*mailer test point worker_before_open_state reached/)
});
($out, $err) = psql_session_finish($restore, "COMMIT;\n");
chomp $out;
is($out, $R, "restore_job to epoch $R") or diag($err);
test_point_release();
wait_until('the worker is gone', sub { !alive($worker) });
wait_until('no worker of the job', sub {
	psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer job'") eq '0' });

is(psql("SELECT max(epoch) FROM mailer.checkpoints WHERE job_id = $job_id"), $R,
	'the restore holds: no checkpoint after the restored epoch');
is(psql("SELECT state, desired_state FROM mailer.jobs WHERE name = 't076'"), 'stopped|stopped',
	'the job is stopped');

# Run to the end: every record counted once.
psql("SELECT mailer.start_job('t076')");
is(psql("SELECT mailer.wait_job('t076', '2 minutes')"), 'finished', 'the job finishes');
is(psql("SELECT sum(n) FROM t076"), $N, 'every record counted once after the restore');

psql("SELECT mailer.drop_job('t076')");
psql("DROP TABLE t076");
done_testing();
