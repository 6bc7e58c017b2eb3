# mailer.partition_metrics.records_in goes on after a restart, as the job's
# counters do: each checkpoint keeps the records read per partition, and a
# restarted worker starts each partition's count from its checkpoint's and
# counts the records it reads again from there.  Three partitions with
# different numbers of records; a job of one process on RocksDB and a job
# of two subtasks on the memory backend; the checkpoint interval long, so
# that only a stop commits.  After a stop and start, a SIGKILL of a worker
# (the server reinitializes) and an immediate shutdown of the server, each
# partition's records_in never drops below its committed count and ends
# equal to the records in the partition.  On a server of its own
# (MailerCluster), with a slot for every subtask.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerCluster;
use MailerTest;
use MailerParallelTest;
use Test::More;

mailer_node('node', par_node_conf(8));
my $topic = fresh_topic('t148', 3);
psql("CREATE TABLE totals_148 (k text PRIMARY KEY, n bigint, total numeric);
	  CREATE TABLE totals_148_par (k text PRIMARY KEY, n bigint, total numeric)");

my %jobs = (records_148 => [ 'rocksdb', 1, 'totals_148' ], records_148_par => [ 'memory', 2, 'totals_148_par' ]);
my @jobs = sort keys %jobs;
for my $job (@jobs)
{
	my ($backend, $parallelism, $table) = @{ $jobs{$job} };
	psql("SELECT mailer.create_job('$job', \$\$"
		  . qq[{"source": {"type": "kafka", "brokers": "$MailerTest::BROKERS", "topic": "$topic", "start": "earliest"},
			   "steps": [{"key_by": {"k": "value->>'k'"}},
						 {"aggregate": {"n": "count(*)", "total": "sum((value->>'a')::numeric)"}}],
			   "sink": {"type": "table", "table": "$table"},
			   "checkpoint": {"interval": "1 hour"},
			   "state": {"backend": "$backend"},
			   "parallelism": $parallelism}]
		  . "\$\$)");
}

# Records per partition so far, and a round of more.
my %want = (0 => 0, 1 => 0, 2 => 0);
my $serial = 0;
sub produce_round
{
	my (%n) = @_;
	my @events;
	for my $p (sort keys %n)
	{
		push @events, map { { p => $p, k => 'k' . ($serial++ % 7), t => $serial, a => 1 } } 1 .. $n{$p};
		$want{$p} += $n{$p};
	}
	produce_events($topic, \@events);
}

sub want_text { join(',', map { "$_:$want{$_}" } sort keys %want) }

sub live_counts
{
	my ($job) = @_;
	return psql("SELECT string_agg(partition || ':' || records_in, ',' ORDER BY partition)
				   FROM mailer.partition_metrics WHERE name = '$job'");
}

sub committed_counts
{
	my ($job) = @_;
	return psql("SELECT coalesce(string_agg(p.key || ':' || p.value, ',' ORDER BY p.key), '')
				   FROM mailer.checkpoints c JOIN mailer.job j USING (job_id),
						jsonb_each(c.partition_records_in -> '$topic') p
				  WHERE j.name = '$job'
					AND c.epoch = (SELECT max(epoch) FROM mailer.checkpoints d WHERE d.job_id = c.job_id)");
}

sub all_read
{
	my ($what) = @_;
	my $total = $want{0} + $want{1} + $want{2};
	for my $job (@jobs)
	{
		wait_for_sql("$job read $total records ($what)",
			"SELECT records_in FROM mailer.metrics WHERE name = '$job' AND state = 'running'", $total, 120);
		wait_until("$job: records_in per partition $what", sub { (live_counts($job) // '') eq want_text() }, 60);
		is(live_counts($job), want_text(), "$job: records_in per partition $what");
	}
}

# Each partition's live count at least its committed count, sampled while
# the restarted workers replay.
sub never_below_committed
{
	my ($what, %committed) = @_;
	my $drops = 0;
	for (1 .. 40)
	{
		for my $job (@jobs)
		{
			my $live = psql("SELECT coalesce(string_agg(partition || ':' || records_in, ','), '')
							   FROM mailer.partition_metrics WHERE name = '$job'");
			for my $pc (split /,/, $live)
			{
				my ($p, $n) = split /:/, $pc;
				$drops++ if $n < $committed{$job}{$p};
			}
		}
		select(undef, undef, undef, 0.05);
	}
	is($drops, 0, "records_in never below the committed counts $what");
}

sub committed_hash
{
	my %c;
	for my $job (@jobs)
	{
		$c{$job}{ $_->[0] } = $_->[1] for map { [ split /:/ ] } split /,/, committed_counts($job);
	}
	return %c;
}

# A first round, committed by a stop; the counts go on after the start.
produce_round(0 => 30, 1 => 12, 2 => 5);
all_read('after the first round');
for my $job (@jobs)
{
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job stopped");
	is(committed_counts($job), want_text(), "$job: the checkpoint keeps the records read per partition");
	psql("SELECT mailer.start_job('$job')");
}
for my $job (@jobs)
{
	wait_until("$job running again with its partitions",
		sub { psql("SELECT count(*) FROM mailer.partition_metrics WHERE name = '$job'") == 3 }, 60);
	wait_until("$job: records_in restored", sub { (live_counts($job) // '') eq want_text() }, 30);
	is(live_counts($job), want_text(), "$job: records_in per partition after a stop and start");
}
my %committed = committed_hash();

# A second round, read but not committed, then SIGKILL of a worker: every
# worker restarts from the stop's checkpoint and reads the round again.
produce_round(0 => 20, 1 => 33, 2 => 1);
all_read('after the second round');
my $pid = worker_pid('records_148');
is(kill('KILL', $pid), 1, 'SIGKILL sent to the worker of records_148');
wait_until('the server restarted after the crash',
	sub { my $p = worker_pid('records_148'); $p > 0 && $p != $pid }, 120);
never_below_committed('after the kill', %committed);
all_read('after the kill');
for my $job (@jobs)
{
	is(committed_counts($job), join(',', map { "$_:$committed{$job}{$_}" } 0 .. 2),
		"$job: nothing committed since the stop");
}

# A third round, then an immediate shutdown of the server.
produce_round(0 => 4, 1 => 9, 2 => 40);
all_read('after the third round');
pg_service('crash');
pg_service('start');
never_below_committed('after the server crash', %committed);
all_read('after the server crash');

# A stop commits the counts; they equal the records per partition.
for my $job (@jobs)
{
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job stopped at the end");
	is(committed_counts($job), want_text(), "$job: the last checkpoint's counts equal the records per partition");
}
is(psql("SELECT sum(n) FROM totals_148"), $want{0} + $want{1} + $want{2}, 'every record counted once (RocksDB)');
is(psql("SELECT sum(n) FROM totals_148_par"), $want{0} + $want{1} + $want{2}, 'every record counted once (memory, 2 subtasks)');

done_testing();
