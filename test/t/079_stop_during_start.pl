# A stop_job while the launcher is starting the job's worker (issue 11,
# item 8): the launcher has chosen to start the worker, then stop_job asks
# the job to stop and, seeing no worker, returns.  The launcher must not
# then start the worker anyway (it used to clear the stop request just set
# and register a worker, which ran after stop_job had said "stopped").  Test
# points hold the launcher before it registers the worker, and any worker
# before it claims its slot.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
test_point_release();
psql("DROP TABLE IF EXISTS t079; CREATE TABLE t079 (order_id bigint, customer_id text)");

my $from = test_point_hold('launcher_before_start', 'worker_before_claim');
my $job_id = psql(qq{SELECT mailer.create_job('t079', \$\${
	"source": {"type": "generator", "events": 1000, "rate": 100},
	"steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
	"sink": {"type": "table", "table": "t079"},
	"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
my $launcher = test_point_wait_reached('launcher_before_start', $from);
is($launcher, launcher_pid(), 'the launcher is held before it starts the worker');

is(psql("SELECT mailer.stop_job('t079', '1 minute')"), 'stopped', 'stop_job returns: no worker runs');
my $worker_from = pg_log_size();
test_point_release('worker_before_claim');

# Either a worker gets started (held before it claims its slot), or the
# launcher records the stop: whichever comes first.
my $seen = wait_until('a worker starts, or the job is recorded stopped', sub {
	return 'worker' if pg_log_since($worker_from) =~ /mailer test point worker_before_claim reached/;
	# The launcher's own record (mailer.jobs says 'stopped' as soon as stop_job commits).
	return psql("SELECT state FROM mailer.job_status WHERE job_id = $job_id") eq 'stopped' ? 'stopped' : undef;
});
is($seen, 'stopped', 'no worker is started after stop_job returned');
test_point_release();

is(psql("SELECT state, desired_state FROM mailer.jobs WHERE name = 't079'"), 'stopped|stopped', 'the job is stopped');
is(psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = $job_id"), '0', 'no checkpoint was taken');

# It starts and runs to the end when asked.
psql("SELECT mailer.start_job('t079')");
wait_until('the job runs', sub { psql("SELECT count(*) > 0 FROM t079") eq 't' });
psql("SELECT mailer.drop_job('t079')");
psql("DROP TABLE t079");
done_testing();
