# What a user watches of a running Kafka job: mailer.metrics (records in
# and out, consumer lag, last checkpoint), mailer.partition_metrics (one
# row per partition with position, end offset and lag), and the offsets
# committed to the job's consumer group for lag tools (kafka-consumer-groups).
#
# A filter calling a user-defined function that sleeps 1 ms per record, and
# batches of 100 records, make the job slow enough to be seen behind.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $N = 3_000;
my $CUSTOMERS = 500;

fresh_extension();
set_cluster_setting('mailer.batch_size', 100);
END { eval { set_cluster_setting('mailer.batch_size', undef) } }

my $topic = unique_name('t045');
kafka('create-topic', $topic, 8);
orders_source('orders_045');
orders_insert('orders_045', 1, $N, $CUSTOMERS);
psql("CREATE OR REPLACE FUNCTION slow_045() RETURNS boolean LANGUAGE plpgsql VOLATILE "
	  . "AS \$\$BEGIN PERFORM pg_sleep(0.001); RETURN true; END\$\$");

my $job = 'metrics_045';
totals_sink($job);
psql("SELECT mailer.create_job('$job', \$\$"
	  . totals_spec($topic, $job, extra_steps => '{"filter": "slow_045()"}') . "\$\$)");
wait_job_running($job);
is(job_metric($job, 'records_in'), 0, 'records_in is 0 before any event');

orders_produce('orders_045', $topic, 1, $N);

# Caught in the middle: some records in, the rest still on the broker.
my $mid = wait_until('the job to be part way through the events', sub {
	my $r = psql("SELECT state, records_in, consumer_lag, input_rate FROM mailer.metrics WHERE name = '$job'");
	my ($state, $in, $lag, $rate) = split /\|/, $r;
	# consumer_lag is null until every partition's end is known: wait for it.
	return $in > 0 && $in < $N && $lag ne '' ? [ $state, $in, $lag, $rate ] : undef;
}, 60);
my ($state, $in, $lag, $rate) = @$mid;
note("part way: records_in $in, consumer_lag $lag, input_rate $rate");
is($state, 'running', 'part way: state running');
cmp_ok($lag, '>', 0, 'part way: consumer_lag > 0');
cmp_ok($lag, '<=', $N - $in, 'part way: consumer_lag at most the events not yet read');
my $plag = psql("SELECT count(*), sum(lag) FROM mailer.partition_metrics WHERE name = '$job'");
my ($nparts, $sumlag) = split /\|/, $plag;
is($nparts, 8, 'part way: partition_metrics shows the 8 partitions');
cmp_ok($sumlag, '>', 0, 'part way: some partitions lag');

is(psql("SELECT mailer.wait_job('$job', '5 minutes')"), 'running', 'wait_job returns');
totals_check('orders_045', $job, 'metrics job');

my %m;
@m{qw(state records_in records_accepted records_out consumer_lag epoch at ms watermark state_bytes
	  state_ms restore_ms)} =
  split /\|/, psql("SELECT state, records_in, records_accepted, records_out, consumer_lag, "
	  . "last_checkpoint_epoch, last_checkpoint_at > now() - interval '1 minute', last_checkpoint_ms, "
	  . "watermark IS NOT NULL, state_bytes, "
	  . "state_checkpoint_ms BETWEEN 0 AND last_checkpoint_ms + 1, state_restore_ms >= 0 "
	  . "FROM mailer.metrics WHERE name = '$job'");
is($m{state}, 'running', 'metrics: running');
is($m{records_in}, $N, "metrics: records_in $N");
is($m{records_accepted}, $N, "metrics: records_accepted $N");
cmp_ok($m{records_out}, '>=', $CUSTOMERS, 'metrics: records_out counts at least a row per customer');
cmp_ok($m{records_out}, '<=', $N, 'metrics: records_out at most a row per record');
is($m{consumer_lag}, 0, 'metrics: consumer_lag 0 once caught up');
cmp_ok($m{epoch}, '>=', 1, 'metrics: last_checkpoint_epoch');
is($m{epoch}, job_epoch($job), 'metrics: last_checkpoint_epoch is the newest in mailer.checkpoints');
is($m{at}, 't', 'metrics: last_checkpoint_at is recent');
cmp_ok($m{ms}, '>=', 0, 'metrics: last_checkpoint_ms');
is($m{watermark}, 't', 'metrics: watermark');
cmp_ok($m{state_bytes}, '>', 0, 'metrics: state_bytes');
is($m{state_ms}, 't', 'metrics: state_checkpoint_ms is a part of last_checkpoint_ms');
is($m{restore_ms}, 't', 'metrics: state_restore_ms');

is(psql("SELECT string_agg(partition::text, ',' ORDER BY partition) FROM mailer.partition_metrics "
		  . "WHERE name = '$job' AND topic = '$topic'"), '0,1,2,3,4,5,6,7',
	'partition_metrics: partitions 0 to 7 of the topic');
is(psql("SELECT sum(position), sum(records_in), bool_and(position = end_offset), max(lag) "
		  . "FROM mailer.partition_metrics WHERE name = '$job'"), "$N|$N|t|0",
	'partition_metrics: positions at the end offsets, every record counted, no lag');

# The consumer group (the job's name) has the offsets of the last checkpoint.
my %end = map { split /\|/ } split /\n/,
  psql("SELECT partition, end_offset FROM mailer.partition_metrics WHERE name = '$job'");
my $group;
wait_until('the consumer group to show the committed offsets', sub {
	$group = kafka('describe-group', $job);
	my %got;
	for (split /\n/, $group)
	{
		my @f = split ' ';
		$got{ $f[2] } = [ $f[3], $f[4], $f[5] ] if @f >= 6 && $f[0] eq $job && $f[1] eq $topic;
	}
	return 0 unless keys %got == 8;
	return !grep { $got{$_}[0] ne $end{$_} || $got{$_}[1] ne $end{$_} || $got{$_}[2] ne '0' } keys %end;
}, 60);
pass('describe-group: the 8 partitions have committed offsets at the log end, lag 0');
note($group);

psql("SELECT mailer.drop_job('$job')");
kafka('delete-topic', $topic);
done_testing();
