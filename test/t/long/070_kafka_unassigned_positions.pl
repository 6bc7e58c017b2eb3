# Positions survive checkpoints taken while their partitions are not
# assigned: a worker that starts while the broker is away assigns nothing,
# and its checkpoints (a stop's final one here) still hold every position
# of the last one, so the next start goes on where the job was instead of
# reading the topic again.  The same for "start": "latest": a job whose
# first start never reached the broker still starts at the latest offsets
# once it does, not at the earliest.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $topic = orders_topic('070', 4, 6_000, 500);
my $ltopic = unique_name('t070l');
kafka('create-topic', $ltopic, 2);

my $job = 'kept_070';
my $latest = 'latest_070';
totals_sink($job);
totals_sink($latest);
psql("SELECT mailer.create_job('$job', \$\$" . totals_spec($topic, $job, backend => 'memory') . "\$\$)");
orders_produce('orders_070', $topic, 1, 4_000);
is(wait_job($job, '2 minutes'), 'running', 'the job read the first 4,000 orders');
totals_check('orders_070', $job, 'before the outage', 'order_id <= 4000');

# Orders the latest job must never read: they are in its topic before it starts.
orders_produce('orders_070', $ltopic, 1, 1_000);

sub last_positions
{
	my ($name, $t) = @_;
	return psql("SELECT coalesce((SELECT string_agg(k, ',' ORDER BY k) FROM jsonb_object_keys(c.positions->'$t') k), 'none') "
		  . "FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) WHERE j.name = '$name' ORDER BY c.epoch DESC LIMIT 1");
}

sub wait_waiting
{
	my ($name) = @_;
	wait_until("$name to wait for Kafka", sub {
		psql("SELECT state = 'waiting' AND pid IS NOT NULL FROM mailer.jobs WHERE name = '$name'") eq 't';
	}, 60);
}

kafka('stop');
# The job's worker starts again while the broker is away, then stops: its
# final checkpoint is taken with no partition assigned.
is(psql("SELECT mailer.stop_job('$job')"), 'stopped', 'stopped while the broker is away');
psql("SELECT mailer.start_job('$job')");
wait_waiting($job);
is(psql("SELECT mailer.stop_job('$job')"), 'stopped', 'stopped again, its partitions never assigned');
is(last_positions($job, $topic), '0,1,2,3', 'the checkpoint taken without an assignment keeps the 4 positions');

# The latest job is created and started while the broker is away.
psql("SELECT mailer.create_job('$latest', \$\$" . totals_spec($ltopic, $latest, backend => 'memory', start => 'latest') . "\$\$)");
wait_waiting($latest);
is(psql("SELECT mailer.stop_job('$latest')"), 'stopped', 'latest job stopped before it ever reached the broker');
is(last_positions($latest, $ltopic), 'none', 'its checkpoint holds no position for a topic never positioned');

kafka('start');
orders_produce('orders_070', $topic, 4_001, 5_000);
psql("SELECT mailer.start_job('$_')") for ($job, $latest);
is(wait_job($job, '2 minutes'), 'running', 'the job caught up after the broker came back');
totals_check('orders_070', $job, 'after the outage: every order once, none twice', 'order_id <= 5000');
is(job_metric($job, 'records_in'), 5_000, 'records_in 5,000, not 9,000');

# Positioned now (wait_job has seen its end offsets): only what comes next counts.
is(wait_job($latest, '2 minutes'), 'running', 'the latest job reached the broker');
orders_produce('orders_070', $ltopic, 1_001, 1_500);
is(wait_job($latest, '2 minutes'), 'running', 'the latest job read the new orders');
totals_check('orders_070', $latest, 'latest: only the orders produced after it reached the broker',
	'order_id BETWEEN 1001 AND 1500');
is(job_metric($latest, 'records_in'), 500, 'latest: records_in 500');

psql("SELECT mailer.drop_job('$_')") for ($job, $latest);
kafka('delete-topic', $_) for ($topic, $ltopic);
done_testing();
