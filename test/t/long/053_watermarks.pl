# Watermarks on a 3-partition topic, tumbling windows of 10 s,
# max_out_of_orderness 5 s, two jobs on the same events:
#   held053:  no idle_timeout: a silent partition holds the watermark back
#   idle053:  idle_timeout 10 s: the silent partition is idle after 10 s
#             and stops holding it back; it rejoins when it speaks again.
# Per partition and per job the watermark is shown in
# mailer.partition_metrics, the job's in mailer.metrics; it never moves
# backwards, and it survives a restart (it is in the checkpoint).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerCluster;
use MailerTest;
use Test::More;

# On a server of its own (MailerCluster), which it restarts.
mailer_node();
fresh_extension();

my $topic = unique_name('t053');
kafka('create-topic', $topic, 3);

window_tables(qw(out_held out_idle));
# Heartbeats (key hb, filtered out) keep a partition active without
# touching any window: a filtered record still moves its partition's clock.
my $filter = q[{"filter": "value->>'k' <> 'hb'"}];
create_window_job('held053', $topic, table => 'out_held', extra_steps => $filter,
	window => '{"type": "tumbling", "size": "10 seconds"}');
create_window_job('idle053', $topic, table => 'out_idle', idle => '10 seconds', backend => 'memory',
	extra_steps => $filter, window => '{"type": "tumbling", "size": "10 seconds"}');
my @jobs = ('held053', 'idle053');
my %table = (held053 => 'out_held', idle053 => 'out_idle');

sub ts { return psql("SELECT '" . ev_time($_[0]) . "'::timestamptz") }

# "partition:watermark in seconds after the base:idle" for each partition.
sub partitions
{
	my ($job, @which) = @_;
	my $only = @which ? 'AND partition IN (' . join(', ', @which) . ')' : '';
	return psql(qq{SELECT string_agg(format('%s:%s:%s', partition,
		coalesce(extract(epoch FROM watermark - '2030-01-01 00:00:00+00')::int::text, '-'), idle), ' ' ORDER BY partition)
		FROM mailer.partition_metrics WHERE name = '$job' $only});
}

sub windows
{
	my ($table) = @_;
	return psql(qq{SELECT coalesce(string_agg(format('%s@%s', k, extract(epoch FROM window_start - '2030-01-01 00:00:00+00')::int), ' '
		ORDER BY k, window_start), '') FROM $table});
}

sub produce
{
	produce_events($topic, [ map { { p => $_->[0], k => $_->[1], t => $_->[2] } } @_ ]);
}

# Partition 2 speaks once, at 0; partitions 0 and 1 go on to 30.
produce([ 2, 'c', 0 ]);
produce([ 0, 'a', 1 ], [ 0, 'a', 12 ], [ 0, 'a', 30 ]);
produce([ 1, 'b', 3 ], [ 1, 'b', 15 ], [ 1, 'b', 30 ]);
is(wait_job($_), 'running', "$_ committed the first events") for @jobs;
is(job_metric($_, 'watermark'), ts(-5), "$_: partition 2 holds the watermark at 0 - 5") for @jobs;

# Partitions 0 and 1 keep speaking (heartbeats), partition 2 stays silent:
# after 10 s of wall clock it is idle for idle053, whose watermark goes to
# 30 - 5, and the windows ending by 25 fire.
wait_until('partition 2 idle in idle053', sub {
	produce([ 0, 'hb', 30 ], [ 1, 'hb', 30 ]);
	psql(q{SELECT idle FROM mailer.partition_metrics WHERE name = 'idle053' AND partition = 2}) eq 't';
}, 60);
wait_watermark('idle053', ev_time(25));
is(job_metric('idle053', 'watermark'), ts(25), 'idle053: the idle partition no longer holds the watermark');
is(partitions('idle053', 1, 2), '1:25:f 2:-5:t', 'idle053: per-partition watermarks, partition 2 idle');
wait_for_sql('idle053 writes the windows ending by 25', 'SELECT count(*) FROM out_idle', '5', 30);
is(windows('out_idle'), 'a@0 a@10 b@0 b@10 c@0', 'idle053: windows ending by 25 written');

# Now no more heartbeats: partition 0 moves to 60, partition 1 falls silent
# too.  Once it is idle, idle053's watermark is partition 0's, 55: windows
# fire without any new input, and their rows are written all the same.
produce([ 0, 'a', 60 ]);
wait_watermark('idle053', ev_time(55), 60);
is(partitions('idle053', 1, 2), '1:25:t 2:-5:t', 'idle053: partitions 1 and 2 idle');
wait_for_sql('idle053 writes the windows fired with no new input', 'SELECT count(*) FROM out_idle', '7', 30);
is(windows('out_idle'), 'a@0 a@10 a@30 b@0 b@10 b@30 c@0', 'idle053: windows ending by 55 written');

# All that while (20 s and more), held053 kept its watermark at partition
# 2's, and no partition was idle.
is(job_metric('held053', 'watermark'), ts(-5), 'held053: the silent partition holds the watermark');
is(partitions('held053'), '0:55:f 1:25:f 2:-5:f', 'held053: per-partition watermarks, none idle');
is(windows('out_held'), '', 'held053: no window fired');

# Partition 2 speaks again, at 58: it rejoins idle053 (no longer idle, its
# watermark 53 counts again) but the job's watermark does not move back
# from 55.  held053 moves to 25, partition 1's.
produce([ 2, 'c', 58 ]);
is(wait_job($_), 'running', "$_ committed partition 2's return") for @jobs;
is(partitions('idle053', 2), '2:53:f', 'idle053: partition 2 rejoined');
is(job_metric('idle053', 'watermark'), ts(55), 'idle053: the watermark never moves backwards');
is(job_metric('held053', 'watermark'), ts(25), 'held053: watermark 30 - 5 (partition 1)');
wait_for_sql('held053 writes the windows ending by 25', 'SELECT count(*) FROM out_held', '5', 30);
is(windows('out_held'), 'a@0 a@10 b@0 b@10 c@0', 'held053: windows ending by 25 written');

# Partitions 0 and 1 move on to 100; partition 2, back, holds idle053's
# watermark again (until 10 s of silence): it stays at 55.  (This check
# assumes less than 10 s between partition 2's message and here.)
produce([ 0, 'a', 100 ]);
produce([ 1, 'b', 100 ]);
is(wait_job($_), 'running', "$_ committed partitions 0 and 1 at 100") for @jobs;
is(job_metric('idle053', 'watermark'), ts(55), 'idle053: the rejoined partition holds the watermark again');
is(job_metric('held053', 'watermark'), ts(53), 'held053: held by partition 2 at 58 - 5');

# Partition 2 at 100 too: every window ending by 95 fires in both jobs, once.
produce([ 2, 'c', 100 ]);
for my $job (@jobs)
{
	wait_watermark($job, ev_time(95));
	is(wait_job($job), 'running', "$job committed partition 2 at 100");
	is(job_metric($job, 'watermark'), ts(95), "$job: watermark 95");
	wait_for_sql("$job writes every window ending by 95", "SELECT count(*) FROM $table{$job}", '9', 30);
	is(windows($table{$job}), 'a@0 a@10 a@30 a@60 b@0 b@10 b@30 c@0 c@50', "$job: every window ending by 95 written");
	is(psql("SELECT sum(n) FROM $table{$job}"), '9', "$job: each event counted once");
	is(job_metric($job, 'records_late'), '0', "$job: nothing late");
}

# The watermark survives a restart: stopped, it is the last checkpoint's;
# after a server restart (shared memory anew), the jobs resume with it and
# with each partition's, before any new record arrives.
is(psql("SELECT mailer.stop_job('$_')"), 'stopped', "$_ stopped") for @jobs;
is(job_metric($_, 'watermark'), ts(95), "$_: stopped, the checkpoint's watermark is shown") for @jobs;
pg_service('restart');
for my $job (@jobs)
{
	psql("SELECT mailer.start_job('$job')");
	wait_for_sql("$job running again", "SELECT state FROM mailer.jobs WHERE name = '$job'", 'running');
	wait_for_sql("$job shows its partitions' watermarks",
		"SELECT count(watermark) FROM mailer.partition_metrics WHERE name = '$job'", '3', 30);
	is(job_metric($job, 'watermark'), ts(95), "$job: restarted with its watermark");
	is(partitions($job), '0:95:f 1:95:f 2:95:f', "$job: restarted with each partition's watermark");
}
produce([ 0, 'a', 101 ]);
is(wait_job($_), 'running', "$_ committed after the restart") for @jobs;
is(job_metric($_, 'records_late'), '0', "$_: nothing late after the restart") for @jobs;
is(job_metric($_, 'watermark'), ts(95), "$_: watermark held at 95 by partitions 1 and 2") for @jobs;

is(psql("SELECT mailer.stop_job('$_')"), 'stopped', "$_ stopped") for @jobs;

done_testing();
