# Topics and partitions that the broker no longer has.  One unreadable
# topic does not stop the others: with "topics": [legacy, orders] and
# legacy missing, orders is assigned and read, while the job shows that it
# waits for the broker and last_error names legacy.  A partition of the
# checkpoint that its topic no longer has (the topic created anew with
# fewer partitions) fails the job, as positions past a partition's end do,
# instead of holding the watermark forever.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
my $legacy = unique_name('t111l');
my $orders = unique_name('t111o');
kafka('create-topic', $orders, 1);
psql("DROP TABLE IF EXISTS out_111; CREATE TABLE out_111 (k text PRIMARY KEY, n bigint)");

sub spec
{
	my ($topics) = @_;
	return qq({"source": {"type": "kafka", "brokers": "$BROKERS", "topics": $topics, "start": "earliest"},
	  "steps": [{"key_by": {"k": "value->>'k'"}}, {"aggregate": {"n": "count(*)"}}],
	  "sink": {"type": "table", "table": "out_111"},
	  "state": {"backend": "memory"}, "checkpoint": {"interval": "200 milliseconds"}});
}

# legacy never existed (or was deleted): orders is read all the same.
my $job = 'missing_111';
kcat_produce($orders, [ map { "k$_\t{\"k\": \"k" . ($_ % 3) . "\"}" } 1 .. 30 ]);
psql("SELECT mailer.create_job('$job', \$\$" . spec(qq(["$legacy", "$orders"])) . "\$\$)");
wait_for_sql('the orders topic read', "SELECT coalesce(sum(n), 0) FROM out_111", '30', 60);
my $info = job_info($job);
is($info->{state}, 'waiting', 'the job says it waits');
like($info->{last_error}, qr/topic "\Q$legacy\E"/, 'last_error names the missing topic');
is(psql("SELECT waiting_for FROM mailer.jobs WHERE name = '$job'"), 'broker', 'it waits for the broker');
psql("SELECT mailer.drop_job('$job')");

# A topic of 2 partitions, read, then created anew with 1.
my $t2 = unique_name('t111r');
kafka('create-topic', $t2, 2);
psql("TRUNCATE out_111");
my $job2 = 'shrunk_111';
kcat_produce($t2, [ map { "k$_\t{\"k\": \"a\"}" } 1 .. 5 ], partition => 1);
psql("SELECT mailer.create_job('$job2', \$\$" . spec(qq(["$t2"])) . "\$\$)");
is(wait_job($job2), 'running', 'partition 1 read');
is(psql("SELECT mailer.stop_job('$job2')"), 'stopped', 'stopped');
kafka('delete-topic', $t2);
kafka('create-topic', $t2, 1);
psql("SELECT mailer.start_job('$job2')");
$info = wait_job_state($job2, qr/^failed$/, 60);
like($info->{last_error}, qr/partition 1 of Kafka topic "\Q$t2\E" no longer exists/,
	'last_error names the partition that is gone');
like($info->{last_error}, qr/mailer\.restore_job.*drop the job and create it again/,
	'and says how to go on');
psql("SELECT mailer.drop_job('$job2')");
kafka('delete-topic', $orders);
kafka('delete-topic', $t2);
done_testing();
