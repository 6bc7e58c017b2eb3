# stop_job returns only once no worker of the job can still start, also
# when it runs while the launcher has read the jobs (the job still wanted
# to run) but not yet given it a slot: stop_job then finds no slot, returns
# 'stopped' and commits.  The launcher used to start a worker for the job
# anyway.  It now reads the job's desired state again, locked, before it
# registers a worker.  A test point holds the launcher between reading the
# jobs and taking a slot; another holds any worker before it claims its slot.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;
use IPC::Run;

fresh_extension();
test_point_release();
psql("DROP TABLE IF EXISTS t105; CREATE TABLE t105 (k text)");

stop_while_launcher_held('launcher_before_slot', 'j105', 't105', q{{"map": {"k": "key"}}},
	'the launcher is held before it gives the job a slot');

# A wait_job whose job is stopped and started again while it waits, and
# gets the same slot anew (its wait tickets count from 0 again): it takes a
# new ticket, and returns once the job has committed its input, instead of
# timing out on a ticket the new worker never saw.  (The job does not end:
# a finished one would answer by its state.)  A test point holds
# wait_job after it took its ticket.
psql("TRUNCATE t105");
psql(qq{SELECT mailer.create_job('w105', \$\${
	"source": {"type": "generator", "rate": 100},
	"steps": [{"map": {"k": "value->>'order_id'"}}],
	"sink": {"type": "table", "table": "t105"},
	"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
wait_until('w105 runs', sub { psql("SELECT count(*) > 0 FROM t105") eq 't' });
my $from = test_point_hold('wait_job_waiting');
my ($in, $out, $err) = ('', '', '');
my $waiter = IPC::Run::start(['psql', '-X', '-q', '-A', '-t'], '<', \$in, '>', \$out, '2>', \$err);
$in = "SELECT mailer.wait_job('w105', '40 seconds');\n\\q\n";
wait_until('wait_job has taken its ticket', sub {
	$waiter->pump_nb;
	pg_log_since($from) =~ /mailer test point wait_job_waiting reached/;
});
psql("SELECT mailer.stop_job('w105')");
psql("SELECT mailer.start_job('w105')");
wait_until('w105 runs again', sub { psql("SELECT state FROM mailer.jobs WHERE name = 'w105'") eq 'running' });
test_point_release();
$waiter->finish;
is($out, "running\n", 'wait_job returns once the restarted job has committed its input') or diag($err);
is(psql("SELECT count(*) = count(DISTINCT k) FROM t105"), 't', 'every row once');

# The job dropped while wait_job waits: an error with a hint.
$from = test_point_hold('wait_job_waiting');
($in, $out, $err) = ('', '', '');
$waiter = IPC::Run::start(['psql', '-X', '-q', '-A', '-t', '-v', 'VERBOSITY=verbose'], '<', \$in, '>', \$out, '2>', \$err);
$in = "SELECT mailer.wait_job('w105', '40 seconds');\n\\q\n";
wait_until('wait_job waits', sub {
	$waiter->pump_nb;
	pg_log_since($from) =~ /mailer test point wait_job_waiting reached/;
});
psql("SELECT mailer.drop_job('w105')");
test_point_release();
$waiter->finish;
like($err, qr/42704: job "w105" was dropped while waiting/, 'wait_job: the job was dropped');
like($err, qr/HINT:  Create the job again with mailer.create_job to run it/, '... with a hint');
psql("DROP TABLE t105");
done_testing();
