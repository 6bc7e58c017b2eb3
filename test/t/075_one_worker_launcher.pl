# At most one worker per job, whatever the launcher does (issue 11, item 8):
# a worker is registered, then its launcher is terminated before the worker
# has claimed its slot.  The new launcher forgets the slot and starts a
# worker of its own; the orphan, when it runs, must see that the slot is no
# longer its own and exit, so that two workers never share the job's slot,
# state and checkpoints.  Test points hold both workers before they claim
# the slot, then before they take the job's lock: only one gets there.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $N = 20_000;

fresh_extension();
test_point_release();
psql("DROP TABLE IF EXISTS t075; CREATE TABLE t075 (order_id bigint, customer_id text)");

# Every pid that logged reaching $point since log position $from.
sub reached_pids
{
	my ($point, $from) = @_;
	my %pids = map { $_ => 1 } pg_log_since($from) =~ /\[(\d+)\] [^\n]*mailer test point \Q$point\E reached/g;
	return sort keys %pids;
}

sub alive
{
	my ($pid) = @_;
	return kill(0, $pid) || $!{EPERM};
}

my $from = test_point_hold('worker_before_claim', 'worker_before_lock');
my $job_id = psql(qq{SELECT mailer.create_job('t075', \$\${
	"source": {"type": "generator", "events": $N, "rate": 20000},
	"steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
	"sink": {"type": "table", "table": "t075"},
	"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
my $first = test_point_wait_reached('worker_before_claim', $from);
ok($first, "the first launcher's worker ($first) is held before it claims its slot");

# The launcher goes; the postmaster starts another, which knows no handle
# of the worker that is about to run.
my $launcher = launcher_pid();
is(psql("SELECT pg_terminate_backend($launcher)"), 't', 'terminate the launcher');
wait_server_ready(not_launcher => $launcher);
my ($second) = wait_until('the new launcher starts a worker', sub {
	my @p = grep { $_ ne $first } reached_pids('worker_before_claim', $from);
	return @p ? $p[0] : undef;
});
ok($second, "the new launcher's worker ($second) is held before it claims its slot too");

# Both go on to claim the slot; at most one may get to the job's lock.
my $lock_from = pg_log_size();
test_point_release('worker_before_lock');
wait_until('each worker exited or reached the job lock', sub {
	my %at = map { $_ => 1 } reached_pids('worker_before_lock', $lock_from);
	return !grep { alive($_) && !$at{$_} } ($first, $second);
});
my @running = reached_pids('worker_before_lock', $lock_from);
is(scalar(@running), 1, 'one worker only goes on to run the job')
  or diag("workers at the lock: @running");
cmp_ok(psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer job'"), '<=', 1,
	'at most one job worker in pg_stat_activity');
ok(!alive($first) || !alive($second), 'the orphan worker has exited');

test_point_release();
is(psql("SELECT mailer.wait_job('t075', '2 minutes')"), 'finished', 'the job finishes');
is(psql("SELECT count(*), count(DISTINCT order_id), min(order_id), max(order_id) FROM t075"),
	"$N|$N|0|" . ($N - 1), 'every event written exactly once');
is(psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer job'"), '0',
	'no job worker left');

psql("SELECT mailer.drop_job('t075')");
psql("DROP TABLE t075");
done_testing();
