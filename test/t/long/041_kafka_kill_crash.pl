# Exactly once through crashes: while two keyed totals jobs (RocksDB and
# memory state) consume 300,000 order events, produced in 20 bursts of
# 15,000, their workers are killed with SIGKILL 18 times (9 per backend;
# each kill makes the server restart every backend, so both jobs die each
# time) and the server is stopped with pg_ctl -m immediate and started
# twice.  Afterwards both tables equal the GROUP BY over the events.
#
# Every disruption waits for progress first.  Half of them hit the jobs
# while they consume (right after a new checkpoint epoch); the other half
# hold a lock on the sink tables so that each job's checkpoint is blocked
# before its COMMIT, with state written and rows pending, and strike then.
#
# On a server of its own (MailerCluster): every kill restarts all of it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerCluster;
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $BURSTS = 20;
my $BURST = 15_000;
my $N = $BURSTS * $BURST;
my $CUSTOMERS = 5_000;
my %CRASH_ROUND = (7 => 1, 14 => 1);

# Entries are read back from the backend after every checkpoint: restores
# and replays go through the state backend, not a warm cache.
mailer_node('node', "mailer.state_cache_entries = 0\n");
my $topic = orders_topic('041', 8, $N, $CUSTOMERS);
my %job = %{ backend_jobs($topic, 'totals_041', interval => '200 milliseconds') };
wait_job_running($job{$_}) for @BACKENDS;

my %kills = map { $_ => 0 } @BACKENDS;
my $crashes = 0;
my %mode_count;
for my $round (1 .. $BURSTS)
{
	my $target = $BACKENDS[ $round % 2 ];
	my $locked_mode = int(($round - 1) / 2) % 2 == 1;
	my %before = map { $_ => job_epoch($job{$_}) } @BACKENDS;
	my $lock;

	$lock = lock_tables(map { $job{$_} } @BACKENDS) if $locked_mode;
	orders_produce('orders_041', $topic, ($round - 1) * $BURST + 1, $round * $BURST);
	if ($locked_mode)
	{
		# Both jobs read part of the burst and block in their checkpoint.
		wait_until('both job workers to block in their checkpoint', sub {
			psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer job' "
				  . "AND wait_event_type = 'Lock'") == 2;
		});
	}
	else
	{
		wait_epoch_after($job{$target}, $before{$target});
	}

	# Where the jobs are when they die: records read (live) of those produced.
	note(sprintf('round %d (%s): %s', $round, $locked_mode ? 'blocked checkpoint' : 'consuming',
		join(', ', map { "$_ read " . job_metric($job{$_}, 'records_in') . ' of ' . $round * $BURST
			  . ' at epoch ' . job_epoch($job{$_}) } @BACKENDS)));
	if ($CRASH_ROUND{$round})
	{
		pg_service('crash');
		pg_service('start');
		$crashes++;
	}
	else
	{
		my $pid = job_worker_pid($job{$target});
		die "no worker for $job{$target}\n" unless $pid;
		kill 'KILL', $pid or die "could not kill $pid: $!\n";
		$kills{$target}++;
	}
	$mode_count{ $locked_mode ? 'in a blocked checkpoint' : 'while consuming' }++;
	unlock_tables($lock) if $lock;

	# The server goes through crash recovery; the launcher restarts both jobs.
	wait_server_up();
	wait_job_running($job{$_}) for @BACKENDS;
	if ($round == 1)
	{
		like(psql("SELECT last_error FROM mailer.jobs WHERE name = '$job{$target}'"),
			qr/stopped abruptly/, 'after a kill, last_error says the job stopped abruptly');
	}
}

note("disruptions: " . join(', ', map { "$mode_count{$_} $_" } sort keys %mode_count));
for my $backend (@BACKENDS)
{
	cmp_ok($kills{$backend}, '>=', 8, "$backend: its worker was killed with SIGKILL at least 8 times");
}
cmp_ok($crashes, '>=', 2, 'the server was stopped with -m immediate at least twice');

for my $backend (@BACKENDS)
{
	my $j = $job{$backend};
	is(psql("SELECT mailer.wait_job('$j', '5 minutes')"), 'running', "$backend: wait_job returns");
	totals_check('orders_041', $j, "$backend after $kills{$backend} kills of its worker, "
		  . ($BURSTS - $crashes) . " server restarts and $crashes crashes");
	is(job_metric($j, 'records_in'), $N, "$backend: records_in counts every event once");
	is(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) WHERE j.name = '$j'"),
		0, "$backend: no dead letters");
	cmp_ok(psql("SELECT restarts FROM mailer.jobs WHERE name = '$j'"), '>=', $BURSTS,
		"$backend: mailer.jobs counts a restart for each of the $BURSTS disruptions");
}

psql("SELECT mailer.drop_job('$job{$_}')") for @BACKENDS;
kafka('delete-topic', $topic);
done_testing();
