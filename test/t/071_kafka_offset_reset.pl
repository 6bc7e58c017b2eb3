# A position outside the partition's log is never passed over in silence.
# Retention (here Kafka's deleteRecords) deleted records the job had not
# read: the gap is counted in mailer.partition_metrics.offsets_skipped,
# last_error names the partition and the offsets, and the job goes on from
# the earliest offset there is.  A topic deleted and created again with
# fewer records (offsets that move backwards) fails the job, not retried,
# with an error that says how to go on; dropping and creating the job
# again reads the new topic.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

fresh_extension();
my $topic = unique_name('t071');
kafka('create-topic', $topic, 1);
orders_source('orders_071');
orders_insert('orders_071', 1, 2_000, 300);

my $job = 'reset_071';
my $spec = totals_spec($topic, $job, backend => 'memory');
totals_sink($job);
psql("SELECT mailer.create_job('$job', \$\$$spec\$\$)");
orders_produce('orders_071', $topic, 1, 1_000);
is(wait_job($job, '2 minutes'), 'running', 'the job read orders 1 to 1,000 (offsets 0 to 999)');
is(psql("SELECT mailer.stop_job('$job')"), 'stopped', 'stopped at offset 1,000');

# Orders 1,001 to 2,000 are offsets 1,000 to 1,999; those before 1,500 go unread.
orders_produce('orders_071', $topic, 1_001, 2_000);
kafka('delete-records', $topic, 0, 1_500);
psql("SELECT mailer.start_job('$job')");
is(wait_job($job, '2 minutes'), 'running', 'the job went on past the gap');
totals_check('orders_071', $job, 'the orders before the gap and after it, once each',
	'order_id <= 1000 OR order_id > 1500');
is(job_metric($job, 'records_in'), 1_500, 'records_in 1,500');
is(psql("SELECT offsets_skipped FROM mailer.partition_metrics WHERE name = '$job' AND partition = 0"),
	500, 'partition_metrics: 500 offsets skipped');
like(psql("SELECT last_error FROM mailer.jobs WHERE name = '$job'"),
	qr/partition 0 of Kafka topic "\Q$topic\E": offsets 1000 to 1499 were deleted before the job read them \(retention\); it goes on from offset 1500/,
	'last_error names the partition and the offsets skipped');
is(psql("SELECT state FROM mailer.jobs WHERE name = '$job'"), 'running', 'the job runs on');
is(psql("SELECT mailer.stop_job('$job')"), 'stopped', 'stopped at offset 2,000');

# The topic anew, with 300 records: its offsets end before the job's position.
kafka('delete-topic', $topic);
kafka('create-topic', $topic, 1);
orders_produce('orders_071', $topic, 1, 300);
psql("SELECT mailer.start_job('$job')");
my $info = wait_job_state($job, qr/^failed$/, 60);
like($info->{last_error}, qr/partition 0 of Kafka topic "\Q$topic\E" ends at offset 300, before the job's position 2000/,
	'last_error: the partition ends before the position');
like($info->{last_error}, qr/mailer\.restore_job.*drop the job and create it again/,
	'last_error says how to go on');
is($info->{restarts}, 0, 'failed, not retried');
totals_check('orders_071', $job, 'nothing of the new topic was counted', 'order_id <= 1000 OR order_id > 1500');

psql("SELECT mailer.drop_job('$job')");
totals_sink($job);
psql("SELECT mailer.create_job('$job', \$\$$spec\$\$)");
is(wait_job($job, '2 minutes'), 'running', 'created again, the job reads the new topic');
totals_check('orders_071', $job, 'the new topic, from its start', 'order_id <= 300');

psql("SELECT mailer.drop_job('$job')");
kafka('delete-topic', $topic);
done_testing();
