# Sliding windows kept as panes give exactly the rows of windows kept one
# by one.  A sum of float8 cannot be combined exactly, so a job that has one
# keeps its sliding windows one by one: each pane job runs next to such a
# reference job over the same events, and their count and bigint sum must
# agree at every step, through out-of-order and late records, allowed
# lateness, emit final and update, a stop and start (the timers are rebuilt
# from the panes), a SIGKILL of a worker mid-stream, restore_job to an
# earlier epoch, and a rescale to 2 and back to 1 (window entries beside
# new panes, read by a step that fires its windows in one scan).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use Test::More;

fresh_extension();
# Every checkpoint folds: memory_state_kinds reads the running jobs' rows,
# and a fold of a longer interval would carry new panes without one.
setting_until_exit('mailer.memory_fold_checkpoints', 1);

my $topic = unique_name('t146');
kafka('create-topic', $topic, 1);

my %jobs = (
	pf => { window => '"size": "30 seconds", "slide": "10 seconds", "allowed_lateness": "15 seconds"', backend => 'rocksdb' },
	pu => { window => '"size": "30 seconds", "slide": "10 seconds", "allowed_lateness": "15 seconds", "emit": "update"', backend => 'memory' },
	p0 => { window => '"size": "20 seconds", "slide": "5 seconds"', backend => 'rocksdb' },
);

sub create
{
	my ($name, $window, $backend, $float) = @_;
	my $aggs = '"n": "count(*)", "total": "sum((value->>\'a\')::int8)"';
	$aggs .= ', "f": "sum((value->>\'a\')::float8)"' if $float;
	psql("DROP TABLE IF EXISTS $name; CREATE TABLE $name (k text, window_start timestamptz, window_end timestamptz, "
		  . "n bigint, total numeric, " . ($float ? 'f float8, ' : '') . "PRIMARY KEY (k, window_start))");
	my $spec = qq{{"source": {"type": "kafka", "brokers": "$ENV{KAFKA_BROKERS}", "topic": "$topic", "start": "earliest"},
	 "event_time": "(value->>'ts')::timestamptz",
	 "watermark": {"max_out_of_orderness": "3 seconds"},
	 "steps": [{"key_by": {"k": "value->>'k'"}}, {"window": {"type": "sliding", $window}}, {"aggregate": {$aggs}}],
	 "sink": {"type": "table", "table": "$name"},
	 "checkpoint": {"interval": "300 milliseconds"},
	 "state": {"backend": "$backend"}}};
	psql("SELECT mailer.create_job('$name', \$spec\$$spec\$spec\$)");
}

for my $j (sort keys %jobs)
{
	create("${j}_pane", $jobs{$j}{window}, $jobs{$j}{backend}, 0);
	create("${j}_ref", $jobs{$j}{window}, $jobs{$j}{backend}, 1);
}

sub rows
{
	my ($table) = @_;
	return psql(qq{SELECT coalesce(string_agg(format('%s %s %s %s %s', k,
		extract(epoch FROM window_start - '2030-01-01 00:00:00+00')::numeric,
		extract(epoch FROM window_end - '2030-01-01 00:00:00+00')::numeric, n, total), ', ' ORDER BY k, window_start), '')
		FROM $table});
}

sub compare
{
	my ($what) = @_;
	for my $j (sort keys %jobs)
	{
		for my $s ('pane', 'ref')
		{
			is(wait_job("${j}_$s"), 'running', "$what: ${j}_$s committed");
		}
		is(psql(qq{SELECT coalesce(string_agg(format('%s %s %s %s %s', s, k,
				extract(epoch FROM window_start - '2030-01-01 00:00:00+00')::numeric, n, total), ', '), '')
			FROM ((SELECT 'pane' s, k, window_start, n, total FROM ${j}_pane
				   EXCEPT SELECT 'pane', k, window_start, n, total FROM ${j}_ref)
				  UNION ALL (SELECT 'ref', k, window_start, n, total FROM ${j}_ref
				   EXCEPT SELECT 'ref', k, window_start, n, total FROM ${j}_pane)) d}), '',
			"$what: $j rows as the windows kept one by one");
		is(job_metric("${j}_pane", 'records_late'), job_metric("${j}_ref", 'records_late'),
			"$what: $j late records alike");
	}
}

# Out of order within 4 s, some far behind (late for some windows, within
# lateness for others, past it for all).
my @events = random_events(seed => 146, partitions => 1, count => 120, step => 0.7, spread => 10,
	keys => [qw(a b c d e)], amount => sub { ($_[0] % 1000) / 10 });
my @batches = ([ @events[0 .. 39] ],
	[ { p => 0, k => 'a', t => 2, a => 7 }, { p => 0, k => 'b', t => 11, a => 3 }, @events[40 .. 59] ],
	[ @events[60 .. 79], { p => 0, k => 'c', t => 25, a => 5 }, { p => 0, k => 'z', t => 31, a => 1 } ],
	[ @events[80 .. 119] ]);

produce_events($topic, $batches[0]);
compare('first batch');
my %first_epoch = map { my $j = $_; map { ("${j}_$_" => job_metric("${j}_$_", 'last_checkpoint_epoch')) } ('pane', 'ref') } keys %jobs;
produce_events($topic, $batches[1]);
compare('late records');

# Stop and start: the timers come back from the panes.  The reference jobs
# stop too: a job that kept running could read the batch in two polls, and
# the watermark between them would make other records late than in the
# pane job, which reads it in one go after its start.
for my $name (map { ("${_}_pane", "${_}_ref") } sort keys %jobs)
{
	is(psql("SELECT mailer.stop_job('$name')"), 'stopped', "$name stopped");
}
produce_events($topic, $batches[2]);
for my $name (map { ("${_}_pane", "${_}_ref") } sort keys %jobs)
{
	psql("SELECT mailer.start_job('$name')");
}
compare('after a stop and start');

# A record far behind, alone: late for the first of its windows, within
# lateness for the others.  Written with the next batch, it would be
# judged against the watermark of whatever part of that batch the job had
# read (or a checkpoint before the kill below held), which the pane job
# and its reference need not share.
produce_events($topic, [ { p => 0, k => 'd', t => 60, a => 2 } ]);
compare('a record far behind');

# SIGKILL a pane worker mid-stream (the server restarts every job): the
# jobs resume from their checkpoints.
produce_events($topic, $batches[3]);
kill_worker('pf_pane');
compare('after a SIGKILL');

# The end of the stream: an event far ahead fires and purges everything.
produce_events($topic, [ { p => 0, k => 'e', t => 1000, a => 1 } ]);
compare('all fired');
for my $j (sort keys %jobs)
{
	cmp_ok(psql("SELECT count(*) FROM ${j}_pane"), '>', 20, "$j: windows were written");
}

# restore_job to the epoch of the first batch: the timers come from that
# epoch's panes, and the replay of every later record (in one go now: the
# watermark moves otherwise than the first time, alike for both jobs) gives
# the same windows again.
for my $name (sort keys %first_epoch)
{
	is(psql("SELECT mailer.stop_job('$name')"), 'stopped', "restore: $name stopped");
	is(psql("SELECT mailer.restore_job('$name', $first_epoch{$name})"), $first_epoch{$name},
		"restore: $name restored to the epoch of the first batch");
	psql("SELECT mailer.start_job('$name')");
}
compare('replayed from the first epoch');

is(memory_state_kinds('pu_pane'), 'L', 'a pane job keeps panes alone: no window entries, no timer keys');
is(memory_state_kinds('pu_ref'), 'W', 'a job with a float sum keeps its windows one by one, and no timer keys');
for my $j (sort keys %jobs)
{
	is(psql("SELECT mailer.stop_job('${j}_$_')"), 'stopped', "${j}_$_ stopped") for ('pane', 'ref');
}

# A restore that makes the timers of many windows (the rebuild reads the
# state in chunks): 30000 keys of open sliding windows, stopped mid-stream
# and started again; at the end of the stream every window holds its
# records.
psql("DROP TABLE IF EXISTS t146_many; CREATE TABLE t146_many (k text, window_start timestamptz,
	  window_end timestamptz, n bigint, PRIMARY KEY (k, window_start))");
psql(q{SELECT mailer.create_job('t146_many', $spec${"source": {"type": "generator", "events": 60000, "keys": 30000,
	"rate": 20000, "start_time": "2030-01-01 00:00:00+00", "step": "1 millisecond"},
	"steps": [{"key_by": {"k": "value->>'customer_id'"}}, {"window": {"type": "sliding", "size": "2 hours", "slide": "1 hour"}},
		{"aggregate": {"n": "count(*)"}}],
	"sink": {"type": "table", "table": "t146_many"},
	"checkpoint": {"interval": "300 milliseconds"}, "state": {"backend": "rocksdb"}}$spec$)});
wait_for_sql('t146_many read over 30000 records',
	q{SELECT records_in > 30000 FROM mailer.metrics WHERE name = 't146_many'}, 't', 120);
is(psql("SELECT mailer.stop_job('t146_many')"), 'stopped', 't146_many stopped mid-stream');
is(psql("SELECT count(*) FROM t146_many"), '0', 'no window fired yet');
psql("SELECT mailer.start_job('t146_many')");
is(wait_job('t146_many', '5 minutes'), 'finished', 't146_many resumed and finished');
is(psql("SELECT (count(*) = 2 * count(DISTINCT k)) || ' ' || sum(n) FROM t146_many"), 'true 120000',
	'two windows per key, every record in both');

# Rescale from 1 to 2 (panes are kept at parallelism 1 only: a parallel
# job restores the lowest of its subtasks' watermarks, and pane windows
# have no "fired" of their own).  The pane job's panes become window
# entries; the windows fired before the rescale are not fired again, and
# those still open gather the records after it.  Both jobs on 2
# partitions, the reference alike.
my $topic2 = unique_name('t146r');
kafka('create-topic', $topic2, 2);
$topic = $topic2;
create('rs_pane', '"size": "30 seconds", "slide": "10 seconds", "allowed_lateness": "15 seconds"', 'memory', 0);
create('rs_ref', '"size": "30 seconds", "slide": "10 seconds", "allowed_lateness": "15 seconds"', 'memory', 1);
%jobs = (rs => {});
my @ev2 = random_events(seed => 1462, partitions => 2, count => 160, step => 0.5, spread => 8,
	keys => [qw(a b c d e f)], amount => sub { $_[0] % 97 });
produce_events($topic2, [ @ev2[0 .. 79] ]);
compare('rescale: before, at parallelism 1');
is(memory_state_kinds('rs_pane'), 'L', 'rescale: panes at parallelism 1');
for my $name ('rs_pane', 'rs_ref')
{
	is(psql("SELECT mailer.stop_job('$name')"), 'stopped', "rescale: $name stopped");
	psql("SELECT mailer.alter_job('$name', jsonb_set(spec, '{parallelism}', '2')) FROM mailer.jobs WHERE name = '$name'");
	psql("SELECT mailer.start_job('$name')");
}
produce_events($topic2, [ @ev2[80 .. 159] ]);
compare('rescale: after, at parallelism 2');
is(memory_state_kinds('rs_pane'), 'W', 'rescale: window entries at parallelism 2, the panes gone');

# And back to 1: the window entries stay beside the new panes, as state of
# format 1 does, and a watermark step that fires the windows in one scan of
# their panes reads those entries first.  Records on both partitions from
# 20 s before the last one, into windows the entries hold: partition 0's
# first, read by both jobs before partition 1's are written.  One consumer
# of two partitions may get either first, whatever order they were written
# in, and the order decides which records are late: partition 1 has never
# spoken, so partition 0's records do not move the watermark, but
# partition 1's move it up to partition 0's restored one, past the end and
# the lateness of windows that partition 0's first records fall in.
for my $name ('rs_pane', 'rs_ref')
{
	is(psql("SELECT mailer.stop_job('$name')"), 'stopped', "rescale back: $name stopped");
	psql("SELECT mailer.alter_job('$name', jsonb_set(spec, '{parallelism}', '1')) FROM mailer.jobs WHERE name = '$name'");
	psql("SELECT mailer.start_job('$name')");
}
my $t_last = (sort { $b <=> $a } map { $_->{t} } @ev2[0 .. 159])[0];
my @ev3 = map { { %$_, t => $_->{t} + $t_last - 20 } }
  random_events(seed => 1463, partitions => 2, count => 60, step => 0.5, spread => 8,
	keys => [qw(a b c d e f)], amount => sub { $_[0] % 89 });
produce_events($topic2, [ grep { $_->{p} == 0 } @ev3 ]);
compare('rescale: back to 1, partition 0 (the watermark held by partition 1)');
produce_events($topic2, [ grep { $_->{p} == 1 } @ev3 ]);
compare('rescale: back to 1, window entries beside new panes');
is(memory_state_kinds('rs_pane'), 'LW', 'rescale back: new panes beside the window entries left');
produce_events($topic2, [ { p => 0, k => 'e', t => 1000, a => 1 }, { p => 1, k => 'f', t => 1000, a => 1 } ]);
compare('rescale: all fired');
cmp_ok(psql("SELECT count(*) FROM rs_pane"), '>', 20, 'rescale: windows were written');
psql("SELECT mailer.stop_job('$_')") for ('rs_pane', 'rs_ref');

done_testing();
