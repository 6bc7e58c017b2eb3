# Partitions added to a topic while a job runs are picked up and read from
# their beginning: a job on a 4-partition topic grows to 6 partitions;
# events produced straight into the new ones are counted, exactly once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $CUSTOMERS = 2_000;

my $topic = orders_topic('046', 4, 50_000, $CUSTOMERS);
my %job = %{ backend_jobs($topic, 'partitions_046') };

sub check_all
{
	my ($what, $upto) = @_;
	check_backends('orders_046', \%job, $what, "order_id <= $upto", $upto);
}

orders_produce('orders_046', $topic, 1, 20_000);
check_all('4 partitions', 20_000);
is(psql("SELECT count(*) FROM mailer.partition_metrics WHERE name = '$job{$_}'"), 4, "$_: 4 partitions")
  for @BACKENDS;

like(kafka('add-partitions', $topic, 6), qr/has 6 partitions/, 'the topic grows to 6 partitions');
# Straight into the new partitions, while the jobs run.
orders_produce('orders_046', $topic, 20_001, 30_000, partition => 4);
orders_produce('orders_046', $topic, 30_001, 40_000, partition => 5);
check_all('events in the 2 new partitions', 40_000);
for my $b (@BACKENDS)
{
	is(psql("SELECT string_agg(partition || ':' || position, ',' ORDER BY partition) "
			  . "FROM mailer.partition_metrics WHERE name = '$job{$b}' AND partition >= 4"),
		'4:10000,5:10000', "$b: partition_metrics shows the new partitions read to their end");
}

# Keyed again, over all 6.
orders_produce('orders_046', $topic, 40_001, 50_000);
check_all('6 partitions', 50_000);

# A restart resumes the new partitions from the checkpoint, not from their beginning.
for my $b (@BACKENDS)
{
	psql("SELECT mailer.stop_job('$job{$b}')");
	psql("SELECT mailer.start_job('$job{$b}')");
}
check_all('after a restart', 50_000);

psql("SELECT mailer.drop_job('$job{$_}')") for @BACKENDS;
kafka('delete-topic', $topic);
done_testing();
