# Parallel jobs give the same results at every parallelism (issue 13).
# 30,000 orders on 8 partitions, keyed in Kafka by order id, grouped by the
# customer in the value (the group key is never the Kafka key), with event
# times spread over 50 minutes and up to 4 s out of order per partition.
# Tumbling, sliding and session windows and an unwindowed aggregate run at
# parallelism 1 (the baseline), 2 and 4 on RocksDB, and tumbling, session
# and unwindowed at parallelism 4 on the memory backend, with 7 key groups.
# Every sink equals SQL's GROUP BY over the same orders; while they run,
# mailer.subtasks shows each job's subtasks, mailer.metrics counts every
# record once with the job's parallelism, and partition_metrics shows each
# partition once, with the subtask that reads it.  A totals job over two
# topics at parallelism 4 shows each topic's partitions with their subtask.
#
# MAILER_TEST_PARALLELISMS limits the parallelisms (MailerParallelTest);
# MAILER_TEST_ORDERS sets the number of orders (300000: the issue's full
# volume, about two minutes on 2 cores).  On a server of its own
# (MailerCluster), with a slot for every subtask.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerCluster;
use MailerTest;
use MailerParallelTest;
use List::Util qw(max);
use Test::More;
use Time::HiRes qw(time);

my $N = $ENV{MAILER_TEST_ORDERS} // 30_000;
my $PARTITIONS = 8;

mailer_node('node', par_node_conf(64));
my $topic = fresh_topic('t120', $PARTITIONS);
my $parallel = parallel_build();
cmp_ok(psql("SHOW max_prepared_transactions"), '>=', max(@PARALLELISMS) - 1,
	'max_prepared_transactions covers the largest parallelism');

# The jobs: [kind, parallelism, backend], each parallelism as
# MAILER_TEST_PARALLELISMS allows it, without repeats.
my (@jobs, %seen);
for my $spec ((map { my $p = $_; map { [ $_, $p, 'rocksdb' ] } qw(tumbling sliding session totals) } 1, 2, 4),
	(map { [ $_, 4, 'memory' ] } qw(tumbling session totals)))
{
	my ($kind, $p, $backend) = @$spec;
	$p = par($p);
	my $name = sprintf('t120_%s_p%d_%s', $kind, $p, substr($backend, 0, 1));
	next if $seen{$name}++;
	push @jobs, { name => $name, kind => $kind, p => $p, backend => $backend };
}
note('jobs: ' . join(', ', map { $_->{name} } @jobs));

par_orders('t120_orders', 1, $N, create => 1, partitions => $PARTITIONS);
is(psql("SELECT count(DISTINCT customer_id) || ' ' || count(DISTINCT p) FROM t120_orders"), "300 $PARTITIONS",
	'the orders go to 300 customers over every partition');
# The memory-backend jobs have 7 key groups (where the build has them):
# ranges of unequal sizes over the 4 subtasks.
for my $j (@jobs)
{
	par_job($j->{name}, topic => $topic, kind => $j->{kind}, parallelism => $j->{p}, backend => $j->{backend},
		key_groups => $parallel && $j->{backend} eq 'memory' ? 7 : undef);
}

# One more job reads two topics: the second, of 3 partitions, has orders
# of its own.  Partition k of the t-th topic is read by subtask (k + t) %
# parallelism.
my $topic2 = unique_name('t120b');
kafka('create-topic', $topic2, 3);
my $N2 = 3_000;
par_orders('t120_orders2', 1_000_001, 1_000_000 + $N2, create => 1, partitions => 3);
my $two = par_job(sprintf('t120_two_topics_p%d_r', par(4)), topic => [ $topic, $topic2 ], kind => 'totals',
	parallelism => par(4));

# Produced in three bursts, partition after partition, so that each job
# reads every partition in several batches; then an end marker per
# partition moves every watermark past every window.
my $t0 = time();
my $third = int($N / 3);
par_produce('t120_orders', $topic, 1, $third);
par_produce('t120_orders', $topic, $third + 1, 2 * $third);
par_produce('t120_orders', $topic, 2 * $third + 1, $N);
par_produce('t120_orders2', $topic2, 1_000_001, 1_000_000 + $N2);
my $end = $N * 0.1 + 3600;
my $markers = par_markers($topic, $end, 0 .. $PARTITIONS - 1);
my $produced = $N + $markers;
note(sprintf('produced %d records in %.1f s', $produced, time() - $t0));

for my $j (@jobs)
{
	my ($name, $p) = @$j{qw(name p)};
	wait_watermark($name, ev_time($end - 5), 180) if $j->{kind} ne 'totals';
	is(wait_job($name, 180), 'running', "$name: wait_job returns, the job running");

	# Still running: every subtask and every partition shows.
	par_subtasks_ok($name, $p) if $parallel;
	par_partitions_ok($name, $p, $PARTITIONS, $parallel, $name, $produced);

	my $m = job_metrics($name);
	is("$m->{records_in} $m->{records_filtered} $m->{records_dead_lettered} $m->{records_late}",
		"$produced $markers 0 0", "$name: records_in counts every record once; only the markers filtered, none dead or late");
	par_same($name, par_want($j->{kind}, 't120_orders'), "$name: $j->{kind} equals the GROUP BY over the orders");
}
{
	my $p = par(4);
	is(wait_job($two, 180), 'running', "$two: wait_job returns, the job running");
	par_subtasks_ok($two, $p) if $parallel;
	is(job_metric($two, 'records_in'), $produced + $N2, "$two: records_in counts every record of both topics once");
	par_same($two, "SELECT customer_id, count(*) AS orders, sum(amount) AS total FROM "
		  . "(SELECT * FROM t120_orders UNION ALL SELECT * FROM t120_orders2) e GROUP BY 1",
		"$two: totals equal the GROUP BY over the orders of both topics");
	is(psql("SELECT count(*) || ' ' || count(*) FILTER (WHERE topic = '$topic2') || ' ' || sum(records_in) "
			  . "FROM mailer.partition_metrics WHERE name = '$two'"), "11 3 " . ($produced + $N2),
		"$two: partition_metrics lists the 8 and 3 partitions, and every record");
	if ($parallel)
	{
		is(psql("SELECT count(*) FROM mailer.partition_metrics WHERE name = '$two' "
				  . "AND subtask = (partition + CASE topic WHEN '$topic' THEN 0 ELSE 1 END) % $p"), 11,
			"$two: partition k of topic t read by subtask (k + t) % $p");
	}
}
cmp_ok(psql("SELECT count(*) FROM t120_tumbling_p1_r"), '>', 10_000, 'many tumbling windows');
cmp_ok(psql("SELECT count(*) FROM t120_session_p1_r"), '>', 1_000, 'many sessions');
cmp_ok(psql("SELECT count(*) FILTER (WHERE orders > 1) FROM t120_session_p1_r"), '>', 1_000,
	'many sessions of several orders');
note(sprintf('every job caught up %.1f s after the production began', time() - $t0));

# Stopped, a job has no subtask left, and restarts where it was.
for my $j (@jobs, { name => $two })
{
	is(psql("SELECT mailer.stop_job('$j->{name}')"), 'stopped', "$j->{name}: stopped");
	if ($parallel)
	{
		is(par_subtask_count($j->{name}), '0',
			"$j->{name}: stopped, no subtask in mailer.subtasks");
	}
}

is(psql("SELECT count(*) FROM pg_prepared_xacts"), '0', 'no prepared transaction is left behind');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 't120%'");
kafka('delete-topic', $_) for $topic, $topic2;
done_testing();
