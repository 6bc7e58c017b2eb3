# Session windows (gap 10 s) on a 3-partition topic with out-of-order
# input: once the watermark has passed every session, the sink equals the
# sessions computed in plain SQL with a window function over the same events
# (a new session where the gap to the key's previous event is >= 10 s).
# Events exactly one gap apart split; an event that bridges two sessions
# merges them, and the sink keeps only the merged row, also when the parts'
# rows were already written (emit "update").  One job emits "final" (RocksDB),
# the other "update" (memory backend).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my $topic = unique_name('t051');
kafka('create-topic', $topic, 3);

# Per partition, 60 events 0.5 to 9 s apart, each up to 4 s early (the bound
# is 5 s), over 6 keys: per key, a mix of gaps shorter and longer than 10 s.
my @random = random_events(seed => 51, partitions => 3, count => 60, step => 0.5, spread => 85,
	keys => [ map { "k$_" } 0 .. 5 ], amount => sub { sprintf('%.2f', ($_[0] % 10000) / 100) });
my $random_end = (sort { $b <=> $a } map { $_->{t} } @random)[0];
cmp_ok($random_end, '<', 990, 'the random events end before the hand-made ones');

# Hand-made sessions, far after the random ones.  While partition 2 has
# seen nothing past the random events, the job's watermark stays below
# them, so none is late.
#   x: 1000 and 1010, exactly one gap apart: two sessions.
#   y: 1000, 1012, then 1008 bridges [1000,1010) and [1012,1022).
#   z: 1020, then 1016 moves the session's start back, not its end.
#   w: 1045 first (another partition), then 1030 and 1038, which bridges
#      [1030,1040) and [1045,1055): the merged session keeps the later
#      part's end.
my @phase1 = ({ p => 1, k => 'w', t => 1045, a => 4 });
my @phase2 = (
	{ p => 0, k => 'x', t => 1000, a => 1 },
	{ p => 0, k => 'y', t => 1000, a => 10 },
	{ p => 0, k => 'x', t => 1010, a => 2 },
	{ p => 0, k => 'y', t => 1012, a => 20 },
	{ p => 0, k => 'z', t => 1020, a => 100 },
	{ p => 0, k => 'w', t => 1030, a => 1 });
my @phase3 = (
	{ p => 0, k => 'y', t => 1008, a => 30 },
	{ p => 0, k => 'z', t => 1016, a => 200 },
	{ p => 0, k => 'w', t => 1038, a => 2 });
events_table('ev051', [ @random, @phase1, @phase2, @phase3 ]);

window_tables(qw(sessions_final sessions_update));

my $filter = q[{"filter": "value->>'k' <> 'end'"}];
create_window_job('final051', $topic, table => 'sessions_final', backend => 'rocksdb',
	window => '{"type": "session", "gap": "10 seconds"}', extra_steps => $filter);
create_window_job('update051', $topic, table => 'sessions_update', backend => 'memory',
	window => '{"type": "session", "gap": "10 seconds", "emit": "update"}', extra_steps => $filter);
my @jobs = ('final051', 'update051');

produce_events($topic, [ @random, @phase1 ]);
is(wait_job($_), 'running', "$_: random events committed") for @jobs;
produce_events($topic, \@phase2);
is(wait_job($_), 'running', "$_: hand-made sessions committed") for @jobs;

# emit "update": the open sessions' rows are in the sink already.
my $hand = q{SELECT k, extract(epoch FROM window_start - '2030-01-01 00:00:00+00')::int AS s,
	extract(epoch FROM window_end - '2030-01-01 00:00:00+00')::int AS e, n, total FROM %s
	WHERE k IN ('w', 'x', 'y', 'z') ORDER BY k, s};
is(psql(sprintf($hand, 'sessions_update')),
	join("\n", 'w|1030|1040|1|1', 'w|1045|1055|1|4', 'x|1000|1010|1|1', 'x|1010|1020|1|2',
		'y|1000|1010|1|10', 'y|1012|1022|1|20', 'z|1020|1030|1|100'),
	'emit update: open sessions written at the checkpoint, split at exactly one gap');
is(psql(sprintf($hand, 'sessions_final')), '', 'emit final: no open session written');

produce_events($topic, \@phase3);
is(wait_job($_), 'running', "$_: bridging events committed") for @jobs;
is(psql(sprintf($hand, 'sessions_update')),
	join("\n", 'w|1030|1055|3|7', 'x|1000|1010|1|1', 'x|1010|1020|1|2', 'y|1000|1022|3|60',
		'z|1016|1030|2|300'),
	'emit update: merged sessions replace the rows of their parts');

# End markers far in the future on every partition fire every session.
my $end = 100000;
produce_events($topic, [ map { { p => $_, k => 'end', t => $end } } 0 .. 2 ]);
for my $job (@jobs)
{
	wait_watermark($job, ev_time($end - 5));
	is(wait_job($job), 'running', "$job: end markers committed");
	is(job_metric($job, 'records_late'), '0', "$job: no record late");
}
is(psql('SELECT count(*) FROM mailer.dead_letters'), '0', 'no dead letters');

for my $table ('sessions_final', 'sessions_update')
{
	is(psql(sprintf($hand, $table)),
		join("\n", 'w|1030|1055|3|7', 'x|1000|1010|1|1', 'x|1010|1020|1|2', 'y|1000|1022|3|60',
			'z|1016|1030|2|300'),
		"$table: the hand-made sessions, merged and split");
	same_rows("SELECT k, window_start, window_end, n, total FROM $table", want_sessions('ev051', '10 seconds'),
		"$table: sessions equal the SQL computation over the same events");
}
cmp_ok(psql('SELECT count(*) FROM sessions_final'), '>=', 20, 'many sessions emitted');

is(psql("SELECT mailer.stop_job('$_')"), 'stopped', "$_ stopped") for @jobs;

# A key whose only session was purged starts a new one before the next
# checkpoint: the new session is kept.  x at 1; y at 20 fires and purges
# x's [1,11); x at 30 opens [30,40); a checkpoint (stop_job) and a restart;
# y at 50 fires [30,40).  On both backends.
my $rtopic = unique_name('t051r');
kafka('create-topic', $rtopic, 1);
psql('DROP TABLE IF EXISTS sessions_again_r, sessions_again_m;
	CREATE TABLE sessions_again_r (LIKE sessions_final INCLUDING ALL);
	CREATE TABLE sessions_again_m (LIKE sessions_final INCLUDING ALL)');
my %again = (again_r => [ 'sessions_again_r', 'rocksdb' ], again_m => [ 'sessions_again_m', 'memory' ]);
for my $job (sort keys %again)
{
	create_window_job($job, $rtopic, table => $again{$job}[0], backend => $again{$job}[1], interval => '1 hour',
		window => '{"type": "session", "gap": "10 seconds"}');
}
my $read = 0;
for my $e ([ 'x', 1 ], [ 'y', 20 ], [ 'x', 30 ], 'restart', [ 'y', 50 ])
{
	if (!ref $e)
	{
		for my $job (sort keys %again)
		{
			is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job stopped (a checkpoint)");
			psql("SELECT mailer.start_job('$job')");
		}
		next;
	}
	produce_events($rtopic, [ { p => 0, k => $e->[0], t => $e->[1], a => 1 } ]);
	$read++;
	for my $job (sort keys %again)
	{
		wait_for_sql("$job read $read records", "SELECT records_in FROM mailer.metrics WHERE name = '$job' AND state = 'running'", $read);
		wait_watermark($job, ev_time($e->[1] - 5));
	}
}
for my $job (sort keys %again)
{
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job stopped");
	is(psql(sprintf($hand, $again{$job}[0])), join("\n", 'x|1|11|1|1', 'x|30|40|1|1', 'y|20|30|1|1'),
		"$job: the session that followed a purged one is kept");
}

done_testing();
