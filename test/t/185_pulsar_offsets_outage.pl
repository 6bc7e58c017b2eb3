# A Pulsar job's offsets (the partition's message ordinals) survive a run
# that never reached the broker: a start and stop while the broker is away
# checkpoints the partitions' counts it restored, so the messages read after
# get the next offsets. The review's finding 10: that checkpoint held no
# count, offsets started again at 0 and an upsert keyed by offset
# overwrote earlier rows. The broker is taken away by killing a TCP proxy
# the job's service_url names (test/lib/tcp_proxy.py).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();
my ($target) = pulsar_url() =~ m{:(\d+)$};
my $port = test_port(24000);
my $proxy = fake_server_start($port, 'tcp_proxy.py', $port, '127.0.0.1', $target);

fresh_extension();
my $topic = 'public/default/' . unique_name('t185');
pulsar('create-topic', $topic, 2);
pulsar_produce_lines("$topic-partition-0", join('', map { qq({"i":$_}\n) } 1 .. 5));
psql('DROP TABLE IF EXISTS offsets_185');
psql('CREATE TABLE offsets_185 (partition int, "offset" bigint, i int, PRIMARY KEY (partition, "offset"))');
psql(qq{SELECT mailer.create_job('offsets_185', \$\${
  "source": {"type": "pulsar", "service_url": "http://127.0.0.1:$port", "topic": "persistent://$topic"},
  "steps": [{"map": {"i": "(value->>'i')::int"}}],
  "sink": {"type": "table", "table": "offsets_185"}, "state": {"backend": "memory"},
  "checkpoint": {"interval": "300 milliseconds"}
}\$\$)});
wait_job_running('offsets_185');
is(psql("SELECT mailer.wait_job('offsets_185', '1 minute')"), 'running', 'the first 5 read');
is(psql("SELECT mailer.stop_job('offsets_185')"), 'stopped', 'stopped');

# A run while the broker is away, stopped: its final checkpoint.
fake_server_stop($proxy);
my $epoch = job_epoch('offsets_185');
psql("SELECT mailer.start_job('offsets_185')");
wait_for_sql('the job to wait for the broker',
	"SELECT state FROM mailer.jobs WHERE name = 'offsets_185'", 'waiting', 60);
is(psql("SELECT mailer.stop_job('offsets_185')"), 'stopped', 'stopped while the broker is away');
cmp_ok(job_epoch('offsets_185'), '>', $epoch, 'that stop took a checkpoint');
like(psql("SELECT partition_records_in::text FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) "
	  . "WHERE j.name = 'offsets_185' ORDER BY epoch DESC LIMIT 1"), qr/"0": 5\b/,
	'its records_in still counts the 5 messages of partition 0');

$proxy = fake_server_start($port, 'tcp_proxy.py', $port, '127.0.0.1', $target);
pulsar_produce_lines("$topic-partition-0", join('', map { qq({"i":$_}\n) } 6 .. 8));
psql("SELECT mailer.start_job('offsets_185')");
wait_job_running('offsets_185');
is(psql("SELECT mailer.wait_job('offsets_185', '1 minute')"), 'running', 'the next 3 read');
is(psql(q{SELECT string_agg("offset" || ':' || i, ',' ORDER BY "offset") FROM offsets_185}),
	'0:1,1:2,2:3,3:4,4:5,5:6,6:7,7:8', 'offsets 0..7, none reused');
is(psql("SELECT sum(records_in) FROM mailer.partition_metrics WHERE name = 'offsets_185'"), 8,
	'partition_metrics: records_in 8');
psql("SELECT mailer.drop_job('offsets_185')");
fake_server_stop($proxy);
done_testing();
