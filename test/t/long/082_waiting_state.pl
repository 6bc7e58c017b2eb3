# mailer.jobs says what is true now (issue 11, item 16): while the broker is
# away a job's state is 'waiting' and waiting_for is 'broker', and last_error
# says why; once the broker is back and the job makes progress, the state
# is 'running' and waiting_for NULL, while last_error and last_error_at keep
# the wait as the job's last error, with the time it began.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use Test::More;

my $topic = fresh_topic('t082', 2);
my $produce = seq_producer($topic, 5);
my $produced;
sub produce { $produced = $produce->(@_) }

sub now_view
{
	return psql("SELECT state || '|' || coalesce(waiting_for, '') || '|' || coalesce(last_error, '') || '|' || coalesce(last_error_at::text, '') FROM mailer.jobs WHERE name = 'j082'");
}

psql("CREATE TABLE t082_rows (seq bigint)");
psql(qq{SELECT mailer.create_job('j082', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	"steps": [{"map": {"seq": "(value->>'seq')::bigint"}}],
	"sink": {"type": "table", "table": "t082_rows"}, "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
produce(500);
is(wait_job('j082'), 'running', 'j082 has committed its input');
# (A topic just made may have had the job wait a moment already: last_error is not looked at.)
like(now_view(), qr/^running\|\|/, 'before the outage: running, waiting for nothing');

my $stopped_at = psql('SELECT now()');
kafka('stop');
my $r;
eval {
	wait_until('j082 waits for the broker', sub { $r = now_view(); $r =~ /^waiting\|/ }, 120);
	1;
} or fail("j082 waits for the broker: $r");
my ($state, $waiting_for, $error, $error_at) = split /\|/, $r;
is($waiting_for, 'broker', 'broker away: waiting_for broker');
like($error, qr/^waiting for Kafka: /, 'broker away: last_error says why');
is(psql("SELECT '$error_at'::timestamptz >= '$stopped_at'::timestamptz"), 't', 'broker away: last_error_at is of this wait');
ok(job_info('j082')->{pid}, 'broker away: the worker stays up');

kafka('start');
produce(500);
is(wait_job('j082', 120), 'running', 'broker back: j082 has committed its input');
my $back_at = psql('SELECT now()');
is(psql("SELECT count(*) || ' ' || count(DISTINCT seq) FROM t082_rows"), "$produced $produced", 'broker back: every row once');
$r = now_view();
($state, $waiting_for, $error, $error_at) = split /\|/, $r;
is($state, 'running', 'broker back: state running');
is($waiting_for, '', 'broker back: waiting_for NULL');
like($error, qr/^waiting for Kafka: /, 'broker back: last_error keeps the wait, as history');
is(psql("SELECT '$error_at'::timestamptz BETWEEN '$stopped_at'::timestamptz AND '$back_at'::timestamptz"), 't',
	'broker back: last_error_at is of the outage');

# The worker's exit does not lose the history: a stop, and it is still there.
psql("SELECT mailer.stop_job('j082')");
wait_job_state('j082', qr/^stopped$/, 60);
like(job_info('j082')->{last_error}, qr/^waiting for Kafka: /, 'stopped: last_error still says what the job last waited for');
is(psql("SELECT waiting_for IS NULL FROM mailer.jobs WHERE name = 'j082'"), 't', 'stopped: waiting_for NULL');

done_testing();
