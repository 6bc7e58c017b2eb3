# What the launcher records of a worker that cannot or did not run on.
# - A job whose owner role was dropped can never connect: it is 'failed'
#   with a last_error that says so and how to go on, not retried forever as
#   "could not connect as the job's owner".
# - A worker's exit that the launcher had not recorded when it restarted
#   is recorded by the new launcher: a job that failed under on_error
#   'fail' stays failed, not restarted as "stopped abruptly".  A test point
#   holds the launcher before it records the exit; it is then terminated.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $role = 't108_owner';
fresh_with_owner('t108', $role);
test_point_release();
psql("CREATE TABLE t108 (k text);
      CREATE TABLE t108_fail (k text, q bigint);
      GRANT INSERT ON t108 TO $role");

# The owner is dropped while the job is stopped; a superuser starts it.
psql_as($role, q{SELECT mailer.create_job('j108', $${"source": {"type": "generator", "events": 1000000, "rate": 50},
	"steps": [{"map": {"k": "key"}}], "sink": {"type": "table", "table": "t108"},
	"checkpoint": {"interval": "200 milliseconds"}}$$)});
wait_until('j108 runs', sub { psql("SELECT count(*) > 0 FROM t108") eq 't' });
psql("SELECT mailer.stop_job('j108')");
psql("DROP OWNED BY $role; DROP ROLE $role");
psql("SELECT mailer.start_job('j108')");
my $info = wait_job_state('j108', qr/^(failed|restarting)$/, 60);
is($info->{state}, 'failed', 'a job whose owner was dropped fails');
like($info->{last_error}, qr/the job's owner role \(oid \d+\) was dropped: no worker can run the job; a superuser drops it with mailer.drop_job\('j108'\)/,
	'... and last_error says why and what to do');
is(psql("SELECT restarts FROM mailer.jobs WHERE name = 'j108'"), '0', '... and it is not retried');
psql("SELECT mailer.drop_job('j108')");

# A failed worker's exit, left unrecorded by a launcher that is terminated.
my $from = test_point_hold('launcher_handle_exit');
psql(q{SELECT mailer.create_job('f108', $${"source": {"type": "generator", "events": 300},
	"steps": [{"map": {"k": "key", "q": "100 / ((value->>'order_id')::bigint - 5)"}}],
	"sink": {"type": "table", "table": "t108_fail"}, "on_error": "fail",
	"checkpoint": {"interval": "200 milliseconds"}}$$)});
my $old = test_point_wait_reached('launcher_handle_exit', $from);
is($old, launcher_pid(), 'the launcher is held before it records the exit');
$from = pg_log_size();
psql("SELECT pg_terminate_backend($old)");
my $new = test_point_wait_reached('launcher_handle_exit', $from, 60);
isnt($new, $old, 'the new launcher meets the exit');
test_point_release();
$info = wait_job_state('f108', qr/^(failed|restarting)$/, 60);
is($info->{state}, 'failed', 'the job is recorded failed');
like($info->{last_error}, qr/division by zero/, '... with its error');
is(psql("SELECT restarts FROM mailer.jobs WHERE name = 'f108'"), '0', '... and was not restarted');
psql("SELECT mailer.drop_job('f108')");
done_testing();
