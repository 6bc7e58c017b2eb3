# wait_job on a Pulsar job reading entries a Java producer batched (100
# messages an entry): it returns only once the last message of the last
# entry is handed out, though a poll (mailer.batch_size 7) stops mid-entry.
# The review's finding 1: the mark was the entry alone, so wait_job
# returned with 928 of 1000 rows.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();
my $url = pulsar_url();

fresh_extension();
my $topic = 'public/default/' . unique_name('t184');
pulsar('create-topic', $topic, 0);
psql('ALTER SYSTEM SET mailer.batch_size = 7');
psql('SELECT pg_reload_conf()');
psql('DROP TABLE IF EXISTS batched_184');
psql('CREATE TABLE batched_184 (i int)');
psql(qq{SELECT mailer.create_job('batched_184', \$\${
  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$topic"},
  "steps": [{"map": {"i": "(value->>'i')::int + 0 * length(pg_sleep(0.003)::text)"}}],
  "sink": {"type": "table", "table": "batched_184", "mode": "append"},
  "state": {"backend": "memory"}, "checkpoint": {"interval": "100 milliseconds"}
}\$\$)});
wait_job_running('batched_184');
pulsar_java('BatchProduce', "persistent://$topic", 1, 1000, 100);
like(pulsar('admin', 'GET', "/admin/v2/persistent/$topic/lastMessageId"), qr/"batchIndex":99\b/,
	'the last entry is a batch of 100');
is(psql("SELECT mailer.wait_job('batched_184', '2 minutes')"), 'running', 'wait_job returns');
is(psql('SELECT count(*), count(DISTINCT i), max(i) FROM batched_184'), '1000|1000|1000',
	'every message of every batch is in the table when wait_job returns');

# A start at "latest" resolved inside a batch: what comes after it only.
psql("SELECT mailer.drop_job('batched_184')");
psql('TRUNCATE batched_184');
psql(qq{SELECT mailer.create_job('latest_184', \$\${
  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$topic", "start": "latest"},
  "steps": [{"map": {"i": "(value->>'i')::int"}}],
  "sink": {"type": "table", "table": "batched_184", "mode": "append"},
  "state": {"backend": "memory"}
}\$\$)});
wait_job_running('latest_184');
pulsar_java('BatchProduce', "persistent://$topic", 1001, 50, 10);
is(psql("SELECT mailer.wait_job('latest_184', '2 minutes')"), 'running', 'latest: wait_job returns');
is(psql('SELECT count(*), min(i), max(i) FROM batched_184'), '50|1001|1050', 'latest: the new batches only');
psql("SELECT mailer.drop_job('latest_184')");
psql('ALTER SYSTEM RESET mailer.batch_size');
psql('SELECT pg_reload_conf()');
done_testing();
