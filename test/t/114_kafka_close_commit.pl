# A worker that exits closes its Kafka consumer: the offsets of its final
# checkpoint reach the consumer group (for lag tools) before it exits,
# instead of an asynchronous commit lost with the process.  Periodic
# checkpoints are an hour apart, so only the stop's final checkpoint holds
# the last 50 records' positions.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
my $topic = unique_name('t114');
kafka('create-topic', $topic, 1);
psql("DROP TABLE IF EXISTS out_114; CREATE TABLE out_114 (k text PRIMARY KEY, n bigint)");
my $job = 'close_114';
my $group = unique_name('g114');
create_totals_job($job, $topic, table => 'out_114', source => qq("group_id": "$group"), key => '{"k": "key"}',
	interval => '1 hour', backend => 'memory');

sub committed
{
	for (split /\n/, eval { kafka('describe-group', $group) } // '')
	{
		my @f = split ' ';
		return $f[3] if @f >= 6 && $f[0] eq $group && $f[1] eq $topic && $f[2] eq '0';
	}
	return '';
}

kcat_produce($topic, [ map { "k$_\tv" } 1 .. 100 ]);
wait_until('the job to read 100 records', sub { job_metrics($job)->{records_in} == 100 }, 60);
my $from = pg_log_size();
is(psql("SELECT mailer.stop_job('$job')"), 'stopped', 'stopped: its final checkpoint holds 100');
is(psql("SELECT c.positions->'$topic'->>'0' FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) "
	  . "WHERE j.name = '$job' ORDER BY c.epoch DESC LIMIT 1"), '100', 'the final checkpoint');
is(committed(), '100', 'the consumer group holds the final checkpoint\'s offset once the worker is gone');
unlike(pg_log_since($from), qr/terminated by signal|PANIC/, 'the worker exited cleanly');
psql("SELECT mailer.drop_job('$job')");
kafka('delete-topic', $topic);
done_testing();
