# An idle input does not stall a parallel job (issue 13).  Of a topic's 8
# partitions, only partition 0 receives orders: it belongs to subtask 0
# (partition k is read by subtask k % parallelism), so every other subtask
# reads nothing, and every keyed subtask hears from it only watermarks and
# barriers.  (One partition alone: a second one, idle while the first was
# produced, would rejoin with event times behind the watermark, and its
# records would be late, as idle_timeout means.)  With idle_timeout 2 s, the silent
# partitions go idle: the windows fire, within a bounded time after the
# last input (waited on as progress, no sleep), and equal SQL's GROUP BY;
# every subtask commits the newest epoch (none stuck in alignment).
# Tumbling windows on RocksDB and session windows on the memory backend.
#
# MAILER_TEST_PARALLELISMS limits the parallelisms (MailerParallelTest).
# On a server of its own (MailerCluster), with a slot for every subtask.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerCluster;
use MailerTest;
use MailerKafkaTest qw(job_epoch);
use MailerParallelTest;
use Test::More;
use Time::HiRes qw(time);

my $N = 4_000;
my $PARTITIONS = 8;
my @DATA = (0);
my $BOUND = 30;		# seconds from the last input to the last window: 2 s idle, a checkpoint, slack

mailer_node('node', par_node_conf(24));
my $topic = fresh_topic('t123', $PARTITIONS);
my $parallel = parallel_build();

my @jobs;
for my $p (par_list(2, 4))
{
	push @jobs, par_job("t123_tumbling_p$p", topic => $topic, kind => 'tumbling', backend => 'rocksdb',
		parallelism => $p, idle => '2 seconds');
	push @jobs, par_job("t123_session_p$p", topic => $topic, kind => 'session', backend => 'memory',
		parallelism => $p, idle => '2 seconds');
}
my %p = map { $_ => (/_p(\d+)$/)[0] } @jobs;
note('jobs: ' . join(', ', @jobs));
wait_job_state($_, qr/^running$/) for @jobs;
is(wait_job($_), 'running', "$_: wait_job returns before any input") for @jobs;

par_orders('t123_orders', 1, $N, create => 1, in => \@DATA);
par_produce('t123_orders', $topic, 1, $N);
my $end = $N * 0.1 + 3600;
par_markers($topic, $end, @DATA);
my $t0 = time();

for my $job (@jobs)
{
	# Every window fired: the watermark passed the last one.
	eval { wait_watermark($job, ev_time($end - 5), $BOUND); 1 }
	  or diag("$job: " . $@ . psql("SELECT string_agg(format('%s:%s:%s', partition, watermark, idle), ' ' ORDER BY partition) "
			  . "FROM mailer.partition_metrics WHERE name = '$job'"));
	my $elapsed = time() - $t0;
	cmp_ok($elapsed, '<', $BOUND, sprintf('%s: the watermark passed every window %.1f s after the last input', $job, $elapsed));
	is(wait_job($job), 'running', "$job: wait_job returns");
	par_same($job, par_want($job =~ /tumbling/ ? 'tumbling' : 'session', 't123_orders'),
		"$job: every window fired, and equals the GROUP BY over the orders");
	is(psql("SELECT count(*) FROM mailer.partition_metrics WHERE name = '$job' AND idle "
			  . "AND partition <> ALL (ARRAY[" . join(',', @DATA) . "])"), $PARTITIONS - @DATA,
		"$job: the silent partitions are idle");
	is(job_metric($job, 'records_late'), '0', "$job: nothing late");
	if ($parallel)
	{
		par_subtasks_ok($job, $p{$job});
		# Each subtask takes part in every epoch: none is left behind at an
		# older one (it may learn of the newest commit a moment later).
		my $e = job_epoch($job);
		cmp_ok($e, '>', 0, "$job: checkpoints committed");
		my $behind;
		eval {
			wait_until("every subtask of $job at epoch $e", sub {
				($behind = par_subtask_count($job, "coalesce(last_checkpoint_epoch, 0) < $e")) == 0 }, 30);
			1;
		};
		is($behind, 0, "$job: every subtask committed epoch $e");
	}
}

for my $job (@jobs)
{
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job: stopped");
}
psql("SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 't123%'");
kafka('delete-topic', $topic);
done_testing();
