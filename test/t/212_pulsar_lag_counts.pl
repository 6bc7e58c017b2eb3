# Pulsar lag from a broker whose counts are not possible: internalStats
# lists ledgers of 2^63-1 entries each (pulsar_lag_fake_stats.py; the
# reader never opens, so the lag is counted from the topic's start). The
# sum passes an int64: the lag is unknown (null), never a wrapped number.
# docs/ARCHITECTURE.md, "Source poll".
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

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
done_testing();
