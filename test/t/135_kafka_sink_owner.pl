# The Kafka sink as a role that is not a superuser, and what a hostile
# review broke:
# - a plain owner's job runs (its worker judges the owner's options in a
#   transaction and reads and writes the outbox as the catalog's owner);
# - a record larger than the topic takes is a dead letter and its
#   neighbours are published once;
# - a topic name Kafka refuses, and producer options an idempotent producer
#   refuses, are create_job errors with the spec's path;
# - restore_job to the epoch whose Kafka transaction committed just before
#   a crash (its outbox rows not yet deleted) publishes that epoch once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
psql("DROP ROLE IF EXISTS t135_alice; CREATE ROLE t135_alice LOGIN");

my $in = unique_name('t135_in');
my $out = unique_name('t135_out');
kafka('create-topic', $in, 1);
kafka('create-topic', $out, 1, '--config', 'max.message.bytes=20000');

sub spec_of
{
	my ($topic, %extra) = @_;
	my $options = $extra{options} // '{}';
	return sprintf(<<'JSON', $BROKERS, $in, $BROKERS, $topic, $options);
{"source": {"type": "kafka", "brokers": "%s", "topic": "%s", "format": "text"},
 "sink": {"type": "kafka", "brokers": "%s", "topic": "%s", "value": "value", "format": "text",
          "options": %s},
 "checkpoint": {"interval": "200 milliseconds"}}
JSON
}

# Invalid specs, refused for the caller.
my $err = psql_fails_as('t135_alice', "SELECT mailer.create_job('t135_bad', \$s\$" . spec_of('x' x 300) . "\$s\$)");
like($err, qr/42602.*sink\.topic: "x+" is not a Kafka topic name/s, 'a topic name Kafka refuses is a create_job error at sink.topic');
$err = psql_fails_as('t135_alice', "SELECT mailer.create_job('t135_bad', \$s\$"
	  . spec_of($out, options => '{"max.in.flight": "10"}') . "\$s\$)");
like($err, qr/sink\.options\.max\.in\.flight/, 'more requests in flight than an idempotent producer takes is refused at its path');

# 30 records, the 15th larger than the topic takes.
kcat_produce($in, [ map { $_ == 15 ? "$_-" . ('y' x 40000) : "$_" } 1 .. 30 ], keyed => 0);
psql_as('t135_alice', "SELECT mailer.create_job('t135', \$s\$" . spec_of($out) . "\$s\$)");
is(psql_as('t135_alice', "SELECT mailer.wait_job('t135', '120 s')"), 'running', 'the plain owner\'s job commits and publishes its input');
my $got = kcat_consume($out, format => "%s\n");
is(join(' ', @$got), join(' ', grep { $_ != 15 } 1 .. 30), 'every record but the large one, once, in order');
like(psql(q{SELECT stage || ': ' || error FROM mailer.dead_letters WHERE job_id = (SELECT job_id FROM mailer.job WHERE name = 't135')}),
	qr/^sink: the record is 4000\d bytes, more than topic "\Q$out\E" takes/, 'the large record is a dead letter of stage sink');

# The crash window between the Kafka commit and the outbox delete, then a
# restore to that very epoch: nothing may be published twice.
my $log = test_point_hold('kafka_sink_after_kafka_commit');
kcat_produce($in, [ 31 .. 40 ], keyed => 0);
my $pid = test_point_wait_reached('kafka_sink_after_kafka_commit', $log, 120);
ok($pid, 'the worker is held after the Kafka commit');
my $epoch = psql(q{SELECT max(epoch) FROM mailer.checkpoints WHERE job_id = (SELECT job_id FROM mailer.job WHERE name = 't135')});
cmp_ok(psql(q{SELECT pending_records FROM mailer.kafka_sinks WHERE job = 't135'}), '>', 0, 'the committed epoch is still in the outbox');
# The job is to stay stopped after the crash: set as stop_job would.
psql(q{UPDATE mailer.job SET desired_state = 'stopped' WHERE name = 't135'});
is(kill('KILL', $pid), 1, 'SIGKILL in the window');
wait_until('the server restarted', sub { pg_log_since($log) =~ /database system is ready to accept connections/ }, 120);
wait_server_ready();
test_point_release();
wait_job_state('t135', qr/^stopped$/);
psql("SELECT mailer.restore_job('t135', $epoch)");
psql("SELECT mailer.start_job('t135')");
is(psql_as('t135_alice', "SELECT mailer.wait_job('t135', '120 s')"), 'running', 'the restored job runs and publishes');
$got = kcat_consume($out, format => "%s\n");
is(join(' ', @$got), join(' ', grep { $_ != 15 } 1 .. 40), 'after the restore every record is in the topic once');

psql("SELECT mailer.drop_job('t135')");

# A compacted topic takes no record without a key, and the broker refuses
# the whole batch around one: such records are dead letters up front, and
# the job goes on (a stateless job's records have no key by default).
my $compacted = unique_name('t135_compact');
kafka('create-topic', $compacted, 1, '--config', 'cleanup.policy=compact');
my $keyless = spec_of($compacted);
$keyless =~ s/"value": "value", "format": "text",/"value": "value", "key": "CASE WHEN value <> '3' THEN value END", "format": "text",/;
psql_as('t135_alice', "SELECT mailer.create_job('t135c', \$s\$$keyless\$s\$)");
is(psql_as('t135_alice', "SELECT mailer.wait_job('t135c', '120 s')"), 'running', 'a keyless record does not hold the job up');
$got = kcat_consume($compacted, format => "%s\n");
is(scalar(grep { $_ eq '3' } @$got), 0, 'the keyless record is not in the compacted topic');
is(scalar(@$got), 39, 'the records with a key are');
like(psql(q{SELECT string_agg(error, '; ') FROM mailer.dead_letters WHERE job_id = (SELECT job_id FROM mailer.job WHERE name = 't135c')}),
	qr/is compacted \(cleanup\.policy\) and takes no record without a key/, 'it is a dead letter that says why');
psql("SELECT mailer.drop_job('t135c')");
psql("DROP ROLE t135_alice");
done_testing();
