# A parallel job's epoch commits once across its subtasks, whatever step of
# the two-phase commit a crash interrupts (issue 13; docs/ARCHITECTURE.md,
# "One commit per epoch").  For each step, a burst of orders is read, the
# job is held at the step (a test point), and the server is stopped
# immediately or the held subtask is killed: on restart the prepared
# shares are rolled back (no decision yet) or committed (after it), no
# prepared transaction is left, and at the end every window equals SQL's
# GROUP BY.  Then the launcher's part: a share left by a job that does not
# run is settled per its decision.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use MailerParallelTest;
use Test::More;

my $PARTITIONS = 4;
my $node = mailer_node('node', par_node_conf(16));
my $topic = fresh_topic('t125', $PARTITIONS);
parallel_build() or plan skip_all => 'this build has no parallel jobs';
my $P = 2;
my $ext = psql("SELECT oid FROM pg_extension WHERE extname = 'mailer'");

par_orders('t125_orders', 1, 8000, create => 1, partitions => $PARTITIONS);
par_job('t125', topic => $topic, kind => 'tumbling', parallelism => $P, interval => '200 ms');
my $job_id = psql("SELECT job_id FROM mailer.job WHERE name = 't125'");

sub mailer_prepared
{
	return psql("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'mailer\\_$ext\\_%'");
}

sub decided_epoch
{
	return psql("SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $job_id AND subtask = 0");
}

# Each step: the point to hold at, how to crash, and what the held epoch
# must become on restart (decided: its subtask 0 row exists).
my @steps = (
	[ 'epoch_after_prepare', 'immediate', 0 ],
	[ 'epoch_before_decision', 'kill', 0 ],
	[ 'epoch_after_decision', 'immediate', 1 ],
	[ 'epoch_after_decision', 'kill', 1 ],
);
my $from = 1;
for my $s (@steps)
{
	my ($point, $how, $decided) = @$s;
	my $to = $from + 1999;
	# The run after a crash replays what the last one had not committed
	# and checkpoints it: wait for that, or its epoch could be the one held
	# below and the epoch named in the share would be one later.
	is(wait_job('t125', 120), 'running', "$point ($how): the job has committed what it read");
	my $before = decided_epoch();
	my $log = test_point_hold($point);
	par_produce('t125_orders', $topic, $from, $to);
	my $pid = test_point_wait_reached($point, $log, 120);
	ok($pid, "$point: a subtask is held there");
	my $held = decided_epoch();
	if ($point eq 'epoch_after_decision')
	{
		cmp_ok($held, '>', $before, "$point: the decision of the held epoch is committed");
		cmp_ok(mailer_prepared(), '>=', 1, "$point: shares still prepared");
	}
	else
	{
		is($held, $before, "$point: the held epoch is not decided");
	}
	my $epoch = $point eq 'epoch_after_decision' ? $held : $before + 1;

	my $crash_log = pg_log_size();
	if ($how eq 'kill')
	{
		is(kill('KILL', $pid), 1, "$point: SIGKILL to the held subtask");
		wait_until('the server restarted after the crash',
			sub { pg_log_since($crash_log) =~ /database system is ready to accept connections/ }, 120);
		wait_server_ready();
	}
	else
	{
		$node->stop('immediate');
		$node->start;
		wait_server_ready();
	}
	test_point_release();
	# Subtask 0 of the next run settles the shares before it reads anything.
	my $gid = "mailer_${ext}_${job_id}_${epoch}_1";
	my $settled = $decided ? 'committed' : 'rolled back';
	wait_until("$point ($how): the share of epoch $epoch $settled",
		sub { pg_log_since($crash_log) =~ /mailer \Q$settled\E the prepared share "\Q$gid\E_[0-9a-f]{16}"/ }, 120);
	pass("$point ($how): the prepared share of epoch $epoch was $settled");
	wait_until("$point: no prepared share left", sub { mailer_prepared() eq '0' }, 120);
	wait_until("$point: the job runs again", sub { par_subtask_count('t125') eq $P }, 120);
	$from = $to + 1;
}

# The rest of the orders, end markers, and the result.
par_produce('t125_orders', $topic, $from, 8000);
par_markers($topic, 100_000, 0 .. $PARTITIONS - 1);
is(wait_job('t125', 240), 'running', 't125: wait_job covers every order');
par_same('t125', par_want('tumbling', 't125_orders'), 't125: every window exact after four crashes in the commit');
is(psql("SELECT records_in - records_filtered FROM mailer.metrics WHERE name = 't125'"), 8000,
	't125: each order counted once');
is(psql("SELECT count(*) FROM (SELECT epoch FROM mailer.checkpoints WHERE job_id = $job_id "
		  . "GROUP BY epoch HAVING count(*) <> $P) x"), 0, 'every retained epoch has a row per subtask');

# The launcher: a share of a job with no worker is settled per its
# decision.  Stopped, the job has a decided epoch E: a share named for E
# is committed, one named for an epoch never decided is rolled back.
is(psql("SELECT mailer.stop_job('t125')"), 'stopped', 't125 stopped');
my $e = decided_epoch();
psql("CREATE TABLE t125_probe (what text)");
psql("BEGIN; INSERT INTO t125_probe VALUES ('decided'); PREPARE TRANSACTION 'mailer_${ext}_${job_id}_${e}_1_00000000000000aa'");
psql("BEGIN; INSERT INTO t125_probe VALUES ('undecided'); PREPARE TRANSACTION 'mailer_${ext}_${job_id}_" . ($e + 5) . "_1_00000000000000bb'");
wait_until('the launcher settled both shares', sub { mailer_prepared() eq '0' }, 60);
is(psql("SELECT string_agg(what, ',') FROM t125_probe"), 'decided',
	'the launcher committed the decided share and rolled back the other');

# A look-alike prepared by another role is not the job's: left alone, and
# it neither blocks restore_job nor is settled in the job's name.
psql("CREATE ROLE t125_other LOGIN");
psql("GRANT INSERT ON t125_probe TO t125_other");
{
	local $ENV{PGUSER} = 't125_other';
	psql("BEGIN; INSERT INTO t125_probe VALUES ('other'); PREPARE TRANSACTION 'mailer_${ext}_${job_id}_" . ($e + 1) . "_1_00000000000000cc'");
}
psql("SELECT mailer.restore_job('t125', $e)");
pass('restore_job is not held up by a look-alike of another role');
is(psql("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE '%_00000000000000cc'"), 1,
	'the look-alike is left to its owner');
psql("ROLLBACK PREPARED 'mailer_${ext}_${job_id}_" . ($e + 1) . "_1_00000000000000cc'");

done_testing();
