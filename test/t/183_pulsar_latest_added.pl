# A Pulsar job started "latest" reads a partition added later from its
# beginning, even in a subtask that owned no partition when the job
# started (parallelism 2 over a 1-partition topic): the review's finding 8,
# where subtask 1 resolved the new partition to its lastMessageId and the
# messages written before its next metadata refresh were lost.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();
my $url = pulsar_url();

fresh_extension();
my $topic = 'public/default/' . unique_name('t183');
pulsar('create-topic', $topic, 1);
pulsar_produce_lines("$topic-partition-0", qq({"k":"old"}\n));
psql('DROP TABLE IF EXISTS added_183');
psql('CREATE TABLE added_183 (k text PRIMARY KEY, n bigint)');
psql(qq{SELECT mailer.create_job('added_183', \$\${
  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$topic", "start": "latest"},
  "steps": [{"key_by": {"k": "value->>'k'"}}, {"aggregate": {"n": "count(*)"}}],
  "sink": {"type": "table", "table": "added_183"}, "state": {"backend": "rocksdb"}, "parallelism": 2,
  "checkpoint": {"interval": "300 milliseconds"}
}\$\$)});
wait_job_running('added_183');
# Both subtasks have read the metadata and the positions are committed.
wait_until('added_183 to pin its positions', sub { job_epoch('added_183') > 0 }, 60);

# Partition 1 is added, written to at once (before subtask 1's next
# metadata refresh, 5 s apart), and partition 0 after it.
pulsar('add-partitions', $topic, 2);
pulsar_produce_lines("$topic-partition-1", join('', map { qq({"k":"p1"}\n) } 1 .. 50));
pulsar_produce_lines("$topic-partition-0", join('', map { qq({"k":"p0"}\n) } 1 .. 50));
# wait_job refreshes the metadata first: both partitions count.
wait_until('added_183 to read partition 0', sub {
	psql("SELECT count(*) FROM added_183 WHERE k = 'p0' AND n = 50") == 1;
}, 60);
is(psql("SELECT mailer.wait_job('added_183', '1 minute')"), 'running', 'wait_job');
is(psql("SELECT string_agg(k || '=' || n, ',' ORDER BY k) FROM added_183"), 'p0=50,p1=50',
	'start latest: the old message skipped, every message of the added partition read');
is(psql("SELECT last_error IS NULL FROM mailer.jobs WHERE name = 'added_183'"), 't', 'no error');
psql("SELECT mailer.drop_job('added_183')");
done_testing();
