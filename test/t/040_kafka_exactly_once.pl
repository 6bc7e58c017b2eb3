# Kafka to a table, exactly once: 300,000 order events over an 8-partition
# topic and 5,000 customers; the keyed totals job (orders = count(*),
# total = sum(amount) per customer) writes exactly the GROUP BY over the
# same events, with either state backend.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $N = 300_000;
my $CUSTOMERS = 5_000;

fresh_extension();
my $topic = unique_name('t040');
kafka('create-topic', $topic, 8);

orders_source('orders_040');
orders_insert('orders_040', 1, $N, $CUSTOMERS);
orders_produce('orders_040', $topic, 1, $N);

for my $backend (qw(rocksdb memory))
{
	my $job = "totals_040_$backend";
	totals_sink($job);
	psql("SELECT mailer.create_job('$job', \$\$" . totals_spec($topic, $job, backend => $backend) . "\$\$)");
}

for my $backend (qw(rocksdb memory))
{
	my $job = "totals_040_$backend";
	is(psql("SELECT mailer.wait_job('$job', '5 minutes')"), 'running',
		"$backend: wait_job returns with the job running");
	totals_check('orders_040', $job, $backend);
	is(job_metric($job, 'records_in'), $N, "$backend: records_in counts every event once");
	is(psql("SELECT sum(records_in) FROM mailer.partition_metrics WHERE name = '$job'"), $N,
		"$backend: the 8 partitions' records_in add up to the events");
	is(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) WHERE j.name = '$job'"),
		0, "$backend: no dead letters");
	is(psql("SELECT count(*) FROM $job WHERE orders <> $N / $CUSTOMERS"), 0,
		"$backend: every customer has its $N / $CUSTOMERS orders");
}

# The state the backends checkpointed is what a restart resumes from: stop
# both, start them again, produce nothing: the tables stay equal.
for my $backend (qw(rocksdb memory))
{
	my $job = "totals_040_$backend";
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$backend: stopped");
	psql("SELECT mailer.start_job('$job')");
	is(psql("SELECT mailer.wait_job('$job', '5 minutes')"), 'running', "$backend: running again");
	totals_check('orders_040', $job, "$backend after a restart");
	is(job_metric($job, 'records_in'), $N, "$backend: records_in unchanged by the restart");
}

for my $backend (qw(rocksdb memory))
{
	psql("SELECT mailer.drop_job('totals_040_$backend')");
}
kafka('delete-topic', $topic);
done_testing();
