# Issue 3, done when: a bounded generator job of 200,000 events copied into
# a table with append yields exactly 200,000 rows with distinct order_id,
# even when its worker is terminated twice (pg_terminate_backend: final
# checkpoint, then the launcher restarts it) and killed twice (kill -9: the
# postmaster restarts every process, crash recovery, the launcher resumes the
# job from its last checkpoint) during the run.  mailer.jobs counts the
# restarts and says why.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use Test::More;

my $EVENTS = 200_000;

# On a server of its own (MailerCluster): a worker killed with SIGKILL
# makes the postmaster restart every backend.
mailer_node();
fresh_extension();
psql("DROP TABLE IF EXISTS t010_orders;
	CREATE TABLE t010_orders (order_id bigint, customer_id text, amount numeric, ts timestamptz)");

# 20,000 events a second: about ten seconds of work to hit.
my $job_id = psql(qq{SELECT mailer.create_job('t010_copy', \$\${
	"source": {"type": "generator", "events": $EVENTS, "rate": 20000},
	"steps": [{"map": {"order_id": "(value->>'order_id')::bigint",
	                   "customer_id": "value->>'customer_id'",
	                   "amount": "(value->>'amount')::numeric",
	                   "ts": "(value->>'ts')::timestamptz"}}],
	"sink": {"type": "table", "table": "t010_orders", "mode": "append"},
	"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
like($job_id, qr/^\d+$/, 'create_job returns the job id');

sub max_epoch
{
	return psql("SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $job_id");
}

# The pid of the job's running worker, once there is one (not $not).
sub running_worker_pid
{
	my ($not) = @_;
	return wait_until('a running worker for the job', sub {
		my $pid = psql("SELECT pid FROM mailer.jobs WHERE job_id = $job_id AND state = 'running'");
		return $pid ne '' && (!defined $not || $pid != $not) ? $pid : undef;
	}, 120);
}

# Progress of the current worker: an ordinary checkpoint of epoch $epoch or
# later committed; returns its position (the next event number).
sub wait_progress
{
	my ($epoch, $what) = @_;
	my $pos = wait_until("a checkpoint of epoch $epoch or later ($what)", sub {
		my $p = psql("SELECT max((positions->>'next')::bigint) FROM mailer.checkpoints
			WHERE job_id = $job_id AND epoch >= $epoch AND NOT final");
		return $p ne '' ? $p : undef;
	}, 120);
	cmp_ok($pos, '<', $EVENTS, "still mid-run after $what (committed up to event $pos)");
	return $pos;
}

sub restarts
{
	return psql("SELECT restarts FROM mailer.jobs WHERE job_id = $job_id");
}

wait_progress(1, 'the start');
my $pid = running_worker_pid();
ok(psql("SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND backend_type = 'mailer job'") == 1,
	'mailer.jobs.pid is the job worker in pg_stat_activity');

for my $round (1 .. 2)
{
	# SIGTERM: the worker takes a final checkpoint and exits; the launcher
	# sees a worker it did not stop and starts it again at once.
	my $before = restarts();
	$pid = running_worker_pid();
	my $epoch = max_epoch();
	is(psql("SELECT pg_terminate_backend($pid)"), 't', "terminate $round: pg_terminate_backend($pid)");
	wait_until("worker $pid gone", sub {
		psql("SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") == 0 });
	my $newpid = running_worker_pid($pid);
	isnt($newpid, $pid, "terminate $round: a new worker ($newpid) runs the job");
	my $final = psql("SELECT max(epoch) FROM mailer.checkpoints WHERE job_id = $job_id AND epoch > $epoch AND final");
	like($final, qr/^\d+$/, "terminate $round: the terminated worker took a final checkpoint");
	cmp_ok(restarts(), '>', $before, "terminate $round: restarts counted");
	is(psql("SELECT last_error FROM mailer.jobs WHERE job_id = $job_id"),
		'the job worker was terminated', "terminate $round: last_error says why");
	wait_progress($final + 1, "terminate $round");

	# SIGKILL: the postmaster takes the whole server through crash
	# recovery; the launcher resumes the job from its last checkpoint.
	$before = restarts();
	$pid = running_worker_pid();
	$epoch = max_epoch();
	my $launcher = launcher_pid();
	is(kill('KILL', $pid), 1, "kill $round: kill -9 $pid");
	wait_server_ready(not_launcher => $launcher);
	$newpid = running_worker_pid($pid);
	isnt($newpid, $pid, "kill $round: a new worker ($newpid) runs the job");
	cmp_ok(restarts(), '>', $before, "kill $round: restarts counted");
	like(psql("SELECT last_error FROM mailer.jobs WHERE job_id = $job_id"),
		qr/stopped abruptly; the job resumes from its last checkpoint/, "kill $round: last_error says why");
	ok(psql("SELECT last_error_at > now() - interval '5 minutes' FROM mailer.jobs WHERE job_id = $job_id") eq 't',
		"kill $round: last_error_at is recent");
	# The killed worker may have committed epoch + 1 after we looked.
	wait_progress($epoch + 2, "kill $round");
}

is(psql("SELECT mailer.wait_job('t010_copy', '10 minutes')"), 'finished', 'the job finishes');
is(psql("SELECT count(*), count(DISTINCT order_id), min(order_id), max(order_id) FROM t010_orders"),
	"$EVENTS|$EVENTS|0|" . ($EVENTS - 1), "exactly $EVENTS rows, one per order_id");
is(psql("SELECT count(*) FROM t010_orders WHERE customer_id IS NULL OR amount IS NULL
		OR ts <> timestamptz '2025-01-01 00:00:00+00' + order_id * interval '10 milliseconds'"),
	'0', 'every row complete and as generated');
is(psql("SELECT state, pid IS NULL FROM mailer.jobs WHERE job_id = $job_id"), 'finished|t',
	'mailer.jobs: finished, no worker');
cmp_ok(restarts(), '>=', 4, 'mailer.jobs.restarts counts the four hits');
is(psql("SELECT (positions->>'next')::bigint, final FROM mailer.checkpoints
		WHERE job_id = $job_id ORDER BY epoch DESC LIMIT 1"), "$EVENTS|t",
	'the last checkpoint is final, past the last event');
is(psql("SELECT records_in, records_out FROM mailer.metrics WHERE name = 't010_copy'"),
	"$EVENTS|$EVENTS", 'metrics: every record in and out once');
is(psql("SELECT count(*) FROM mailer.dead_letters WHERE job_id = $job_id"), '0', 'no dead letters');

# The same events without any hit, to compare with: identical rows.
psql("CREATE TABLE t010_reference (LIKE t010_orders)");
psql(qq{SELECT mailer.create_job('t010_reference', \$\${
	"source": {"type": "generator", "events": $EVENTS},
	"steps": [{"map": {"order_id": "(value->>'order_id')::bigint",
	                   "customer_id": "value->>'customer_id'",
	                   "amount": "(value->>'amount')::numeric",
	                   "ts": "(value->>'ts')::timestamptz"}}],
	"sink": {"type": "table", "table": "t010_reference"}}\$\$)});
is(psql("SELECT mailer.wait_job('t010_reference', '10 minutes')"), 'finished', 'the reference job finishes');
is(psql("SELECT (SELECT count(*) FROM (SELECT * FROM t010_orders EXCEPT ALL SELECT * FROM t010_reference) a),
		(SELECT count(*) FROM (SELECT * FROM t010_reference EXCEPT ALL SELECT * FROM t010_orders) b)"),
	'0|0', 'the rows equal those of an uninterrupted run');

psql("SELECT mailer.drop_job('t010_copy'), mailer.drop_job('t010_reference')");
psql("DROP TABLE t010_orders, t010_reference");
done_testing();
