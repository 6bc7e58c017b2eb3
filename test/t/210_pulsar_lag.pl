# Lag of a Pulsar source in mailer.partition_metrics and mailer.metrics,
# against a real Pulsar standalone: the worker is held right after its lag
# poll (test point pulsar_lag_polled), so the lag seen is the broker's for a
# position that cannot move, and must be exactly the messages not read
# (the WebSocket producer does not batch: one message per entry). Three
# cases: a job started at "earliest" (nothing read yet: every ledger's
# entries counted from internalStats), a restart behind messages produced
# while it was stopped (the reader's ledger is the partition's last:
# lastMessageId less the position), and a restart after an unload (the
# position in a closed ledger, the new messages in the next: internalStats
# again). After each, the job reads on and wait_job returns with every lag
# 0, and the rows are exactly those produced.
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
my $topic = 'public/default/' . unique_name('t210');
pulsar('create-topic', $topic, 2);
psql('DROP TABLE IF EXISTS lag_210');
psql('CREATE TABLE lag_210 (partition int, v text)');

my %produced = (0 => 0, 1 => 0);

sub produce
{
	my ($partition, $n) = @_;
	pulsar_produce_lines("$topic-partition-$partition",
		join('', map { qq({"v":"p$partition-) . ($produced{$partition} + $_) . qq("}\n) } 1 .. $n));
	$produced{$partition} += $n;
}

# Start (create, or start again) the job held at its first lag poll; returns
# "partition=lag,..." as partition_metrics shows it, and consumer_lag.
sub held_lags
{
	my ($start) = @_;
	my $from = test_point_hold('pulsar_lag_polled');
	psql($start);
	test_point_wait_reached('pulsar_lag_polled', $from, 60);
	my $lags = psql(pulsar_lags_sql('lag_210'));
	my $total = job_metric('lag_210', "coalesce(consumer_lag::text, 'null')");
	return ($lags, $total);
}

# Release the worker; once wait_job is done, every lag is 0 and every
# message produced is in the table, once.
sub caught_up
{
	my ($label) = @_;
	test_point_release();
	is(wait_job('lag_210', 120), 'running', "$label: wait_job");
	wait_for_sql("$label: every lag 0", pulsar_lags_sql('lag_210'), '0=0,1=0', 30);
	is(job_metric('lag_210', 'consumer_lag'), 0, "$label: consumer_lag 0 once caught up");
	is(psql("SELECT string_agg(partition || ':' || n || ':' || d, ',' ORDER BY partition) FROM "
		  . "(SELECT partition, count(*) n, count(DISTINCT v) d FROM lag_210 GROUP BY 1) s"),
		"0:$produced{0}:$produced{0},1:$produced{1}:$produced{1}",
		"$label: every message read once");
}

produce(0, 50);
produce(1, 30);
my ($lags, $total) = held_lags(pulsar_v_job_sql('lag_210', $url, $topic, checkpoint => '500 milliseconds'));
is($lags, '0=50,1=30', 'start at earliest: each partition lags by its messages');
is($total, 80, 'start at earliest: consumer_lag sums them');
caught_up('earliest');

# Stopped, then 20 more in partition 0: the reader's ledger is the last.
psql("SELECT mailer.stop_job('lag_210')");
produce(0, 20);
($lags, $total) = held_lags("SELECT mailer.start_job('lag_210')");
is($lags, '0=20,1=0', 'restart in the same ledger: lag is what was produced while stopped');
is($total, 20, 'restart in the same ledger: consumer_lag');
caught_up('same ledger');

# Stopped, the topic unloaded (each partition's ledger closed; the next
# load opens a new one), 7 more in partition 1.
psql("SELECT mailer.stop_job('lag_210')");
pulsar('admin', 'PUT', "/admin/v2/persistent/$topic/unload");
produce(1, 7);
($lags, $total) = held_lags("SELECT mailer.start_job('lag_210')");
is($lags, '0=0,1=7', 'restart behind a new ledger: lag counts its entries, 0 where none came');
is($total, 7, 'restart behind a new ledger: consumer_lag');
caught_up('new ledger');

is(psql("SELECT last_error IS NULL FROM mailer.jobs WHERE name = 'lag_210'"), 't', 'no error');
psql("SELECT mailer.drop_job('lag_210')");

# While the broker cannot be reached (a TCP proxy the job's service_url
# names, killed), the lag is unknown (null), not the last lag seen; it
# comes back once the broker answers again.
my ($target) = $url =~ m{:(\d+)$};
my $port = test_port(24000);
my $proxy = fake_server_start($port, 'tcp_proxy.py', $port, '127.0.0.1', $target);
psql('TRUNCATE lag_210');
psql(pulsar_v_job_sql('away_210', "http://127.0.0.1:$port", $topic, table => 'lag_210'));
is(wait_job('away_210', 120), 'running', 'through a proxy: wait_job');
my $lags_sql = pulsar_lags_sql('away_210');
wait_for_sql('through a proxy: every lag 0', $lags_sql, '0=0,1=0', 30);
fake_server_stop($proxy);
wait_for_sql('the broker away: every lag unknown', $lags_sql, '0=null,1=null', 60);
is(job_metric('away_210', "coalesce(consumer_lag::text, 'null')"), 'null', 'the broker away: consumer_lag unknown');
$proxy = fake_server_start($port, 'tcp_proxy.py', $port, '127.0.0.1', $target);
wait_for_sql('the broker back: every lag 0 again', $lags_sql, '0=0,1=0', 60);
psql("SELECT mailer.drop_job('away_210')");
fake_server_stop($proxy);
done_testing();
