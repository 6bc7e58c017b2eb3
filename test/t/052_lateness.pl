# Firing, allowed lateness and emit policies.  Tumbling windows of 10 s,
# max_out_of_orderness 5 s, one partition, three jobs on the same events:
#   lateness10: allowed_lateness 10 s, emit final
#   lateness0:  allowed_lateness 0, emit final
#   update0:    allowed_lateness 0, emit update
# A window's row appears when the watermark reaches its end (emit update:
# already at the checkpoint after each change); a record for a fired window
# within lateness updates its row; after end + lateness the window is purged
# and a record for it is late: a dead letter with stage 'late', counted in
# records_late, never a row.  Then session windows: late records that bridge
# two fired sessions in the same checkpoint interval leave only the merged
# row in the sink.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my $topic = unique_name('t052');
kafka('create-topic', $topic, 1);

psql('DROP TABLE IF EXISTS out_p, out_ps, out_b');
window_tables(qw(out_l10 out_l0 out_u0 out_s));

my %table = (lateness10 => 'out_l10', lateness0 => 'out_l0', update0 => 'out_u0');
create_window_job('lateness10', $topic, table => 'out_l10',
	window => '{"type": "tumbling", "size": "10 seconds", "allowed_lateness": "10 seconds"}');
create_window_job('lateness0', $topic, table => 'out_l0', backend => 'memory',
	window => '{"type": "tumbling", "size": "10 seconds"}');
create_window_job('update0', $topic, table => 'out_u0',
	window => '{"type": "tumbling", "size": "10 seconds", "emit": "update"}');
my @jobs = sort keys %table;

# Rows as "k start end n total", times in seconds after the base.
sub rows
{
	my ($table) = @_;
	return psql(qq{SELECT string_agg(format('%s %s %s %s %s', k,
		extract(epoch FROM window_start - '2030-01-01 00:00:00+00')::int,
		extract(epoch FROM window_end - '2030-01-01 00:00:00+00')::int, n, total), ', ' ORDER BY k, window_start)
		FROM $table});
}

sub step
{
	my ($what, $events, %want) = @_;
	produce_events($topic, [ map { { p => 0, k => $_->[0], t => $_->[1], a => $_->[2] } } @$events ]);
	for my $job (@jobs)
	{
		is(wait_job($job), 'running', "$what: $job committed");
		is(rows($table{$job}), $want{$job}, "$what: $job rows");
	}
}

# Watermark 2 - 5 = -3: no window has ended.
step('open window', [ [ 'a', 1, 1 ], [ 'a', 2, 2 ] ],
	lateness10 => '', lateness0 => '', update0 => 'a 0 10 2 3');
is(job_metric('lateness10', 'watermark'), psql("SELECT '" . ev_time(-3) . "'::timestamptz"),
	'watermark: largest event time minus max_out_of_orderness');

# Watermark 15: [0,10) fires in every job.
step('fired', [ [ 'a', 20, 4 ] ],
	lateness10 => 'a 0 10 2 3', lateness0 => 'a 0 10 2 3', update0 => 'a 0 10 2 3, a 20 30 1 4');

# Watermark still 15: within lateness for lateness10 (purge at 20), too late
# for the others (purged at 10).
step('within lateness', [ [ 'a', 5, 8 ] ],
	lateness10 => 'a 0 10 3 11', lateness0 => 'a 0 10 2 3', update0 => 'a 0 10 2 3, a 20 30 1 4');
is(job_metric('lateness0', 'records_late'), '1', 'lateness0: the record is late');
is(job_metric('lateness10', 'records_late'), '0', 'lateness10: the record updated the fired window');

# Watermark 21 passes 10 + 10: lateness10 purges [0,10); a record for it is
# late now, and a record for a window nobody has seen, too.
step('purged', [ [ 'a', 26, 16 ] ],
	lateness10 => 'a 0 10 3 11', lateness0 => 'a 0 10 2 3', update0 => 'a 0 10 2 3, a 20 30 2 20');
step('too late', [ [ 'a', 6, 32 ] ],
	lateness10 => 'a 0 10 3 11', lateness0 => 'a 0 10 2 3', update0 => 'a 0 10 2 3, a 20 30 2 20');
is(job_metric('lateness10', 'records_late'), '1', 'lateness10: records_late = 1');
is(job_metric('lateness0', 'records_late'), '2', 'lateness0: records_late = 2');
is(job_metric('update0', 'records_late'), '2', 'update0: records_late = 2');
is(psql(q{SELECT string_agg(format('%s %s %s %s', d.stage, d.partition, d."offset", convert_from(d.value, 'UTF8')::jsonb->>'ts'), ', ' ORDER BY d."offset")
		  FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) WHERE j.name = 'lateness10'}),
	'late 0 5 ' . ev_time(6), 'lateness10: the too-late record is a dead letter with stage late');
like(psql(q{SELECT d.error FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) WHERE j.name = 'lateness10'}),
	qr/too late/, 'its error says it is too late');
is(psql(q{SELECT string_agg(d."offset"::text, ',' ORDER BY d."offset") FROM mailer.dead_letters d
		  JOIN mailer.job j USING (job_id) WHERE j.name = 'lateness0' AND d.stage = 'late'}),
	'3,5', 'lateness0: both late records dead-lettered');
for my $job (@jobs)
{
	is(job_metric($job, 'records_dead_lettered'), '0', "$job: late records are not counted as failed ones");
}

# Sessions (gap 10 s, allowed_lateness 30 s): c at 100 and 115 are two
# sessions, both fired when d at 132 moves the watermark to 127.  Then c at
# 108, late but within lateness, bridges them.  The checkpoint interval is
# long: firing, the merge and the deletion of the replaced row all go to the
# sink in the one checkpoint stop_job takes.
my $stopic = unique_name('t052s');
kafka('create-topic', $stopic, 1);
create_window_job('session052', $stopic, table => 'out_s', interval => '1 hour',
	window => '{"type": "session", "gap": "10 seconds", "allowed_lateness": "30 seconds"}');
my $epoch0 = job_metric('session052', 'last_checkpoint_epoch');
produce_events($stopic, [ map { { p => 0, k => $_->[0], t => $_->[1], a => $_->[2] } } ([ 'c', 100, 1 ], [ 'c', 115, 2 ], [ 'd', 132, 5 ]) ]);
wait_watermark('session052', ev_time(127));
wait_for_sql('session052 read 3 records', q{SELECT records_in FROM mailer.metrics WHERE name = 'session052'}, '3');
produce_events($stopic, [ { p => 0, k => 'c', t => 108, a => 4 } ]);
wait_for_sql('session052 read the bridging record', q{SELECT records_in FROM mailer.metrics WHERE name = 'session052'}, '4');
is(job_metric('session052', 'last_checkpoint_epoch'), $epoch0, 'no checkpoint taken in between');
is(psql("SELECT mailer.stop_job('session052')"), 'stopped', 'session052 stopped with a final checkpoint');
is(rows('out_s'), 'c 100 125 3 7', 'the merged session replaces both fired rows');
is(job_metric('session052', 'records_late'), '0', 'the bridging record was not late');

# A fired window updated within its lateness and purged before the next
# checkpoint: the update still reaches the sink.  Tumbling 10 s, lateness
# 10 s, a long checkpoint interval: a at 1 and 20 fire [0,10) (watermark
# 15), a at 5 updates it, a at 26 moves the watermark to 21 and purges it;
# all of it goes to the sink with stop_job's checkpoint.  Same for a session
# (gap 10 s, lateness 10 s): b at 100, d at 120 fires [100,110), b at 105
# updates it, d at 131 purges it.
my $ptopic = unique_name('t052p');
kafka('create-topic', $ptopic, 1);
psql('CREATE TABLE out_p (LIKE out_l10 INCLUDING ALL); CREATE TABLE out_ps (LIKE out_l10 INCLUDING ALL)');
create_window_job('purge052', $ptopic, table => 'out_p', interval => '1 hour',
	window => '{"type": "tumbling", "size": "10 seconds", "allowed_lateness": "10 seconds"}');
create_window_job('purges052', $ptopic, table => 'out_ps', interval => '1 hour', backend => 'memory',
	window => '{"type": "session", "gap": "10 seconds", "allowed_lateness": "10 seconds"}');
my $n = 0;
for my $e ([ 'a', 1 ], [ 'a', 20 ], [ 'a', 5 ], [ 'a', 26 ], [ 'b', 100 ], [ 'd', 120 ], [ 'b', 105 ], [ 'd', 131 ])
{
	produce_events($ptopic, [ { p => 0, k => $e->[0], t => $e->[1], a => 1 } ]);
	$n++;
	for my $job ('purge052', 'purges052')
	{
		wait_for_sql("$job read $n records", "SELECT records_in FROM mailer.metrics WHERE name = '$job'", $n);
		wait_watermark($job, ev_time($e->[1] - 5));
	}
}
is(psql("SELECT mailer.stop_job('$_')"), 'stopped', "$_ stopped") for ('purge052', 'purges052');
is(job_metric($_, 'records_late'), '0', "$_: nothing late") for ('purge052', 'purges052');
is(psql(q{SELECT n FROM out_p WHERE k = 'a' AND window_start = '2030-01-01 00:00:00+00'}), '2',
	'tumbling: the update within lateness is written though the window was purged before the checkpoint');
is(psql(q{SELECT format('%s %s', extract(epoch FROM window_end - '2030-01-01 00:00:00+00')::int, n) FROM out_ps WHERE k = 'b'}), '115 2',
	'session: the update within lateness is written though the session was purged before the checkpoint');

# Exactly at the boundary, no out-of-orderness, no lateness: a watermark
# 1 ms short of a window's end does not fire it, one equal to its end does
# (and purges it: a record for it is late from then on).
my $btopic = unique_name('t052b');
kafka('create-topic', $btopic, 1);
psql('CREATE TABLE out_b (LIKE out_l10 INCLUDING ALL)');
create_window_job('boundary052', $btopic, table => 'out_b', ooo => '0 seconds',
	window => '{"type": "tumbling", "size": "10 seconds"}');
my @boundary = (
	'watermark 9.999: [0,10) open' => [ [ 'e', 5, 1 ], [ 'e', 9.999, 2 ] ] => '',
	'watermark 10: [0,10) fired' => [ [ 'f', 10, 4 ] ] => 'e 0 10 2 3',
	'a record at 9.999 after that: late' => [ [ 'e', 9.999, 8 ] ] => 'e 0 10 2 3');
while (my ($what, $events, $want) = splice(@boundary, 0, 3))
{
	produce_events($btopic, [ map { { p => 0, k => $_->[0], t => $_->[1], a => $_->[2] } } @$events ]);
	is(wait_job('boundary052'), 'running', "boundary052 committed ($what)");
	is(rows('out_b'), $want, "boundary052: $what");
}
is(job_metric('boundary052', 'records_late'), '1', 'boundary052: a record for a window ended at the watermark is late');
is(psql("SELECT mailer.stop_job('boundary052')"), 'stopped', 'boundary052 stopped');

is(psql("SELECT mailer.stop_job('$_')"), 'stopped', "$_ stopped") for @jobs;

done_testing();
