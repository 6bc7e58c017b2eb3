# A job whose prefetch is bounded to a kilobyte still reads its input
# promptly and exactly once.  The source's options make each fetch bring
# one small batch per partition and leave the consumer queue full after
# it.  librdkafka 2.0 stops fetching while its queue is full and looks
# again only when its broker thread wakes, up to a second later: without
# the source's wake (connectors/kafka_refill.c), the 200 batches below take
# minutes to read, and wait_job gives up after 60 seconds.  With it, or
# with librdkafka 2.2's fetch.queue.backoff.ms, they take seconds.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
my $topic = unique_name('t047');
my $per_partition = 10000;
kafka('create-topic', $topic, 2);
# Batches of 100 messages: a fetch of at most 1 KB per partition brings one.
for my $p (0, 1)
{
	kcat_produce_raw($topic, join('', map { qq(k$_\t{"v": "p$p-$_"}\n) } 1 .. $per_partition),
		partition => $p, args => [ '-X', 'batch.num.messages=100' ]);
}
psql("DROP TABLE IF EXISTS out_047; CREATE TABLE out_047 (k text, v text)");
my $job = 'prefetch_047';
psql("SELECT mailer.create_job('$job', \$\$" . qq({"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic",
	  "start": "earliest",
	  "options": {"queued.max.messages.kbytes": "1", "fetch.message.max.bytes": "1024"}},
	  "steps": [{"map": {"k": "key", "v": "value->>'v'"}}],
	  "sink": {"type": "table", "table": "out_047", "mode": "append"}}) . "\$\$)");

my $waited = eval { psql("SELECT mailer.wait_job('$job', '60 seconds')") };
is($waited, 'running', 'the job commits all 20,000 records within a minute')
  or diag($@ // '', explain(job_metrics($job)));
is(psql("SELECT count(*) FROM out_047"), 2 * $per_partition, 'every record reached the table');
is(psql("SELECT count(DISTINCT v) FROM out_047"), 2 * $per_partition, 'none twice');
is(job_metrics($job)->{records_in}, 2 * $per_partition, 'the job counted each record once');
psql("SELECT mailer.drop_job('$job')");
kafka('delete-topic', $topic);
done_testing();
