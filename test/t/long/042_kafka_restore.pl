# mailer.restore_job rewinds a stopped job to a retained checkpoint (state
# and Kafka positions); started again, it replays from there and its table
# is again exactly the GROUP BY over every event.  Both state backends.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $BURST = 10_000;	# restores and replays need checkpoints, not volume
my $CUSTOMERS = 2_000;
my $SMALL = 1_000;		# the bursts of the short retention part
my $NSMALL = 12;

my $topic = orders_topic('042', 8, 4 * $BURST + $NSMALL * $SMALL, $CUSTOMERS);
my $ALL4 = "order_id <= " . 4 * $BURST;
my %job = %{ backend_jobs($topic, 'totals_042', interval => '200 milliseconds', retain => 1000) };

sub wait_all
{
	is(psql("SELECT mailer.wait_job('$job{$_}', '5 minutes')"), 'running', "$_: wait_job") for @BACKENDS;
}

sub records_in_at
{
	my ($j, $epoch) = @_;
	return psql("SELECT (counters->>'records_in')::bigint FROM mailer.checkpoints c "
		  . "JOIN mailer.job j USING (job_id) WHERE j.name = '$j' AND c.epoch = $epoch");
}

# Burst 1: the epoch that covers exactly it is the one to return to.
orders_produce('orders_042', $topic, 1, $BURST);
wait_all();
my %e1;
for my $b (@BACKENDS)
{
	totals_check('orders_042', $job{$b}, "$b after burst 1", "order_id <= $BURST");
	$e1{$b} = job_epoch($job{$b});
	is(records_in_at($job{$b}, $e1{$b}), $BURST, "$b: epoch $e1{$b} covers burst 1");
}

# Bursts 2 and 3.
for my $burst (2, 3)
{
	orders_produce('orders_042', $topic, ($burst - 1) * $BURST + 1, $burst * $BURST);
	wait_all();
}
totals_check('orders_042', $job{$_}, "$_ after burst 3", "order_id <= " . 3 * $BURST) for @BACKENDS;

for my $b (@BACKENDS)
{
	my $j = $job{$b};
	like(psql_fails("SELECT mailer.restore_job('$j', $e1{$b})"), qr/must be stopped to be restored/,
		"$b: a running job cannot be restored");
	is(psql("SELECT mailer.stop_job('$j')"), 'stopped', "$b: stopped");
	like(psql_fails("SELECT mailer.restore_job('$j', 999999)"),
		qr/has no retained checkpoint 999999.*Retained epochs: 1, 2, /s,
		"$b: restoring an epoch that is not retained fails and lists the retained ones");
	is(psql("SELECT mailer.restore_job('$j', $e1{$b})"), $e1{$b}, "$b: restored to epoch $e1{$b}");
	is(job_epoch($j), $e1{$b}, "$b: the newer checkpoints are gone");
	is(job_metric($j, 'records_in'), $BURST, "$b: metrics show the counters of epoch $e1{$b}");
}

# Burst 4 arrives while the jobs are stopped; started, they replay bursts
# 2 and 3 from the restored state, then read burst 4.
orders_produce('orders_042', $topic, 3 * $BURST + 1, 4 * $BURST);
psql("SELECT mailer.start_job('$job{$_}')") for @BACKENDS;
wait_all();
for my $b (@BACKENDS)
{
	totals_check('orders_042', $job{$b}, "$b after restore to epoch $e1{$b} and replay", $ALL4);
	is(job_metric($job{$b}, 'records_in'), 4 * $BURST, "$b: records_in counts every event once");
	cmp_ok(job_epoch($job{$b}), '>', $e1{$b}, "$b: new checkpoints follow the restored epoch");
}

# Once more, to the oldest retained epoch.  The table keeps the rows that
# were written after it; the replay rewrites them with the same values.
for my $b (@BACKENDS)
{
	my $j = $job{$b};
	psql("SELECT mailer.stop_job('$j')");
	my $oldest = psql("SELECT min(epoch) FROM mailer.checkpoints JOIN mailer.job USING (job_id) WHERE name = '$j'");
	is(psql("SELECT mailer.restore_job('$j', $oldest)"), $oldest, "$b: restored to the oldest epoch, $oldest");
	psql("SELECT mailer.start_job('$j')");
}
wait_all();
for my $b (@BACKENDS)
{
	totals_check('orders_042', $job{$b}, "$b after restore to the oldest epoch", $ALL4);
	is(job_metric($job{$b}, 'records_in'), 4 * $BURST, "$b: records_in counts every event once");
	is(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) WHERE j.name = '$job{$b}'"),
		0, "$b: no dead letters");
}

psql("SELECT mailer.drop_job('$job{$_}')") for @BACKENDS;

# Short retention: with checkpoint.retain 5, older checkpoints (RocksDB
# directories, memory state versions) are dropped as the jobs go on; the
# oldest one still retained restores exactly.
my %short = %{ backend_jobs($topic, 'totals_042_r5', retain => 5) };
%job = %short;
wait_all();
for my $i (1 .. $NSMALL)
{
	my $from = 4 * $BURST + ($i - 1) * $SMALL + 1;
	orders_produce('orders_042', $topic, $from, $from + $SMALL - 1);
	wait_all();
}
for my $b (@BACKENDS)
{
	my $j = $short{$b};
	cmp_ok(job_epoch($j), '>=', $NSMALL + 1, "$b, retain 5: one checkpoint or more per burst");
	is(psql("SELECT count(*) FROM mailer.checkpoints JOIN mailer.job USING (job_id) WHERE name = '$j'"),
		5, "$b, retain 5: 5 checkpoints retained");
	psql("SELECT mailer.stop_job('$j')");
	my $oldest = psql("SELECT min(epoch) FROM mailer.checkpoints JOIN mailer.job USING (job_id) WHERE name = '$j'");
	is(psql("SELECT mailer.restore_job('$j', $oldest)"), $oldest, "$b, retain 5: restored to the oldest retained epoch, $oldest");
	psql("SELECT mailer.start_job('$j')");
}
wait_all();
for my $b (@BACKENDS)
{
	totals_check('orders_042', $short{$b}, "$b, retain 5, after restore to the oldest retained epoch");
	is(job_metric($short{$b}, 'records_in'), 4 * $BURST + $NSMALL * $SMALL, "$b, retain 5: records_in counts every event once");
}
psql("SELECT mailer.drop_job('$short{$_}')") for @BACKENDS;
kafka('delete-topic', $topic);
done_testing();
