# "sinks": a table and its Kafka changelog get the same rows in the same
# epochs.  A tumbling-window job (emit final) writes each window's row to
# both; its worker is killed inside the Kafka transaction and right after
# the Kafka commit.  At the end the table holds the windows SQL computes,
# and the topic, read read_committed, holds exactly the table's rows, each
# once, while read_uncommitted shows the aborted copies were there.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my $in = unique_name('t134_in');
my $out = unique_name('t134_out');
kafka('create-topic', $in, 1);
kafka('create-topic', $out, 1);
window_tables('t134_windows');

my $spec = sprintf(<<'JSON', $BROKERS, $in, $BROKERS, $out);
{"source": {"type": "kafka", "brokers": "%s", "topic": "%s"},
 "event_time": "(value->>'ts')::timestamptz",
 "watermark": {"max_out_of_orderness": "1 second"},
 "steps": [{"filter": "value->>'k' <> 'end'"},
           {"key_by": {"k": "value->>'k'"}},
           {"window": {"type": "tumbling", "size": "10 seconds"}},
           {"aggregate": {"n": "count(*)", "total": "sum((value->>'a')::numeric)"}}],
 "sinks": [{"type": "table", "table": "t134_windows"},
           {"type": "kafka", "brokers": "%s", "topic": "%s"}],
 "checkpoint": {"interval": "200 milliseconds"}}
JSON
psql("SELECT mailer.create_job('t134', \$spec\$$spec\$spec\$)");
like(psql(q{SELECT mailer.describe_job(spec) FROM mailer.job WHERE name = 't134'}),
	qr/Changelog \(the same rows, the same epochs\): kafka/, 'describe_job shows the changelog');

# Three phases of events, each closing the windows of the one before.
my @events;
for my $phase (0 .. 2)
{
	push @{ $events[$phase] }, map { { p => 0, k => "k" . ($_ % 5), t => $phase * 100 + $_ * 0.5, a => $_ } } 0 .. 59;
}
events_table('ev134', [ map { @$_ } @events ]);

my $n_killed = 0;
for my $phase (0 .. 2)
{
	my $point = (undef, 'kafka_sink_after_produce', 'kafka_sink_after_kafka_commit')[$phase];
	# Held only once the worker has read and published everything before:
	# a publish still under way (a new worker's first, of an empty outbox)
	# would reach the point in a transaction holding no record, and the
	# kill would abort nothing.  This phase's events close the last
	# phase's windows, so its publish holds records.
	is(wait_job('t134', 180), 'running', "$point: the job caught up before the point is held") if $point;
	my $log = pg_log_size();
	test_point_hold($point) if $point;
	produce_events($in, $events[$phase]);
	next unless $point;
	my $pid = test_point_wait_reached($point, $log, 120);
	ok($pid, "$point: the worker is held there");
	is(kill('KILL', $pid), 1, "$point: SIGKILL");
	$n_killed++;
	wait_until('the server restarted after the kill',
		sub { pg_log_since($log) =~ /database system is ready to accept connections/ }, 120);
	wait_server_ready();
	test_point_release();
	# A worker forked before its SIGHUP handler is set misses a reload:
	# the next point is set once the new worker runs.
	wait_until('the job runs again',
		sub { psql(q{SELECT state = 'running' AND pid IS NOT NULL FROM mailer.jobs WHERE name = 't134'}) eq 't' }, 120);
}
# An event far later closes every window.
produce_events($in, [ { p => 0, k => 'end', t => 1000, a => 0 } ]);
is(wait_job('t134', 180), 'running', 'wait_job covers every event (and the publish)');

same_rows('SELECT k, window_start, window_end, n, total FROM t134_windows', want_tumbling('ev134', '10 seconds'),
	"the table holds every window once after $n_killed kills");

# The topic, read_committed, into a table: exactly the table's rows.
my $read = sub {
	my ($isolation) = @_;
	my ($got, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-b', $BROKERS, '-C', '-t', $out, '-o', 'beginning', '-e', '-q',
			'-X', "isolation.level=$isolation", '-f', "%s\n" ], '>', \$got, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat failed: $err\n";
	return [ split /\n/, $got ];
};
my $committed = $read->('read_committed');
psql("DROP TABLE IF EXISTS got134; CREATE TABLE got134 (v jsonb)");
psql("INSERT INTO got134 VALUES " . join(', ', map { "('$_')" } @$committed)) if @$committed;
same_rows(q{SELECT v->>'k', (v->>'window_start')::timestamptz, (v->>'window_end')::timestamptz,
			(v->>'n')::bigint, (v->>'total')::numeric FROM got134},
	'SELECT k, window_start, window_end, n, total FROM t134_windows',
	'the changelog holds exactly the table\'s rows, each once');
cmp_ok(scalar(@{ $read->('read_uncommitted') }), '>', scalar(@$committed),
	'read_uncommitted also shows the aborted transaction\'s records');

psql("SELECT mailer.drop_job('t134')");
done_testing();
