# Parallel jobs stay exact through crashes (issue 13).  300,000 orders on 8
# partitions (Kafka key: the order id; group key: the customer, from the
# value), produced in 12 bursts, with a malformed record in each, to
# totals and tumbling-window jobs at parallelism 2 and 4 on RocksDB and on
# the memory backend, a session job and a sliding one.  While the bursts
# are produced (by a child process, in slices), 10 random subtasks of
# random jobs, from mailer.subtasks, are killed with SIGKILL (each kill
# makes the server restart every backend, so every job restarts from its
# last committed epoch) and the server is stopped with pg_ctl -m immediate
# and started twice.  Half of the disruptions strike while the jobs
# consume, right after a new epoch; the other half while a lock on the
# sink tables holds their checkpoints before the commit.
#
# Afterwards every sink equals SQL's GROUP BY over the orders, each job
# counted every record once, its dead letters are the malformed records,
# unique by (topic, partition, offset), and no prepared transaction is
# left behind.
#
# MAILER_TEST_PARALLELISMS limits the parallelisms (MailerParallelTest).
# On a server of its own (MailerCluster): every kill restarts all of it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerCluster;
use MailerTest;
use MailerKafkaTest qw(lock_tables unlock_tables job_epoch wait_epoch_after);
use MailerParallelTest;
use Test::More;
use POSIX ();

my $BURSTS = 12;
my $BURST = 25_000;
my $N = $BURSTS * $BURST;
my $PARTITIONS = 8;
my %CRASH_ROUND = (4 => 1, 9 => 1);
srand(121);

# Entries are read back from the backend after every checkpoint: restores
# and replays go through the state backend, not a warm cache.
mailer_node('node', par_node_conf(48) . "mailer.state_cache_entries = 0\n");
my $topic = fresh_topic('t121', $PARTITIONS);
my $parallel = parallel_build();

# 1,000 customers, 0.01 s apart: 50 minutes of event time.
par_orders('t121_orders', 1, $N, create => 1, partitions => $PARTITIONS, customers => 1000, step => 0.01);

my (@jobs, %seen);
for my $spec ((map { my $p = $_; map { my $b = $_; map { [ $_, $p, $b ] } qw(totals tumbling) } qw(rocksdb memory) } 2, 4),
	[ 'session', 4, 'rocksdb' ], [ 'sliding', 2, 'memory' ])
{
	my ($kind, $p, $backend) = @$spec;
	$p = par($p);
	my $name = sprintf('t121_%s_p%d_%s', $kind, $p, substr($backend, 0, 1));
	next if $seen{$name}++;
	par_job($name, topic => $topic, kind => $kind, parallelism => $p, backend => $backend,
		interval => '300 milliseconds');
	push @jobs, { name => $name, kind => $kind, p => $p };
}
my @names = map { $_->{name} } @jobs;
note('jobs: ' . join(', ', @names));

# Every job runs, with all its subtasks.
sub all_running
{
	for my $j (@jobs)
	{
		wait_until("$j->{name} to run", sub {
			psql("SELECT state = 'running' AND pid IS NOT NULL FROM mailer.jobs WHERE name = '$j->{name}'") eq 't'
			  && (!$parallel || par_subtask_count($j->{name}, 'pid IS NOT NULL') == $j->{p});
		}, 180);
	}
}
all_running();

# Produce slices of messages in a child process, so that the jobs are
# disrupted while the burst is being produced (the server may be down
# meanwhile: the messages are read from it first).  Returns its pid.
sub produce_in_background
{
	my (@slices) = @_;
	my $pid = fork() // die "fork: $!\n";
	return $pid if $pid;
	my $ok = eval { par_send($topic, $_) for @slices; 1 };
	print STDERR "producer: $@" unless $ok;
	POSIX::_exit($ok ? 0 : 1);		# not the test's END blocks: they would stop the node
}

my ($kills, $crashes) = (0, 0);
my %mode_count;
my @bad;	# [partition, key] of the malformed records
my $SLICES = 5;
for my $round (1 .. $BURSTS)
{
	my $target = $jobs[ int(rand(@jobs)) ];
	my $locked_mode = $round % 2 == 0;
	my $before = job_epoch($target->{name});
	my $lock;

	# The burst in slices, a malformed record in the middle one.
	my $first = ($round - 1) * $BURST;
	my @slices = map { par_messages('t121_orders', $first + $_ * $BURST / $SLICES + 1, $first + ($_ + 1) * $BURST / $SLICES) }
	  0 .. $SLICES - 1;
	my $bad_p = $round % $PARTITIONS;
	$slices[ int($SLICES / 2) ]{$bad_p} .= "bad-$round\t{\"customer_id\": \"c1\", \"amount\": \n";
	push @bad, [ $bad_p, "bad-$round" ];

	$lock = lock_tables(@names) if $locked_mode;
	my $producer = produce_in_background(@slices);
	if ($locked_mode)
	{
		# Jobs read part of the burst and block in their checkpoint.
		wait_until('job subtasks to block in their checkpoint', sub {
			psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'mailer%' "
				  . "AND wait_event_type = 'Lock'") >= 2;
		}, 180);
	}
	else
	{
		wait_epoch_after($target->{name}, $before, 180);
	}

	my $status = waitpid($producer, POSIX::WNOHANG()) == $producer ? $? : undef;
	my $producing = !defined $status;
	$mode_count{'with the producer still at work'}++ if $producing;
	note(sprintf('round %d (%s%s): %s', $round, $locked_mode ? 'blocked checkpoint' : 'consuming',
		$producing ? ', producing' : '', join(', ', map { "$_ read " . job_metric($_, 'records_in') } @names)));
	my $launcher = launcher_pid();
	if ($CRASH_ROUND{$round})
	{
		pg_service('crash');
		pg_service('start');
		$crashes++;
	}
	else
	{
		my @pids = par_subtask_pids($target->{name}, $parallel);
		die "no subtask of $target->{name} runs\n" unless @pids;
		my $pid = $pids[ int(rand(@pids)) ];
		note("killing $pid, one of the " . scalar(@pids) . " subtasks of $target->{name}");
		kill 'KILL', $pid or die "could not kill $pid: $!\n";
		$kills++;
	}
	$mode_count{ $locked_mode ? 'in a blocked checkpoint' : 'while consuming' }++;
	unlock_tables($lock) if $lock;

	# The server goes through crash recovery; the launcher restarts the jobs.
	wait_server_ready(not_launcher => $launcher, timeout => 180);
	$status = waitpid($producer, 0) == $producer ? $? : -1 if $producing;
	die "producing burst $round failed\n" if $status != 0;
	all_running();
}

note('disruptions: ' . join(', ', map { "$mode_count{$_} $_" } sort keys %mode_count));
cmp_ok($kills, '>=', 8, 'subtasks were killed with SIGKILL at least 8 times');
cmp_ok($crashes, '>=', 2, 'the server was stopped with -m immediate at least twice');

# Markers move every watermark past every window.
my $end = $N * 0.01 + 3600;
my $markers = par_markers($topic, $end, 0 .. $PARTITIONS - 1);
my $produced = $N + @bad + $markers;

my $at = topic_offsets_by_key($topic);
my $want_dead = join(',', sort map { "$at->{$_->[1]}[0]:$at->{$_->[1]}[1]" } @bad);
for my $j (@jobs)
{
	my $name = $j->{name};
	wait_watermark($name, ev_time($end - 5), 600) if $j->{kind} ne 'totals';
	is(wait_job($name, '10 minutes'), 'running', "$name: wait_job returns");
	par_subtasks_ok($name, $j->{p}) if $parallel;
	par_same($name, par_want($j->{kind}, 't121_orders'),
		"$name: $j->{kind} equals the GROUP BY after $kills kills and $crashes crashes");
	my $m = job_metrics($name);
	is("$m->{records_in} $m->{records_dead_lettered} $m->{records_filtered} $m->{records_late}",
		"$produced " . scalar(@bad) . " $markers 0",
		"$name: records_in counts every record once; the malformed ones dead, the markers filtered, none late");
	is(psql("SELECT count(*) || ' ' || count(DISTINCT (topic, partition, \"offset\")) || ' ' "
			  . "|| coalesce(string_agg(partition || ':' || \"offset\", ',' ORDER BY (partition || ':' || \"offset\") COLLATE \"C\"), '') "
			  . "FROM mailer.dead_letters d JOIN mailer.job USING (job_id) WHERE name = '$name'"),
		scalar(@bad) . ' ' . scalar(@bad) . " $want_dead",
		"$name: a dead letter for each malformed record, unique by (topic, partition, offset)");
}
is(psql("SELECT count(*) FROM pg_prepared_xacts"), '0', 'no prepared transaction is left behind');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 't121%'");
kafka('delete-topic', $topic);
done_testing();
