# Barrier cuts in parallel jobs (issue 17, item 5): three keyed totals jobs
# read one topic of four partitions, at parallelism 1 (RocksDB), 2
# (RocksDB) and 3 (memory), while a producer keeps writing and the test,
# as the coordinator, publishes cuts.  Every subtask aligns on the same
# cut and the epoch commits once: each cut checkpointed has one epoch,
# with a row per subtask carrying the cut, whose positions together are
# the cut's markers; each job's table there equals the GROUP BY below the
# markers, so the three jobs' tables are equal at every cut.  A cut
# learned of late rewinds the whole job (no failure, no restart); a
# partial cut and a cut behind the positions are skipped by all subtasks
# at once and counted once; the gauges are not multiplied by the
# subtasks.  A stop between cuts takes no checkpoint.  SIGKILL of subtask 1
# while it holds at a cut waiting for a marker, and of subtask 0 as the
# job is about to go back for a cut (test point cut_rewind), lose nothing.
# restore_job(cut_epoch => 2) of the parallel job replays to the same
# tables at the later cuts.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use MailerKafkaSinkTest qw(ks_hold ks_release);
use Test::More;

my $fresh = bt_fresh('t174', 4);
my $topic = $fresh->{topics}[0];
my ($bt, $group) = @$fresh{qw(barrier group)};
test_point_release();
END { eval { test_point_release() } }

my %parallelism = (t174_p1 => 1, t174_p2 => 2, t174_p3 => 3);
my %backend = (t174_p1 => 'rocksdb', t174_p2 => 'rocksdb', t174_p3 => 'memory');
my @jobs = sort keys %parallelism;
for my $j (@jobs)
{
	totals_sink($j);
	my $spec = totals_spec($topic, $j, backend => $backend{$j}, start => 'earliest',
		interval => '200 milliseconds', source => $fresh->{source});
	$spec =~ s/^\{/{"parallelism": $parallelism{$j},/;
	psql("SELECT mailer.create_job('$j', \$\$$spec\$\$)");
}

my $producer = bt_producer([$topic]);
END { bt_producer_stop($producer) if $producer }
wait_until('the producer to write', sub { my $e = bt_ends($topic); $e->{0} + $e->{1} + $e->{2} + $e->{3} >= 400 });
wait_job_running($_) for @jobs;
is(psql("SELECT count(*) FROM mailer.subtasks WHERE name = 't174_p3' AND pid IS NOT NULL"), 3,
	't174_p3 runs as 3 subtasks');

my %markers;

# Publish cut $cut (at the ends now, or with $opt{markers}), wait for
# every job's checkpoint at it and keep a copy of each table as it is then.
sub cut_and_wait
{
	my ($cut, %opt) = @_;
	$markers{$cut} = delete $opt{markers} // bt_cut_at_ends($bt, $group, $cut, [$topic], %opt)->{$topic};
	for my $j (@jobs)
	{
		wait_cut_checkpoint($j, $cut, 90);
		psql("CREATE TABLE ${j}_snap_$cut AS SELECT * FROM $j");
	}
}

cut_and_wait(1);
cut_and_wait(2);

# Cut 3 published once every subtask read past its markers.
my %rewinds = map { $_ => job_metric($_, 'cut_rewinds') } @jobs;
my $m3 = bt_markers_at_ends([$topic])->{$topic};
wait_read_past($_, $topic, $m3) for @jobs;
bt_cut($bt, $group, 3, { $topic => $m3 });
cut_and_wait(3, markers => $m3);
cmp_ok(job_metric($_, 'cut_rewinds'), '>', $rewinds{$_}, "$_: cut 3, learned of late, is taken by going back")
  for @jobs;

# A partial cut, then a complete one; a cut behind the positions, then one.
bt_cut_at_ends($bt, $group, 4, [$topic], status => 1, missed => [ [ $topic, 1 ] ]);
cut_and_wait(5);
bt_cut($bt, $group, 6, { $topic => $markers{1} });
cut_and_wait(7);

# A stop between cuts takes no checkpoint; the job goes on from cut 7.
my $before = psql("SELECT count(*) FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) WHERE j.name = 't174_p2'");
is(psql("SELECT mailer.stop_job('t174_p2')"), 'stopped', 't174_p2 stops between cuts');
is(psql("SELECT count(*) FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) WHERE j.name = 't174_p2'"), $before,
	't174_p2: no checkpoint taken by the stop between cuts');
my $info = job_info('t174_p2');
is("$info->{state} " . ($info->{last_error} // 'no error'), 'stopped no error',
	't174_p2: stopped, and its subtasks ending with subtask 0 is no error');
psql("SELECT mailer.start_job('t174_p2')");
wait_job_running('t174_p2');

# Cut 8 names partition 0 at a marker 60 records past its end: every job
# holds.  SIGKILL of subtask 1 of t174_p3 there (the server restarts), then
# the records up to the marker.
bt_producer_stop($producer);
undef $producer;
my $end = bt_ends($topic);
$markers{8} = { %$end, 0 => $end->{0} + 60 };
bt_cut($bt, $group, 8, { $topic => $markers{8} });
wait_holding($_, 8) for @jobs;
my ($sub0, $sub1) = subtask_pids('t174_p3');
my $launcher = launcher_pid();
is(kill('KILL', $sub1), 1, 'SIGKILL to subtask 1 of t174_p3 held at cut 8');
wait_server_ready(not_launcher => $launcher);
wait_holding('t174_p3', 8, $sub0);
kcat_produce($topic, bt_order_lines(100001, 100060, 100), partition => 0);
cut_and_wait(8, markers => $markers{8});

# Cut 9 learned of after every subtask read past it: SIGKILL of the worker
# at cut_rewind, about to go back to cut 8's checkpoint.
kcat_produce($topic, bt_order_lines(100061, 100400, 100));
my $m9 = bt_markers_at_ends([$topic])->{$topic};
kcat_produce($topic, bt_order_lines(100401, 100500, 100));
wait_read_past($_, $topic, $m9) for @jobs;
my $from = ks_hold('cut_rewind');
bt_cut($bt, $group, 9, { $topic => $m9 });
my $pid = test_point_wait_reached('cut_rewind', $from);
ok(grep({ (subtask_pids($_))[0] == $pid } @jobs), 'subtask 0 of a job is at cut_rewind, going back for cut 9');
$launcher = launcher_pid();
is(kill('KILL', $pid), 1, 'SIGKILL to it');
wait_server_ready(not_launcher => $launcher);
ks_release($from);
for my $j (@jobs)
{
	wait_until("$j to checkpoint at cut 9", sub {
		MailerKafkaSinkTest::ks_unstick();
		return cut_checkpoint($j, 9) ne '';
	}, 90);
	psql("CREATE TABLE ${j}_snap_9 AS SELECT * FROM $j");
}
$markers{9} = $m9;

my @aligned = (1, 2, 3, 5, 7, 8, 9);
my $n = bt_load_records($topic, 't174_rec');
note("$n records in $topic");
for my $j (@jobs)
{
	for my $cut (@aligned)
	{
		epoch_at_cut_ok($j, $cut);
		totals_check('t174_rec_orders', "${j}_snap_$cut", "$j: its table at cut $cut equals the GROUP BY below the cut",
			bt_below($markers{$cut}));
	}
	is(cut_epochs($j), join(',', @aligned), "$j: checkpoints at the complete cuts only, not 4 or 6, none between cuts");
	my $m = cut_metrics($j);
	note("$j: " . join(', ', map { "$_=" . ($m->{$_} // 'NULL') } sort keys %$m));
	is($m->{last_cut_epoch}, 9, "$j: last_cut_epoch 9, once for all its subtasks");
	is($m->{cuts_skipped}, 1, "$j: the cut behind the positions is counted skipped once");
	cmp_ok($m->{cuts_partial}, '>=', 1, "$j: the partial cut is counted");
	is($m->{cut_holding_epoch}, undef, "$j: holding at no cut");
	is(cuts_of($j), join(' ', map { $_ == 6 ? '6:skipped:-' : "$_:checkpoint:r" } 1 .. 3, 5 .. 9),
		"$j: mailer.cuts shows each complete cut, 6 skipped");
	my $info = job_info($j);
	is($info->{state}, 'running', "$j: running");
}

# Back to cut 2 and replayed: the same tables at cut 9.
psql("SELECT mailer.stop_job('t174_p2')");
my $at2 = cut_checkpoint('t174_p2', 2);
is(psql("SELECT mailer.restore_job('t174_p2', cut_epoch => 2)"), $at2, 'restore_job(t174_p2, cut_epoch => 2) names its epoch');
is(cut_epochs('t174_p2'), '1,2', 't174_p2: the checkpoints after cut 2 are gone');
psql("SELECT mailer.start_job('t174_p2')");
# Epochs after the restored one are numbered again from it.
wait_cut_checkpoint('t174_p2', 9, 120, $at2);
is(psql("SELECT count(*) FROM ((TABLE t174_p2_snap_9 EXCEPT TABLE t174_p2) UNION ALL (TABLE t174_p2 EXCEPT TABLE t174_p2_snap_9)) d"),
	0, 't174_p2 replayed from cut 2: its table at cut 9 is the same, row for row');
is(cut_epochs('t174_p2'), '1,2,3,5,7,8,9', 't174_p2: the replay checkpointed at cuts 3 to 9 again, in place of the first run\'s');

psql("SELECT mailer.drop_job('$_')") for @jobs;
kafka('delete-topic', $_) for $topic, $bt;
done_testing();

# The pids of a job's subtasks, by subtask.
sub subtask_pids
{
	my ($job) = @_;
	return split /\n/, psql("SELECT pid FROM mailer.subtasks WHERE name = '$job' ORDER BY subtask");
}

# A job's newest checkpoint at cut $cut is one epoch with a row for each
# subtask, each carrying the cut, and their positions together are the
# cut's markers.
sub epoch_at_cut_ok
{
	my ($job, $cut) = @_;
	my $e = cut_checkpoint($job, $cut);
	my $rows = psql("SELECT count(*) || ' ' || count(*) FILTER (WHERE cut_epoch = $cut) || ' ' || max(parallelism)
		FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) WHERE j.name = '$job' AND c.epoch = $e");
	is($rows, "$parallelism{$job} $parallelism{$job} $parallelism{$job}",
		"$job: epoch $e at cut $cut has a row per subtask, each at the cut");
	my $pos = psql("SELECT string_agg(p.key || ':' || p.value, ' ' ORDER BY p.key::int)
		FROM mailer.checkpoints c JOIN mailer.job j USING (job_id), jsonb_each_text(c.positions->'$topic') p
		WHERE j.name = '$job' AND c.epoch = $e");
	my $m = $markers{$cut};
	is($pos, join(' ', map { "$_:$m->{$_}" } sort { $a <=> $b } keys %$m),
		"$job: the positions of its subtasks at cut $cut are the cut's markers");
}
