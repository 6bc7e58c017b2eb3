# The Kafka sink publishes each epoch exactly once, whatever step of its
# protocol a crash interrupts (issue 14).  Two jobs write to Kafka topics:
# a stateless one (orders -> filter, map -> output topic, the default JSON
# value) and a keyed aggregate (tumbling windows of 10 s per customer,
# emit final, count and sum).  For each test point of the sink's protocol
# in turn, a batch of input is produced, the worker is held at the point
# and killed (SIGKILL: the server reinitializes), then released; once
# mailer.kafka_sinks shows everything published, a read_committed consumer
# of the output topic must see exactly the records the input gives: none
# lost, none twice.  A read_uncommitted consumer shows that the
# transactions a crash cut after their records were produced did exist,
# and were aborted.  Then the same with an immediate stop of the server,
# a sink with delivery at_least_once (a crash repeats, never loses), and a
# job of parallelism 2 (a transactional.id per subtask).
# On a server of its own (MailerCluster): it is crashed.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerCluster;
use MailerTest;
use MailerKafkaSinkTest;
use MailerParallelTest qw(par_node_conf);
use Test::More;

# Slots and prepared transactions for the parallel job at the end.
my $node = mailer_node('node', par_node_conf(8));
fresh_extension();
drop_tables('t130_');

my $in_a = ks_topic('t130_in_a', 2);
my $out_a = ks_topic('t130_out_a', 2);
my $in_b = ks_topic('t130_in_b', 1);
my $out_b = ks_topic('t130_out_b', 2);

psql(qq{SELECT mailer.create_job('j130_a', \$\${
  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$in_a", "format": "json", "start": "earliest"},
  "steps": [{"filter": "(value->>'amount')::numeric >= 5"},
            {"map": {"order_id": "(value->>'order_id')::bigint", "customer": "value->>'customer'",
                     "cents": "((value->>'amount')::numeric * 100)::bigint"}}],
  "sink": @{[ ks_sink($out_a) ]},
  "checkpoint": {"interval": "300 milliseconds"}}\$\$)});
psql(qq{SELECT mailer.create_job('j130_b', \$\${
  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$in_b", "format": "json", "start": "earliest"},
  "event_time": "(value->>'ts')::timestamptz",
  "steps": [{"filter": "value->>'customer' <> 'tick'"},
            {"key_by": {"customer": "value->>'customer'"}},
            {"window": {"type": "tumbling", "size": "10 seconds", "emit": "final"}},
            {"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}],
  "sink": @{[ ks_sink($out_b) ]},
  "state": {"backend": "rocksdb"},
  "checkpoint": {"interval": "300 milliseconds"}}\$\$)});
psql("CREATE TABLE t130_events (batch int, customer text, ts timestamptz, amount numeric)");
# The aggregate's watermark: the newest event time produced (seconds, ev_time).
my $b_watermark = 0;

# ---------------------------------------------------------------------------
# The two jobs: how a batch is made, what the output must be, how a
# batch's records are told apart in the output.
# ---------------------------------------------------------------------------

# Stateless: 100 orders a batch, keyed by customer (so over both
# partitions); amounts below 5 are filtered out.  The expected output is
# computed from the input topic as a consumer reads it back (partition
# and offset are output fields too).
my %job = (
	a => {
		name => 'j130_a', out => $out_a, partitions => 2,
		produce => sub {
			my ($batch) = @_;
			kcat_produce($in_a, [ map {
				my $c = 'c' . ($_ % 7);
				sprintf("%s\t{\"order_id\": %d, \"customer\": \"%s\", \"amount\": %.1f}", $c, $_, $c, (($_ * 37) % 1000) / 10)
			} ($batch - 1) * 100 + 1 .. $batch * 100 ]);
		},
		want => sub {
			ks_load('t130_in_a_rows', ks_read($in_a, format => "%p:%o\t%s\n"));
			return q{SELECT (v::jsonb->>'order_id')::bigint AS order_id, v::jsonb->>'customer' AS customer,
			                ((v::jsonb->>'amount')::numeric * 100)::bigint AS cents,
			                split_part(k, ':', 1)::int AS partition, split_part(k, ':', 2)::bigint AS "offset"
			           FROM t130_in_a_rows WHERE (v::jsonb->>'amount')::numeric >= 5};
		},
		got => sub {
			my ($t) = @_;
			return qq{SELECT (v::jsonb->>'order_id')::bigint, v::jsonb->>'customer', (v::jsonb->>'cents')::bigint,
			                 (v::jsonb->>'partition')::int, (v::jsonb->>'offset')::bigint FROM $t};
		},
		of_batch => sub {
			my ($t, $batch) = @_;
			return "SELECT count(*) FROM $t WHERE (v::jsonb->>'order_id')::bigint BETWEEN "
			  . (($batch - 1) * 100 + 1) . " AND " . ($batch * 100);
		},
	},
	# Aggregate: 60 events a batch, 1.5 s apart, in [100 * batch, 100 *
	# batch + 90) s and never on a window's end.  The watermark (the
	# newest event time) fires each window once a later one has an event:
	# the batch's last window fires with the next batch's first event, so
	# the first epoch that reads a batch always has output.
	b => {
		name => 'j130_b', out => $out_b, partitions => 2,
		produce => sub {
			my ($batch) = @_;
			my (@lines, @rows);
			for my $i (0 .. 59)
			{
				my $c = 'c' . (($i * 3 + $batch) % 5);
				my $ts = ev_time(100 * $batch + 0.25 + $i * 1.5);
				my $amount = sprintf('%.1f', (($batch * 31 + $i * 7) % 50) + 0.5);
				push @lines, qq($c\t{"customer": "$c", "ts": "$ts", "amount": $amount});
				push @rows, "($batch, '$c', '$ts', $amount)";
			}
			psql("INSERT INTO t130_events VALUES " . join(', ', @rows));
			kcat_produce($in_b, \@lines);
			$b_watermark = 100 * $batch + 0.25 + 59 * 1.5;
		},
		want => sub {
			return q{SELECT * FROM (
			           SELECT customer, date_bin('10 seconds', ts, '1970-01-01 00:00:00+00') AS window_start,
			                  date_bin('10 seconds', ts, '1970-01-01 00:00:00+00') + interval '10 seconds' AS window_end,
			                  count(*) AS n, sum(amount) AS total
			             FROM t130_events GROUP BY 1, 2, 3) w
			          WHERE window_end <= '} . ev_time($b_watermark) . q{'};
		},
		got => sub {
			my ($t) = @_;
			return qq{SELECT v::jsonb->>'customer', (v::jsonb->>'window_start')::timestamptz,
			                 (v::jsonb->>'window_end')::timestamptz, (v::jsonb->>'n')::bigint,
			                 (v::jsonb->>'total')::numeric FROM $t};
		},
		# The windows only this batch's round emits: the previous batch's
		# last one and this batch's.
		of_batch => sub {
			my ($t, $batch) = @_;
			return "SELECT count(*) FROM $t WHERE (v::jsonb->>'window_start')::timestamptz >= '"
			  . ev_time(100 * ($batch - 1) + 80) . "'";
		},
	},
);

# The records of the newest batch that a consumer of $isolation sees now.
sub visible_of_batch
{
	my ($j, $isolation) = @_;
	my $t = "t130_seen_$j";
	ks_read_into($t, $job{$j}{out}, isolation => $isolation);
	return psql($job{$j}{of_batch}->($t, $job{$j}{batch}));
}

# Wait until the job's worker has reached the point; returns its pid.  (The
# other job's worker may pass the publishing points too, with nothing to
# publish, when it starts after a crash: it is held as well, and released
# with this one.)
sub wait_held
{
	my ($name, $point, $from) = @_;
	my $pid;
	wait_until("$name held at $point", sub {
		my $w = worker_pid($name);
		return $w > 0 && pg_log_since($from) =~ /\[$w\] [^\n]*mailer test point \Q$point\E reached/ ? ($pid = $w) : 0;
	}, 120);
	return $pid;
}

# Everything the job committed is published and the topic holds exactly
# the expected records; a read_uncommitted consumer sees in addition only
# copies of them (aborted transactions), which are returned as a count.
sub check_exact
{
	my ($j, $what) = @_;
	my $J = $job{$j};
	is(ks_wait_job($J->{name}, 180), 'running', "$what: $J->{name} has committed its input");
	ks_wait_published($J->{name}, undef, 180);
	ks_read_into("t130_got_$j", $J->{out});
	my $want = $J->{want}->();
	ks_same($J->{got}->("t130_got_$j"), $want, "$what: $J->{name}'s topic holds each expected record once (read_committed)");

	ks_read_into("t130_all_$j", $J->{out}, isolation => 'read_uncommitted');
	my $aborted = '(' . $J->{got}->("t130_all_$j") . ') EXCEPT ALL (' . $J->{got}->("t130_got_$j") . ')';
	is(psql("SELECT count(*) FROM (($aborted) EXCEPT ($want)) x"), '0',
		"$what: read_uncommitted sees no other records than copies of expected ones");
	return psql("SELECT count(*) FROM ($aborted) x");
}

sub check_keys
{
	my ($what) = @_;
	is(psql("SELECT count(k) FROM t130_got_a"), '0', "$what: the stateless job's records have a null key");
	is(psql(q{SELECT count(*) FROM t130_got_b
	           WHERE k::jsonb IS DISTINCT FROM jsonb_build_object('customer', v::jsonb->'customer', 'window_start', v::jsonb->'window_start')}),
		'0', "$what: the aggregate's records are keyed by customer and window_start");
}

# ---------------------------------------------------------------------------
# Before any crash: one batch each, published as it should.
# ---------------------------------------------------------------------------

my %aborted;
for my $j (qw(a b))
{
	$job{$j}{batch} = 1;
	$job{$j}{produce}->(1);
	$aborted{$j} = check_exact($j, "batch 1 of $j");
	is($aborted{$j}, '0', "batch 1 of $j: no aborted record without a crash");
}
check_keys('no crash');
my $row = ks_sink_row('j130_a');
is($row->{topic}, $out_a, 'mailer.kafka_sinks names the topic');
is($row->{delivery}, 'exactly_once', '... and the delivery, exactly_once by default');
ok(length($row->{transactional_id} // ''), "... and the transactional.id mailer chose: " . ($row->{transactional_id} // 'none'));
is($row->{last_error}, undef, '... and no error');
cmp_ok($row->{published_epoch}, '>=', 1, '... and the epoch it published');
like(psql("SELECT v FROM t130_got_a LIMIT 1"), qr/"cents": \d+/, 'the default value is a JSON object, numbers as numbers');

# ---------------------------------------------------------------------------
# The sweep: each point of the protocol, in order, for each job.
# ---------------------------------------------------------------------------

my @points = qw(kafka_sink_after_outbox checkpoint_after_commit kafka_sink_after_begin
  kafka_sink_after_produce kafka_sink_after_marker kafka_sink_after_kafka_commit kafka_sink_after_cleanup);
my %published_when_held = map { $_ => 1 } qw(kafka_sink_after_kafka_commit kafka_sink_after_cleanup);
my %produced_when_held = map { $_ => 1 } qw(kafka_sink_after_produce kafka_sink_after_marker);

my @rounds = ((map { my $j = $_; map { [ $j, $_, 'kill' ] } @points } qw(a b)),
	[ 'a', 'kafka_sink_after_marker', 'immediate' ],
	[ 'b', 'kafka_sink_after_produce', 'immediate' ]);

for my $r (@rounds)
{
	my ($j, $point, $how) = @$r;
	my $J = $job{$j};
	my $what = "$J->{name} at $point ($how)";
	my $batch = ++$J->{batch};

	my $log = ks_hold($point);
	$J->{produce}->($batch);
	my $pid = wait_held($J->{name}, $point, $log);
	pass("$what: the job's worker ($pid) is held there");

	# What a consumer sees while the worker is held.
	my $committed = visible_of_batch($j, 'read_committed');
	if ($published_when_held{$point})
	{
		cmp_ok($committed, '>', 0, "$what: the batch's records are visible (read_committed) once Kafka committed");
	}
	else
	{
		is($committed, '0', "$what: none of the batch's records is visible (read_committed) before Kafka commits");
	}
	if ($produced_when_held{$point})
	{
		cmp_ok(visible_of_batch($j, 'read_uncommitted'), '>', 0,
			"$what: the produced records are in the log (read_uncommitted), in an open transaction");
	}
	if ($point eq 'checkpoint_after_commit')
	{
		cmp_ok(ks_sink_row($J->{name})->{pending_records}, '>', 0, "$what: the committed epoch has records pending");
	}

	my $crash_log = pg_log_size();
	if ($how eq 'kill')
	{
		is(kill('KILL', $pid), 1, "$what: SIGKILL to the held worker");
		wait_until('the server restarted after the crash',
			sub { pg_log_since($crash_log) =~ /database system is ready to accept connections/ }, 120);
		wait_server_ready();
	}
	else
	{
		$node->stop('immediate');
		$node->start;
		wait_server_ready();
		pass("$what: the server stopped immediately and started again");
	}
	ks_release($crash_log);

	my $aborted = check_exact($j, $what);
	if ($produced_when_held{$point})
	{
		cmp_ok($aborted, '>', $aborted{$j}, "$what: the cut transaction's records were aborted (read_uncommitted sees them, read_committed not)");
	}
	else
	{
		note("$what: aborted records seen so far: $aborted (before: $aborted{$j})");
	}
	$aborted{$j} = $aborted;
}

# ---------------------------------------------------------------------------
# In the end: every record once, nothing dead-lettered, no error.
# ---------------------------------------------------------------------------

# A last event (filtered out) moves the watermark past every window.
$b_watermark = 100 * ($job{b}{batch} + 1);
kcat_produce($in_b, [ sprintf(qq(tick\t{"customer": "tick", "ts": "%s", "amount": 0}), ev_time($b_watermark)) ]);
for my $j (qw(a b))
{
	check_exact($j, "after the sweep, $j");
	is(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.job USING (job_id) WHERE name = '$job{$j}{name}'"), '0',
		"$job{$j}{name}: no dead letters");
	is(psql("SELECT count(*) FROM mailer.kafka_sinks s WHERE job = '$job{$j}{name}' AND to_jsonb(s)->>'last_error' IS NOT NULL"), '0',
		"$job{$j}{name}: mailer.kafka_sinks shows no error");
}
check_keys('after the sweep');
is(psql("SELECT count(*) FROM t130_got_a"), psql("SELECT count(*) FROM t130_in_a_rows WHERE (v::jsonb->>'amount')::numeric >= 5"),
	'the stateless job published each order that passed the filter once');
is(psql("SELECT sum((v::jsonb->>'n')::bigint) FROM t130_got_b"), 60 * $job{b}{batch}, 'the windows count every event once');
is(psql("SELECT count(*) FROM t130_got_b"), psql("SELECT count(*) FROM (SELECT DISTINCT customer, date_bin('10 seconds', ts, '1970-01-01') FROM t130_events) w"),
	'every window was published once');

# ---------------------------------------------------------------------------
# delivery at_least_once: no transaction, so a crash after the records
# were acknowledged and before the outbox forgot them sends them again
# (documented); nothing is lost.
# ---------------------------------------------------------------------------

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
my $in_c = ks_topic('t130_in_c', 1);
my $out_c = ks_topic('t130_out_c', 1);
psql(qq{SELECT mailer.create_job('j130_c', \$\${
  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$in_c", "format": "json", "start": "earliest"},
  "steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}}],
  "sink": @{[ ks_sink($out_c, delivery => '"at_least_once"') ]},
  "checkpoint": {"interval": "300 milliseconds"}}\$\$)});
my $orders_c = sub {
	my ($from, $to) = @_;
	kcat_produce($in_c, [ map { qq(k\t{"order_id": $_}) } $from .. $to ]);
};
my $got_c = sub {
	ks_read_into('t130_got_c', $out_c);
	return q{SELECT (v::jsonb->>'order_id')::bigint AS id FROM t130_got_c};
};
$orders_c->(1, 100);
is(ks_wait_job('j130_c'), 'running', 'at_least_once: the first batch committed');
ks_wait_published('j130_c');
ks_same($got_c->(), 'SELECT generate_series(1, 100)::bigint', 'at_least_once: without a crash, each record once');
is(ks_sink_row('j130_c')->{delivery}, 'at_least_once', 'at_least_once: mailer.kafka_sinks shows the delivery');

my $log = ks_hold('kafka_sink_after_produce');
$orders_c->(101, 200);
my $pid = wait_held('j130_c', 'kafka_sink_after_produce', $log);
ok($pid, 'at_least_once: the worker is held after its records were acknowledged');
$got_c->();
cmp_ok(psql("SELECT count(*) FROM t130_got_c WHERE (v::jsonb->>'order_id')::bigint > 100"), '>', 0,
	'at_least_once: they are visible at once (no transaction)');
my $crash_log = pg_log_size();
is(kill('KILL', $pid), 1, 'at_least_once: SIGKILL to the held worker');
wait_until('the server restarted after the crash',
	sub { pg_log_since($crash_log) =~ /database system is ready to accept connections/ }, 120);
wait_server_ready();
ks_release($crash_log);
is(ks_wait_job('j130_c'), 'running', 'at_least_once: the second batch committed');
ks_wait_published('j130_c');
my $got = $got_c->();
is(psql("SELECT count(*) FROM ((SELECT generate_series(1, 200)::bigint) EXCEPT ALL ($got)) m"), '0',
	'at_least_once: nothing lost after the crash');
cmp_ok(psql("SELECT count(*) FROM (($got) EXCEPT ALL (SELECT generate_series(1, 200)::bigint)) x"), '>', 0,
	'at_least_once: the held records were sent again (duplicates, as documented)');
is(psql("SELECT count(*) FROM ($got) g WHERE g.id NOT BETWEEN 1 AND 200"), '0', 'at_least_once: no other record');

# ---------------------------------------------------------------------------
# A parallel job: each subtask publishes its share of an epoch with a
# transactional.id of its own; a crash cutting one subtask's transaction
# loses and repeats nothing either.
# ---------------------------------------------------------------------------

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
my $in_d = ks_topic('t130_in_d', 2);
my $out_d = ks_topic('t130_out_d', 2);
psql(qq{SELECT mailer.create_job('j130_d', \$\${
  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$in_d", "format": "json", "start": "earliest"},
  "event_time": "(value->>'ts')::timestamptz",
  "steps": [{"key_by": {"customer": "value->>'customer'"}},
            {"window": {"type": "tumbling", "size": "10 seconds", "emit": "final"}},
            {"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}],
  "sink": @{[ ks_sink($out_d) ]},
  "parallelism": 2,
  "checkpoint": {"interval": "300 milliseconds"}}\$\$)});
psql("CREATE TABLE t130_events_d (customer text, ts timestamptz, amount numeric)");
# Batch B: on each partition 30 events 3 s apart from 100 * B s, never on
# a window's end; the job's watermark is the smaller of the partitions'.
my $d_watermark;
my $produce_d = sub {
	my ($batch) = @_;
	my @rows;
	for my $p (0, 1)
	{
		my @lines;
		for my $i (0 .. 29)
		{
			my $c = 'c' . (($i + $p + $batch) % 6);
			my $ts = ev_time(100 * $batch + 0.25 + 0.5 * $p + 3 * $i);
			my $amount = sprintf('%.1f', (($batch * 13 + $i * 5 + $p) % 40) + 0.5);
			push @lines, qq($c\t{"customer": "$c", "ts": "$ts", "amount": $amount});
			push @rows, "('$c', '$ts', $amount)";
		}
		kcat_produce($in_d, \@lines, partition => $p);
	}
	psql("INSERT INTO t130_events_d VALUES " . join(', ', @rows));
	$d_watermark = 100 * $batch + 0.25 + 3 * 29;
};
my $check_d = sub {
	my ($what) = @_;
	is(ks_wait_job('j130_d'), 'running', "$what: j130_d has committed its input");
	ks_wait_published('j130_d');
	ks_read_into('t130_got_d', $out_d);
	ks_same(q{SELECT v::jsonb->>'customer', (v::jsonb->>'window_start')::timestamptz, (v::jsonb->>'n')::bigint,
	                 (v::jsonb->>'total')::numeric FROM t130_got_d},
		q{SELECT * FROM (SELECT customer, date_bin('10 seconds', ts, '1970-01-01 00:00:00+00') AS ws, count(*), sum(amount)
		                   FROM t130_events_d GROUP BY 1, 2) w
		   WHERE ws + interval '10 seconds' <= '} . ev_time($d_watermark) . q{'},
		"$what: each window of the parallel job once (read_committed)");
};
$produce_d->(1);
$check_d->('parallel, batch 1');
is(psql("SELECT count(*) || ' ' || count(DISTINCT transactional_id) FROM mailer.kafka_sinks WHERE job = 'j130_d'"), '2 2',
	'parallel: a row per subtask in mailer.kafka_sinks, each with its transactional.id');
my $d_batch = 1;
for my $point (qw(kafka_sink_after_produce kafka_sink_after_kafka_commit))
{
	my $what = "j130_d at $point (kill)";
	$log = ks_hold($point);
	$produce_d->(++$d_batch);
	$pid = test_point_wait_reached($point, $log, 120);
	like(psql("SELECT application_name FROM pg_stat_activity WHERE pid = $pid"), qr/j130_d/, "$what: a subtask of the job is held");
	$crash_log = pg_log_size();
	is(kill('KILL', $pid), 1, "$what: SIGKILL to it");
	wait_until('the server restarted after the crash',
		sub { pg_log_since($crash_log) =~ /database system is ready to accept connections/ }, 120);
	wait_server_ready();
	ks_release($crash_log);
	$check_d->($what);
}

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
kafka('delete-topic', $_) for ($in_a, $out_a, $in_b, $out_b, $in_c, $out_c, $in_d, $out_d);
done_testing();
