# The Kafka sink under faults (issue 14): each time a read_committed
# consumer of the output topic must end up with exactly the records the
# input gives, none lost, none twice.
# - The broker stops while the worker holds an open Kafka transaction, and
#   is killed while a job streams: the job waits and resumes by itself.
# - The transaction outlives its transaction.timeout.ms (the broker aborts
#   it) while the worker is held after producing: the worker recovers.
# - The output topic does not exist: the job waits, last_error names the
#   topic, and it reads no new input; once the topic is created the job
#   resumes.
# - A record larger than the topic's max.message.bytes is dead-lettered
#   (stage sink); its neighbours are published once.
# - stop_job while the worker publishes, then start_job.
# - restore_job to an older epoch: the later epochs' records are published
#   again (documented: a consumer sees them twice).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaSinkTest;
use IPC::Run ();
use Test::More;

fresh_extension();

# T131_ONLY=stop,restore runs only those sections (when fixing one).
sub section { my ($name) = @_; return !$ENV{T131_ONLY} || grep { $_ eq $name } split /,/, $ENV{T131_ONLY} }
my ($out, $in, $log, $info);

# A test that dies must not leave a point held or the broker down.
my $broker_down = 0;
END
{
	my $status = $?;
	eval { test_point_release() };
	eval { kafka('start') } if $broker_down;
	$? = $status;
}

# Orders $from..$to: key cN, value {"order_id": n, "customer": "cN"}.
sub orders
{
	my ($topic, $from, $to, %extra) = @_;
	kcat_produce($topic, [ map {
		my $c = 'c' . ($_ % 5);
		my $more = $extra{$_} // '';
		qq($c\t{"order_id": $_, "customer": "$c"$more})
	} $from .. $to ]);
}

# A stateless job from a new input topic of $o{partitions} partitions to
# $out; returns the input topic.
sub stateless_job
{
	my ($name, $out, %o) = @_;
	my $in = ks_topic("${name}_in", $o{partitions} // 2);
	my $ckpt = qq("interval": "@{[ $o{interval} // '300 milliseconds' ]}");
	$ckpt .= qq(, "retain": $o{retain}) if $o{retain};
	psql(qq{SELECT mailer.create_job('$name', \$\${
	  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$in", "format": "json", "start": "earliest"},
	  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer": "value->>'customer'"}}],
	  "sink": @{[ ks_sink($out, %{ $o{sink} // {} }) ]},
	  "checkpoint": {$ckpt}}\$\$)});
	return $in;
}

# The order ids a read_committed consumer of $out sees now.
sub got_ids
{
	my ($out) = @_;
	ks_read_into('t131_got', $out);
	return q{SELECT (v::jsonb->>'order_id')::bigint FROM t131_got};
}

# The job has committed its input and published it; $out holds exactly
# the orders $want (SQL giving order ids, each as often as it must appear).
sub exact
{
	my ($job, $out, $want, $what, $timeout) = @_;
	is(wait_job($job, 180), 'running', "$what: $job has committed its input");
	ks_wait_published($job, undef, $timeout // 180);
	ks_same(got_ids($out), $want, "$what: each record exactly as often as expected (read_committed)");
}

sub ids { my ($from, $to) = @_; return "SELECT generate_series($from, $to)::bigint" }

# ---------------------------------------------------------------------------
# The broker away
# ---------------------------------------------------------------------------
if (section('broker'))
{
	$out = ks_topic('t131_broker_out', 2);
	$in = stateless_job('j131_broker', $out);
	orders($in, 1, 500);
	exact('j131_broker', $out, ids(1, 500), 'broker: before the outage');

	# Held with its records produced and the transaction open, the broker
	# stops; released, the worker cannot finish the transaction.
	$log = test_point_hold('kafka_sink_after_produce');
	orders($in, 501, 1000);
	test_point_wait_reached('kafka_sink_after_produce', $log, 120);
	$broker_down = 1;
	kafka('stop');
	test_point_release();
	$info = wait_job_state('j131_broker', qr/^waiting$/, 120);
	like($info->{last_error}, qr/Kafka/, "broker stopped in a transaction: the job waits: $info->{last_error}");
	is(psql("SELECT waiting_for FROM mailer.jobs WHERE name = 'j131_broker'"), 'broker', '... for the broker');
	kafka('start');
	$broker_down = 0;
	exact('j131_broker', $out, ids(1, 1000), 'broker: back after a stop in a transaction');

	# Killed while the job streams 5,000 orders.
	orders($in, 1001, 6000);
	wait_until('j131_broker has published some of the stream',
		sub { ks_read_into('t131_got', $out) > 1500 }, 120);
	$broker_down = 1;
	kafka('kill');
	kafka('start');
	$broker_down = 0;
	exact('j131_broker', $out, ids(1, 6000), 'broker: back after a kill while streaming');
	psql("SELECT mailer.drop_job('j131_broker')");
}

# ---------------------------------------------------------------------------
# A transaction that times out at the broker
# ---------------------------------------------------------------------------
if (section('timeout'))
{
	$out = ks_topic('t131_timeout_out', 1);
	$in = stateless_job('j131_timeout', $out, sink => { options => '{"transaction.timeout.ms": "3000"}' });
	orders($in, 1, 200);
	exact('j131_timeout', $out, ids(1, 200), 'timeout: before');
	$log = test_point_hold('kafka_sink_after_produce');
	orders($in, 201, 400);
	test_point_wait_reached('kafka_sink_after_produce', $log, 120);
	my $end = ks_end_offset($out, 1);
	# The coordinator aborts a transaction older than its timeout: its abort
	# marker takes an offset.  (It looks every 10 s by default.)
	wait_until('the broker to abort the timed-out transaction', sub { ks_end_offset($out, 1) > $end }, 120);
	pass('timeout: the broker aborted the held transaction');
	ks_read_into('t131_got', $out);
	is(psql("SELECT count(*) FROM t131_got"), '200', 'timeout: the aborted records are not visible');
	test_point_release();
	exact('j131_timeout', $out, ids(1, 400), 'timeout: released after the abort, the worker publishes once');
	orders($in, 401, 600);
	exact('j131_timeout', $out, ids(1, 600), 'timeout: and goes on');
	psql("SELECT mailer.drop_job('j131_timeout')");
}

# ---------------------------------------------------------------------------
# A missing output topic
# ---------------------------------------------------------------------------
if (section('missing'))
{
	$out = unique_name('t131_missing_out');
	$in = stateless_job('j131_missing', $out);
	orders($in, 1, 300);
	$info = wait_job_state('j131_missing', qr/^waiting$/, 120);
	like($info->{last_error}, qr/\Q$out\E/, "missing topic: the job waits, last_error names the topic: $info->{last_error}");
	is(psql("SELECT waiting_for FROM mailer.jobs WHERE name = 'j131_missing'"), 'broker', '... waiting for the broker');
	my $srow = ks_sink_row('j131_missing');
	ok($srow, '... mailer.kafka_sinks has a row for the job');
	is(($srow // {})->{published_epoch}, 0, '... which shows nothing published');
	# Back-pressure: the job reads nothing new while it cannot publish.
	orders($in, 301, 400);
	like(psql_fails("SELECT mailer.wait_job('j131_missing', '3 seconds')"), qr/did not commit/,
		'missing topic: wait_job does not return while the output cannot be written');
	cmp_ok(job_metric('j131_missing', 'records_in'), '<=', 300, '... and the job has read nothing of the input produced since');
	kafka('create-topic', $out, 1);
	exact('j131_missing', $out, ids(1, 400), 'missing topic: created, the job resumes');
	wait_job_state('j131_missing', qr/^running$/, 60);
	pass('missing topic: the job runs again');
	psql("SELECT mailer.drop_job('j131_missing')");
}

# ---------------------------------------------------------------------------
# stop_job while the worker publishes, then start_job
# ---------------------------------------------------------------------------
if (section('stop'))
{
	$out = ks_topic('t131_stop_out', 2);
	$in = stateless_job('j131_stop', $out);
	orders($in, 1, 500);
	exact('j131_stop', $out, ids(1, 500), 'stop: before');
	$log = test_point_hold('kafka_sink_after_marker');
	orders($in, 501, 1000);
	test_point_wait_reached('kafka_sink_after_marker', $log, 120);
	my ($stop_out, $stop_err) = ('', '');
	my $stopper = IPC::Run::start([ 'psql', '-X', '-q', '-A', '-t', '-c', "SELECT mailer.stop_job('j131_stop', '2 minutes')" ],
		'>', \$stop_out, '2>', \$stop_err);
	# stop_job asks the worker through its slot, then waits (wait event Extension).
	wait_until('stop_job to ask the job to stop and wait', sub {
		psql("SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND wait_event_type = 'Extension' "
			  . "AND query LIKE 'SELECT mailer.stop_job(''j131_stop''%'") eq '1';
	}, 60);
	test_point_release();
	$stopper->finish;
	chomp $stop_out;
	is($stop_out, 'stopped', "stop: stop_job returns once the held worker went on and stopped $stop_err");
	ks_read_into('t131_got', $out);
	is(psql("SELECT count(*) - count(DISTINCT v::jsonb->>'order_id') FROM t131_got"), '0', 'stop: no duplicate so far');
	orders($in, 1001, 1500);
	is(psql("SELECT mailer.start_job('j131_stop')"), 'starting', 'stop: started again');
	exact('j131_stop', $out, ids(1, 1500), 'stop: then started, each record once');
	# And a plain stop and start while 5,000 orders stream.
	orders($in, 1501, 6500);
	wait_until('j131_stop has read some of the stream', sub { job_metric('j131_stop', 'records_in') > 1500 }, 120);
	is(psql("SELECT mailer.stop_job('j131_stop')"), 'stopped', 'stop: stopped while streaming');
	psql("SELECT mailer.start_job('j131_stop')");
	exact('j131_stop', $out, ids(1, 6500), 'stop: started again, each record once');
	psql("SELECT mailer.drop_job('j131_stop')");
}

# ---------------------------------------------------------------------------
# restore_job to an older epoch
# ---------------------------------------------------------------------------
if (section('restore'))
{
	$out = ks_topic('t131_restore_out', 2);
	$in = stateless_job('j131_restore', $out, retain => 1000);
	orders($in, 1, 500);
	exact('j131_restore', $out, ids(1, 500), 'restore: first batch');
	my $e1 = ks_epoch('j131_restore');
	is(psql("SELECT (counters->>'records_in')::bigint FROM mailer.checkpoints c JOIN mailer.job j USING (job_id)
		WHERE j.name = 'j131_restore' AND c.epoch = $e1 AND c.subtask = 0"), '500', "restore: epoch $e1 covers the first batch");
	orders($in, 501, 1000);
	exact('j131_restore', $out, ids(1, 1000), 'restore: second batch');
	orders($in, 1001, 1500);
	exact('j131_restore', $out, ids(1, 1500), 'restore: third batch');
	is(psql("SELECT mailer.stop_job('j131_restore')"), 'stopped', 'restore: stopped');
	is(psql("SELECT mailer.restore_job('j131_restore', $e1)"), $e1, "restore: restored to epoch $e1");
	psql("SELECT mailer.start_job('j131_restore')");
	is(wait_job('j131_restore', 180), 'running', 'restore: replayed');
	# published_epoch may have been past the restored epochs before: wait for
	# the replayed records themselves, then for nothing pending.
	wait_until('the replayed epochs to be published again',
		sub { ks_read_into('t131_got', $out) >= 2500 }, 180);
	ks_wait_published('j131_restore', undef, 180);
	ks_same(got_ids($out), ids(1, 500) . " UNION ALL " . ids(501, 1500) . " UNION ALL " . ids(501, 1500),
		'restore: the epochs after the restored one are published again (twice), the earlier ones once');
	orders($in, 1501, 1600);
	exact('j131_restore', $out, ids(1, 500) . " UNION ALL " . ids(501, 1500) . " UNION ALL " . ids(501, 1600),
		'restore: new input once');
	psql("SELECT mailer.drop_job('j131_restore')");
}

# ---------------------------------------------------------------------------
# A record too large for the topic
# ---------------------------------------------------------------------------
if (section('large'))
{
	$out = ks_topic('t131_large_out', 1, '--config', 'max.message.bytes=20000');
	$in = stateless_job('j131_large', $out, partitions => 1);
	# Incompressible padding: 40,000 hex digits of a linear congruential sequence.
	my $seed = 131;
	my $pad = join('', map { $seed = ($seed * 1103515245 + 12345) % 2147483648; sprintf('%08x', $seed) } 1 .. 5000);
	orders($in, 1, 30, 15 => qq(, "pad": "$pad"));
	exact('j131_large', $out, ids(1, 14) . " UNION ALL " . ids(16, 30), 'too large: its neighbours are published once', 90);
	my $dl = dead_letters('j131_large');
	is(scalar(@$dl), 1, 'too large: one dead letter');
	is($dl->[0]{stage}, 'sink', '... of stage sink');
	like($dl->[0]{error} // '', qr/large|size/i, "... saying why: " . ($dl->[0]{error} // ''));
	orders($in, 31, 40);
	exact('j131_large', $out, ids(1, 14) . " UNION ALL " . ids(16, 40), 'too large: the job goes on');
	is(scalar(@{ dead_letters('j131_large') }), 1, 'too large: still one dead letter');
	psql("SELECT mailer.drop_job('j131_large')");
}

done_testing();
