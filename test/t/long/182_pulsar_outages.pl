# The Pulsar source through what a production deployment meets: a broker
# restart mid-stream, partitions added to the topic while jobs read it, two
# immediate stops of PostgreSQL, and 8 SIGKILLs of workers, for a parallel job
# (2 subtasks, RocksDB) and a single one (memory state). Both tables must
# equal SQL's GROUP BY over exactly the orders produced, and every order
# counted once. Takes a minute or two (the broker restart alone 15 to 25 s),
# hence test/t/long.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();

my $N = 12000;
my $CUSTOMERS = 300;
my $url = pulsar_url();
my @jobs = qw(totals_182p totals_182m);

fresh_extension();
my $name = unique_name('t182o');
my $topic = "public/default/$name";
pulsar('create-topic', $topic, 4);

orders_source('orders_182o');
orders_insert('orders_182o', 1, $N, $CUSTOMERS);

# The pid of the job's subtask 0 (the earliest of its workers).
sub first_pid
{
	my ($job) = @_;
	my $pid = psql("SELECT min(pid) FILTER (WHERE backend_start = (SELECT min(backend_start) FROM pg_stat_activity "
		  . "WHERE application_name = 'mailer job $job')) FROM pg_stat_activity WHERE application_name = 'mailer job $job'");
	return $pid eq '' ? undef : $pid;
}

sub read_so_far
{
	my ($job) = @_;
	return job_metric($job, 'records_in') || 0;
}

for my $job (@jobs)
{
	my ($parallelism, $backend) = $job =~ /p$/ ? (2, 'rocksdb') : (1, 'memory');
	totals_sink($job);
	psql(qq{SELECT mailer.create_job('$job', \$\${
	  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$topic", "format": "json"},
	  "steps": [
	    {"key_by": {"customer_id": "value->>'customer_id'"}},
	    {"aggregate": {"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}}
	  ],
	  "sink": {"type": "table", "table": "$job"},
	  "state": {"backend": "$backend"},
	  "parallelism": $parallelism,
	  "checkpoint": {"interval": "1 second"}
	}\$\$)});
}

# 1. The first 3,000 orders; the broker restarts as soon as the jobs have
#    read some (their readers' sessions close and are opened again after
#    the last message each handed out).
orders_produce_finish(orders_produce_start('orders_182o', $topic, 1, 3000, 4));
wait_until('the jobs to read some of the first orders', sub { read_so_far($jobs[0]) > 0 }, 60);
pulsar('restart');
ok(1, 'the broker restarted under the reading jobs');

# 2. Two partitions more; 3,000 orders over the 6.
is(pulsar('add-partitions', $topic, 6), "topic $topic has 6 partitions\n", 'the topic grows to 6 partitions');
orders_produce_finish(orders_produce_start('orders_182o', $topic, 3001, 6000, 6));

# 3. 3,000 orders more, in two halves, each with an immediate stop of
#    PostgreSQL once the jobs read it.
for my $from (6001, 7501)
{
	my $running = orders_produce_start('orders_182o', $topic, $from, $from + 1499, 6);
	wait_until("the jobs to read past $from", sub { read_so_far($jobs[1]) >= $from }, 120);
	pg_service('crash');
	pg_service('start');
	wait_server_up();
	orders_produce_finish($running);
	ok(1, "PostgreSQL stopped immediately while orders from $from were read, and started again");
}

# 4. The last 3,000, in four quarters, with a SIGKILL of each job's worker
#    (subtask 0) once it reads each: 8 kills.
for my $from (9001, 9751, 10501, 11251)
{
	my $running = orders_produce_start('orders_182o', $topic, $from, $from + 749, 6);
	for my $job (@jobs)
	{
		wait_job_running($job);
		wait_until("$job to read past $from", sub { read_so_far($job) >= $from }, 120);
		my $pid = first_pid($job);
		ok(defined $pid && kill('KILL', $pid) == 1, "SIGKILL of $job\'s worker (orders from $from)");
		wait_until('the server to restart after the crash', sub {
			my $now = eval { first_pid($job) };
			return defined $now && $now != $pid;
		}, 120);
	}
	orders_produce_finish($running);
}

for my $job (@jobs)
{
	wait_job_running($job);
	is(psql("SELECT mailer.wait_job('$job', '3 minutes')"), 'running', "$job: wait_job returns, running");
	totals_check('orders_182o', $job, 'after a broker restart, 2 new partitions, 2 immediate stops and 8 SIGKILLs');
	is(job_metric($job, 'records_in'), $N, "$job: records_in counts every order once");
	is(psql("SELECT count(DISTINCT partition) FROM mailer.partition_metrics WHERE name = '$job'"), 6,
		"$job: reads the 6 partitions");
}
is(psql('SELECT count(*) FROM mailer.dead_letters'), 0, 'no dead letters');

psql("SELECT mailer.drop_job('$_')") for @jobs;
done_testing();
