# Another producer under a Pulsar sink's producer name (a copy of the data
# directory that reaches the same broker has the same names; so has anyone
# who can write to the topic) moves the broker's sequence id past the
# job's, and the broker then drops the job's records as duplicates. The
# sink must say so and keep the records, never report them published:
# a duplicate is believed only for a sequence id an earlier attempt may
# have sent (the progress row's sent_sequence_id).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();
fresh_extension();

my $url = pulsar_url();
my $out = 'public/default/' . unique_name('t201_out');
pulsar('create-topic', $out, 0);
psql(qq{SELECT mailer.create_job('j201', \$\${
  "source": {"type": "generator", "rate": 50},
  "checkpoint": {"interval": "500 milliseconds"},
  "sink": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$out", "format": "text",
           "key": "key", "value": "'c' || \\"offset\\""}}\$\$)});
wait_until('j201 to publish two epochs', sub {
	(psql("SELECT coalesce(published_epoch, 0) FROM mailer.kafka_sinks WHERE job = 'j201'") || 0) >= 2;
}, 60);
my $name = psql("SELECT transactional_id FROM mailer.kafka_sinks WHERE job = 'j201'");
psql("SELECT mailer.stop_job('j201', '1 minute')");
wait_until('j201 to publish what it committed', sub {
	psql("SELECT pending_records FROM mailer.kafka_sinks WHERE job = 'j201'") eq '0';
}, 60);
my $published = psql("SELECT last_sequence_id FROM mailer.kafka_sinks WHERE job = 'j201'");
cmp_ok($published, '>', 0, 'the job published records before the other producer came');

# The other producer: the job's name, a sequence id far ahead.
pt_produce($out, "$name.g1", 1_000_000, ['foreign']);
psql("SELECT mailer.start_job('j201')");
wait_until('the sink to report the other producer', sub {
	(psql("SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = 'j201'") // '') =~ /another producer has used that name/;
}, 60);
like(psql("SELECT last_error FROM mailer.jobs WHERE name = 'j201'"), qr/which this sink never sent/,
	'last_error says the broker holds a sequence id the sink never sent');
is(psql("SELECT state FROM mailer.jobs WHERE name = 'j201'"), 'waiting', 'the job waits');
cmp_ok(psql("SELECT pending_records FROM mailer.kafka_sinks WHERE job = 'j201'"), '>', 0,
	'the records the broker dropped stay in the outbox');
is(psql("SELECT last_sequence_id FROM mailer.kafka_sinks WHERE job = 'j201'"), $published,
	'nothing more is noted as published');
psql("SELECT mailer.drop_job('j201')");
done_testing();
