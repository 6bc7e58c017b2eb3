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

fresh_extension();
test_point_release();
psql("DROP TABLE IF EXISTS t105; CREATE TABLE t105 (k text)");

my $from = test_point_hold('launcher_before_slot', 'worker_before_claim');
my $job_id = psql(qq{SELECT mailer.create_job('j105', \$\${
	"source": {"type": "generator", "events": 1000, "rate": 100},
	"steps": [{"map": {"k": "key"}}],
	"sink": {"type": "table", "table": "t105"},
	"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
my $launcher = test_point_wait_reached('launcher_before_slot', $from);
is($launcher, launcher_pid(), 'the launcher is held before it gives the job a slot');

is(psql("SELECT mailer.stop_job('j105', '1 minute')"), 'stopped', 'stop_job returns: no worker runs');
my $worker_from = pg_log_size();
test_point_release('worker_before_claim');

my $seen = wait_until('a worker starts, or the job is recorded stopped', sub {
	return 'worker' if pg_log_since($worker_from) =~ /mailer test point worker_before_claim reached/;
	return psql("SELECT state FROM mailer.job_status WHERE job_id = $job_id") eq 'stopped' ? 'stopped' : undef;
});
is($seen, 'stopped', 'no worker is started after stop_job returned');
test_point_release();
is(psql("SELECT state, desired_state FROM mailer.jobs WHERE name = 'j105'"), 'stopped|stopped', 'the job is stopped');
is(psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = $job_id"), '0', 'no checkpoint was taken');

# It starts and runs when asked.
psql("SELECT mailer.start_job('j105')");
wait_until('the job runs', sub { psql("SELECT count(*) > 0 FROM t105") eq 't' });
psql("SELECT mailer.drop_job('j105')");
psql("DROP TABLE t105");
done_testing();
