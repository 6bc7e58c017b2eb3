# The Pulsar sink (issue 18) against a real Pulsar standalone: a passthrough
# job from one Pulsar topic to another, read back whole (no loss, no
# duplicate); a SIGKILL after the broker acknowledged an epoch and before
# the progress row noted it (the epoch is sent again and the broker drops
# every record of it); a real send error (the topic's maxMessageSize)
# fails the publish, visibly, and loses nothing once it is lifted; a
# partitioned output topic, and one that does not deduplicate, are refused
# before anything is sent; a key a Pulsar key cannot be is a
# dead letter before it enters the outbox; a table with a Pulsar changelog
# ("sinks"). The kill at every other step is
# test/t/long/200_pulsar_sink_crash_sweep.pl.
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

my $in = 'public/default/' . unique_name('t200_in');
my $out = 'public/default/' . unique_name('t200_out');
pulsar('create-topic', $in, 2);
pulsar('create-topic', $out, 0);

my $produced = 0;
sub produce { psink_produce($in, \$produced, @_) }
sub check_output { psink_check($out, $produced, @_) }

psink_passthrough('j200', $in, $out);
wait_job_running('j200');
produce(400);
psink_wait_published('j200', 400);
check_output('passthrough');
like(psql("SELECT transactional_id FROM mailer.kafka_sinks WHERE job = 'j200'"), qr/^mailer\.\d+\.\d+\.\d+\.\d+\.0$/,
	'mailer.kafka_sinks shows the sink, its producer named by job and subtask');
like(psql("SELECT mailer.describe_job(spec) FROM mailer.job WHERE name = 'j200'"), qr/Sink: pulsar, service URL http:.*property src <- /s,
	'describe_job shows the Pulsar sink');

# SIGKILL after the acknowledgements, before the progress row: the next
# worker sends the epoch again under the same sequence ids.
{
	my $from = test_point_hold('pulsar_sink_after_acks');
	produce(300);
	my $pid = test_point_wait_reached('pulsar_sink_after_acks', $from, 60);
	cmp_ok(pulsar_entries($out), '>', $produced - 300, 'held after the acknowledgements: the broker has the epoch');
	ok(kill('KILL', $pid) == 1, "SIGKILL of the worker ($pid) before the progress row notes the epoch");
	wait_until('the server to restart after the crash', sub {
		my $now = eval { job_worker_pid('j200') };
		return defined $now && $now != $pid;
	}, 60);
	test_point_release();
	psink_wait_published('j200', $produced);
	check_output('after a kill between acknowledgements and progress');
	like(pg_log_since($from), qr/the broker already held \d+ of the \d+ records sent again/,
		'the records sent again were dropped by the broker (logged)');
}

# A send error: the topic takes no message over 50 bytes. The publish
# fails, the job waits with the broker's error, the outbox keeps the epoch.
{
	pulsar('admin', 'POST', "/admin/v2/persistent/$out/maxMessageSize", '50');
	my $published = psink_row('j200')->{published_epoch};
	produce(100);
	wait_until('the send error to show', sub {
		psql("SELECT last_error FROM mailer.jobs WHERE name = 'j200'") =~ /Pulsar sink could not send a record for topic "persistent:\/\/\Q$out\E": send-error.*Exceed maximum message size/;
	}, 60);
	is(psql("SELECT state FROM mailer.jobs WHERE name = 'j200'"), 'waiting', 'a send error: the job waits (it is not swallowed)');
	cmp_ok(psink_row('j200')->{pending_records}, '>', 0, '... the outbox keeps the records');
	is(psink_row('j200')->{published_epoch}, $published, '... and nothing more is noted as published');
	my ($rc, $lines) = pt_read($out, 'earliest', $produced - 100);
	is($rc, 0, '... and the topic holds none of them');
	pulsar('admin', 'DELETE', "/admin/v2/persistent/$out/maxMessageSize");
	psink_wait_published('j200', $produced);
	check_output('after the send error was lifted');
	wait_job_running('j200');
}

# A topic that does not deduplicate: refused before anything is sent.
{
	my $plain = 'public/default/' . unique_name('t200_nodedup');
	pulsar('create-topic', $plain, 0);
	pulsar('admin', 'POST', "/admin/v2/persistent/$plain/deduplicationEnabled", 'false');
	wait_until('the topic policy to apply', sub {
		pulsar('admin', 'GET', "/admin/v2/persistent/$plain/deduplicationEnabled?applied=true") =~ /false/;
	}, 30);
	psink_passthrough('j200_nodedup', $in, $plain);
	wait_until('the topic without deduplication to be refused', sub {
		psql("SELECT last_error FROM mailer.jobs WHERE name = 'j200_nodedup'") =~ /the topic does not deduplicate/;
	}, 60);
	is(psql("SELECT state FROM mailer.jobs WHERE name = 'j200_nodedup'"), 'waiting', 'a topic without deduplication: the job waits');
	my ($rc, $lines) = pt_read($plain, 'earliest', 0);
	is(scalar(@$lines), 0, '... and none is sent');
	psql("SELECT mailer.drop_job('j200_nodedup')");
}

# A partitioned output topic: refused before anything is sent.
# (Refused at the first publish, which comes before anything is read.)
{
	my $parted = 'public/default/' . unique_name('t200_parted');
	pulsar('create-topic', $parted, 2);
	psink_passthrough('j200_parted', $in, $parted);
	wait_until('the partitioned topic to be refused', sub {
		psql("SELECT last_error FROM mailer.jobs WHERE name = 'j200_parted'") =~ /the topic is partitioned, which the Pulsar sink does not support yet/;
	}, 60);
	is(psql("SELECT state FROM mailer.jobs WHERE name = 'j200_parted'"), 'waiting', 'a partitioned topic: the job waits');
	my ($rc, $lines) = pt_read("$parted-partition-0", 'earliest', 0);
	is(scalar(@$lines), 0, '... and none is sent');
	psql("SELECT mailer.drop_job('j200_parted')");
}

# Records the WebSocket service could never take are dead letters before
# the outbox, and the rest are published: a key with a zero byte, and a
# key of 200 kB of control characters, small as a record but over 1 MB as
# a frame (each is escaped as six characters of JSON).
{
	my $keys = 'public/default/' . unique_name('t200_keys');
	pulsar('create-topic', $keys, 0);
	my $url = pulsar_url();
	psql(qq{SELECT mailer.create_job('j200_keys', \$\${
	  "source": {"type": "generator", "events": 12},
	  "sink": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$keys", "format": "bytes",
	           "key": "CASE \\"offset\\" % 3 WHEN 0 THEN '\\\\x6100'::bytea WHEN 1 THEN decode(repeat('01', 200000), 'hex') ELSE 'b'::bytea END",
	           "value": "convert_to(value::text, 'UTF8')"}}\$\$)});
	wait_until('j200_keys to finish', sub { psql("SELECT state FROM mailer.jobs WHERE name = 'j200_keys'") eq 'finished' }, 60);
	is(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) WHERE j.name = 'j200_keys' "
		  . "AND stage = 'sink' AND error LIKE '%its key holds a zero byte%'"), '4', 'the 4 keys with a zero byte are dead letters');
	is(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) WHERE j.name = 'j200_keys' "
		  . "AND stage = 'sink' AND error LIKE '%its frame would be % bytes, more than the WebSocket service takes%'"), '4',
		'the 4 records whose frame would be over 1 MB are dead letters');
	my $lines = psink_read($keys, 4);
	is(scalar(grep { (split /\t/)[2] eq 'b' } @$lines), 4, 'the other 4 are published with their key');
	wait_until('j200_keys to have published', sub {
		psql("SELECT pending_records FROM mailer.kafka_sinks WHERE job = 'j200_keys'") eq '0';
	}, 60);
	is(psql("SELECT sink_type || ' ' || last_sequence_id || ' ' || sequence_generation FROM mailer.kafka_sinks WHERE job = 'j200_keys'"),
		'pulsar 3 1', 'mailer.kafka_sinks shows a Pulsar sink\'s last sequence id (4 records: 0 to 3) and its generation');
}

# "sinks": a table and its Pulsar changelog get the same rows.
{
	my $log = 'public/default/' . unique_name('t200_changelog');
	pulsar('create-topic', $log, 0);
	psql("DROP TABLE IF EXISTS t200_table; CREATE TABLE t200_table (k text PRIMARY KEY, n bigint)");
	my $url = pulsar_url();
	psql(qq{SELECT mailer.create_job('j200_changelog', \$\${
	  "source": {"type": "generator", "events": 50, "keys": 5},
	  "steps": [{"key_by": {"k": "key"}}, {"aggregate": {"n": "count(*)"}}],
	  "sinks": [{"type": "table", "table": "t200_table"},
	            {"type": "pulsar", "service_url": "$url", "topic": "persistent://$log",
	             "key": "k", "value": "n", "format": "text"}]}\$\$)});
	wait_until('j200_changelog to finish and publish', sub {
		psql("SELECT state FROM mailer.jobs WHERE name = 'j200_changelog'") eq 'finished'
		  && psql("SELECT pending_records FROM mailer.kafka_sinks WHERE job = 'j200_changelog'") eq '0';
	}, 60);
	# As many as the topic holds (one per row per epoch it changed in).
	my ($rc, $lines) = pt_read($log, 'earliest', pulsar_entries($log));
	my %last = map { my @f = split /\t/; ($f[2] => $f[4]) } @$lines;
	is(join(',', map { "$_=$last{$_}" } sort keys %last),
		psql("SELECT string_agg(k || '=' || n, ',' ORDER BY k) FROM t200_table"),
		'a Pulsar changelog: the last message of each key is the table\'s row');
	psql("SELECT mailer.drop_job('j200_changelog'); DROP TABLE t200_table");
}

psql("SELECT mailer.drop_job('j200')");
done_testing();
