# Pulsar lag counted from internalStats (a reader a ledger behind):
# 1. A broker whose counts are not possible: internalStats lists ledgers of
#    2^63-1 entries each (pulsar_lag_fake_stats.py; the reader never opens,
#    so the lag is counted from the topic's start). The sum passes an
#    int64: the lag is unknown (null), never a wrapped number.
# 2. A count held between internalStats calls (30 s) while the end moves on
#    in the ledger it was counted to: a stuck reader (its WebSocket refused
#    by pulsar_lag_front.py) of an empty partition that then gets 30
#    messages shows them within two refreshes, not lag 0 until the next count.
# docs/ARCHITECTURE.md, "Source poll".
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();
fresh_extension();
my $port = test_port(24950);
my $fake = fake_server_start($port, 'pulsar_lag_fake_stats.py', $port);
psql('DROP TABLE IF EXISTS lag_212');
psql('CREATE TABLE lag_212 (value jsonb)');
psql(qq{SELECT mailer.create_job('lag_212', \$\${
  "source": {"type": "pulsar", "service_url": "http://127.0.0.1:$port", "topic": "persistent://public/default/t", "format": "json"},
  "sink": {"type": "table", "table": "lag_212", "mode": "append"},
  "state": {"backend": "memory"}
}\$\$)});
wait_for_sql('a partition published', "SELECT count(*) FROM mailer.partition_metrics WHERE name = 'lag_212'", '1', 30);
sleep 2;
is(psql("SELECT coalesce(lag::text, 'null') || '/' || coalesce(end_offset::text, 'null') "
	  . "FROM mailer.partition_metrics WHERE name = 'lag_212'"), 'null/null', 'entry counts past an int64: lag unknown');
is(job_metric('lag_212', "coalesce(consumer_lag::text, 'null')"), 'null', 'consumer_lag unknown too');
psql("SELECT mailer.drop_job('lag_212')");
fake_server_stop($fake);

{
	my $url = pulsar_url();
	my ($target) = $url =~ m{:(\d+)$};
	my $topic = 'public/default/' . unique_name('t212');
	pulsar('create-topic', $topic, 2);
	my $dir = $ENV{MAILER_RUN_DIR} // '/tmp';
	my ($flag, $log) = ("$dir/t212.flag", "$dir/t212.log");
	unlink $flag, $log;
	open(my $fh, '>', $flag) or die;
	print $fh "p1ws\n";
	close $fh;
	my $fport = test_port(24960);
	my $front = fake_server_start($fport, 'pulsar_lag_front.py', $fport, $target, $flag, $log);
	psql('DROP TABLE IF EXISTS lag_212b');
	psql('CREATE TABLE lag_212b (v text)');
	psql(pulsar_v_job_sql('lag_212b', "http://127.0.0.1:$fport", $topic));
	my $lags = pulsar_lags_sql('lag_212b');
	wait_for_sql('an empty topic: every lag 0', $lags, '0=0,1=0', 30);
	pulsar_produce_lines("$topic-partition-1", join('', map { qq({"v":"$_"}\n) } 1 .. 30));
	wait_for_sql('partition 1 (reader stuck): its 30 new messages within two refreshes', $lags, '0=0,1=30', 10);
	pass('the end moved within the counted ledger: counted without a new internalStats');
	unlink $flag;
	psql("SELECT mailer.drop_job('lag_212b')");
	fake_server_stop($front);
}
done_testing();
