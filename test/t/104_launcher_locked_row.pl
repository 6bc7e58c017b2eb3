# A plain role's open transaction must not freeze the launcher for every
# role.  `BEGIN; SELECT mailer.drop_job('mine');` left idle holds the job's
# job_status row (the cascade deleted it) until it ends.  The launcher used
# to record the stopped worker's exit on that row, wait out its lock_timeout
# and abort the whole round, every round: no job of any role started, and
# an exit handled earlier in the round was lost with it (a job that failed
# under on_error 'fail' was restarted as if healthy).  Now each job's
# record is written on its own: while the drop is open, another role's job
# starts, and a failing job is recorded 'failed'.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;
use IPC::Run;

fresh_extension();
test_point_release();
drop_tables('t104');

my ($alice, $bob) = qw(t104_alice t104_bob);
drop_roles($alice, $bob);
psql("SET client_min_messages = warning;
      CREATE ROLE $alice LOGIN;
      CREATE ROLE $bob LOGIN;
      CREATE TABLE t104_mine (k text);
      CREATE TABLE t104_fresh (k text);
      CREATE TABLE t104_fail (k text, q bigint);
      GRANT INSERT ON t104_mine TO $alice;
      GRANT INSERT ON t104_fresh, t104_fail TO $bob");

# alice's job runs; a session of hers drops it and stays open.
psql_as($alice, q{SELECT mailer.create_job('mine', $${"source": {"type": "generator", "events": 1000000, "rate": 50},
	"steps": [{"map": {"k": "key"}}], "sink": {"type": "table", "table": "t104_mine"},
	"checkpoint": {"interval": "200 milliseconds"}}$$)});
wait_until('mine runs', sub { psql("SELECT count(*) > 0 FROM t104_mine") eq 't' });

my ($in, $out, $err) = ('', '', '');
my $session;
{
	local $ENV{PGUSER} = $alice;
	$session = IPC::Run::start(['psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1'],
		'<', \$in, '>', \$out, '2>', \$err);
}
$in = "BEGIN; SELECT mailer.drop_job('mine'); SELECT 'dropped';\n";
wait_until('the drop is done, not committed', sub {
	die "drop failed: $err\n" unless $session->pumpable;
	$session->pump_nb;
	$out =~ /dropped/;
});
# bob's jobs: one that runs, one that fails on its fifth record.
psql_as($bob, q{SELECT mailer.create_job('fresh', $${"source": {"type": "generator", "events": 300},
	"steps": [{"map": {"k": "key"}}], "sink": {"type": "table", "table": "t104_fresh"},
	"checkpoint": {"interval": "200 milliseconds"}}$$)});
psql_as($bob, q{SELECT mailer.create_job('failing', $${"source": {"type": "generator", "events": 300},
	"steps": [{"map": {"k": "key", "q": "100 / ((value->>'order_id')::bigint - 5)"}}],
	"sink": {"type": "table", "table": "t104_fail"}, "on_error": "fail",
	"checkpoint": {"interval": "200 milliseconds"}}$$)});

my $ok = eval {
	wait_until('fresh writes every row while the drop is open', sub {
		$session->pump_nb;
		psql("SELECT count(*) FROM t104_fresh") eq '300';
	}, 60);
	1;
};
ok($ok, "another role's job starts and runs while a drop is left open") or diag($@);
$ok = eval {
	wait_until('failing is recorded failed while the drop is open', sub {
		$session->pump_nb;
		psql("SELECT state FROM mailer.job_status s JOIN mailer.job j USING (job_id) WHERE j.name = 'failing'") eq 'failed';
	}, 60);
	1;
};
ok($ok, "a failed job's exit is recorded while a drop is left open") or diag($@);
like(psql("SELECT last_error FROM mailer.jobs WHERE name = 'failing'"), qr/division by zero/, 'its last_error names the error');
is(psql("SELECT restarts FROM mailer.jobs WHERE name = 'failing'"), '0', 'it was not restarted');

# The drop commits: the job is gone, and the launcher goes on.
$in .= "COMMIT;\n\\q\n";
$session->finish;
is(psql("SELECT count(*) FROM mailer.job WHERE name = 'mine'"), '0', 'the drop committed');
psql("SELECT mailer.drop_job('fresh'); SELECT mailer.drop_job('failing')");
done_testing();
