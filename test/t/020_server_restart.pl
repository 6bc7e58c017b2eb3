# Running jobs resume after the server restarts: after a clean restart
# (fast shutdown: each worker takes a final checkpoint) and after a crash
# (immediate shutdown: nothing is saved, the job replays from its last
# checkpoint).  Either way each event is written once.  A crash is counted
# in mailer.jobs.restarts and explained in last_error; a clean restart is
# not a crash.  On a server of its own (MailerCluster), which it restarts
# and crashes.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use Test::More;

my $EVENTS = 100_000;

mailer_node();
fresh_extension();

sub create_job
{
	my ($name, $interval) = @_;
	psql("DROP TABLE IF EXISTS $name; CREATE TABLE $name (order_id bigint, customer_id text)");
	return psql(qq{SELECT mailer.create_job('$name', \$\${
		"source": {"type": "generator", "events": $EVENTS, "rate": 20000},
		"steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
		"sink": {"type": "table", "table": "$name"},
		"checkpoint": {"interval": "$interval"}}\$\$)});
}

# Wait until the job has committed some output, and is not done yet.
sub wait_mid_run
{
	my ($job_id, $what) = @_;
	my $pos = wait_until("$what: a checkpoint with output", sub {
		my $p = psql("SELECT max((positions->>'next')::bigint) FROM mailer.checkpoints
			WHERE job_id = $job_id AND NOT final");
		return $p ne '' && $p > 0 ? $p : undef;
	});
	cmp_ok($pos, '<', $EVENTS, "$what: mid-run (committed up to event $pos)");
	return $pos;
}

sub check_output
{
	my ($name, $what) = @_;
	is(psql("SELECT mailer.wait_job('$name', '10 minutes')"), 'finished', "$what: the job finishes");
	is(psql("SELECT count(*), count(DISTINCT order_id), min(order_id), max(order_id) FROM $name"),
		"$EVENTS|$EVENTS|0|" . ($EVENTS - 1), "$what: every event written exactly once");
}

sub job
{
	my ($name) = @_;
	return psql("SELECT state, restarts, coalesce(last_error, '') FROM mailer.jobs WHERE name = '$name'");
}

#
# A clean restart: the worker takes a final checkpoint on the way down and
# the job goes on from there; nothing was lost, nothing is counted.
#
my $clean = create_job('t020_clean', '200 milliseconds');
wait_mid_run($clean, 'before the restart');
is(job('t020_clean'), 'running|0|', 'running, never restarted');
pg_service('restart');
wait_server_ready();
# The job may already have checkpointed again after the restart: look for
# the final checkpoint among the retained ones.
ok(psql("SELECT bool_or(final) FROM mailer.checkpoints WHERE job_id = $clean") eq 't',
	'the shutdown took a final checkpoint');
check_output('t020_clean', 'clean restart');
is(job('t020_clean'), 'finished|0|', 'a clean restart is not counted as a restart');

#
# A crash: the server stops without a word to anyone; the job resumes from
# its last committed checkpoint and replays the rest.
#
my $crash = create_job('t020_crash', '200 milliseconds');
wait_mid_run($crash, 'before the crash');
pg_service('crash');
pg_service('start');
wait_server_ready();
wait_until('the job running again', sub {
	psql("SELECT state FROM mailer.jobs WHERE name = 't020_crash'") eq 'running' });
my ($state, $restarts, $error) = split /\|/, job('t020_crash');
is($restarts, 1, 'the crash is counted in restarts');
like($error, qr/^the server or the job worker stopped abruptly; the job resumes from its last checkpoint$/,
	'last_error says the job stopped abruptly');
check_output('t020_crash', 'crash');
is(psql("SELECT restarts FROM mailer.jobs WHERE name = 't020_crash'"), '1', 'one restart in all');

#
# A crash soon after the worker was restarted, before the new worker's
# first checkpoint: the last checkpoint is the final one of the worker
# before, yet the job did not stop cleanly.
#
my $soon = create_job('t020_soon', '1 minute');
wait_until('the first worker running', sub {
	psql("SELECT state FROM mailer.job_status WHERE job_id = $soon") eq 'running' });
my $pid = psql("SELECT pid FROM mailer.jobs WHERE job_id = $soon");
is(psql("SELECT pg_terminate_backend($pid)"), 't', 'terminate the first worker');
wait_until('its final checkpoint', sub {
	psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = $soon AND final") == 1 });
wait_until('the second worker recorded running', sub {
	psql("SELECT state, pid IS DISTINCT FROM $pid FROM mailer.job_status WHERE job_id = $soon") eq 'running|t' });
is(psql("SELECT restarts FROM mailer.jobs WHERE job_id = $soon"), '1', 'the termination is counted');
is(psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = $soon AND NOT final"), '0',
	'the second worker has not checkpointed yet');
pg_service('crash');
pg_service('start');
wait_server_ready();
wait_until('the job running again', sub {
	psql("SELECT state FROM mailer.jobs WHERE job_id = $soon") eq 'running' });
($state, $restarts, $error) = split /\|/, job('t020_soon');
is($restarts, 2, 'the crash is counted too');
like($error, qr/stopped abruptly/, 'last_error says the job stopped abruptly');
check_output('t020_soon', 'crash after a restart');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 't020%'");
psql("DROP TABLE t020_clean, t020_crash, t020_soon");
done_testing();
