# Barrier cuts (issue 17) on the input a hostile review found wrong, one
# keyed totals job per case, each of its own group on one barrier topic
# (a job reads another group's records, the malformed one included, as
# not its own):
# - a cut naming a partition its topic does not have holds nothing back:
#   the job checkpoints at it and at the next, and logs it;
# - a stray cut with a far-ahead epoch is taken; the real cuts after it
#   are skipped late, counted and warned about; restoring to the cut
#   before it aligns on the real ones again;
# - a cut naming one partition twice is malformed: counted, warned about,
#   not checkpointed, and the next valid cut aligns;
# - a cut read past on one partition and behind the job's checkpoint on
#   another is skipped without first rewinding the worker.
# That something does not happen is seen once a later event that must
# come after it has.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use Test::More;

fresh_extension();
drop_tables('t173');
my $bt = bt_topic('t173');
my @topics = ($bt);

# A totals job named t173_$case on a new topic of $parts partitions, at
# cuts of group g173_$case, with the first $n orders written; running.
sub case_job
{
	my ($case, $parts, $n) = @_;
	my $topic = unique_name("t173_$case");
	kafka('create-topic', $topic, $parts);
	push @topics, $topic;
	my $group = unique_name("g173_$case");
	my $j = "t173_$case";
	totals_sink($j);
	psql("SELECT mailer.create_job('$j', \$\$"
		  . totals_spec($topic, $j, backend => 'memory', start => 'earliest', interval => '200 milliseconds',
			source => qq("barrier_group": "$group", "barrier_topic": "$bt")) . "\$\$)");
	kcat_produce($topic, bt_order_lines(1, $n, 50));
	wait_job_running($j);
	return ($j, $topic, $group);
}

sub log_has
{
	my ($from, $re, $name) = @_;
	return like(pg_log_since($from), $re, $name);
}

subtest 'a partition the topic does not have holds nothing back' => sub {
	my ($j, $topic, $group) = case_job('phantom', 2, 200);
	bt_cut_at_ends($bt, $group, 1, [$topic]);
	wait_cut_checkpoint($j, 1);
	kcat_produce($topic, bt_order_lines(201, 400, 50));
	my $e = bt_ends($topic);
	my $log = pg_log_size();
	bt_cut($bt, $group, 2, { $topic => { 0 => $e->{0}, 1 => $e->{1}, 7 => 0 } });
	kcat_produce($topic, bt_order_lines(401, 600, 50));
	my $m3 = bt_cut_at_ends($bt, $group, 3, [$topic]);
	wait_cut_checkpoint($j, 3);
	isnt(cut_checkpoint($j, 2), '', 'the cut naming partition 7 of a 2-partition topic is checkpointed');
	cut_positions_ok($j, 2, $topic, { 0 => $e->{0}, 1 => $e->{1} }, 'at the markers of the partitions it has');
	cut_positions_ok($j, 3, $topic, $m3->{$topic}, 'and the next cut aligns');
	is(cut_epochs($j), '1,2,3', 'checkpoints at cuts 1, 2 and 3 only');
	is(cut_metrics($j)->{cut_holding_epoch}, undef, 'holding at no cut');
	log_has($log, qr/LOG:\s+barrier cut 2 names partition 7 of topic "\Q$topic\E", which the topic does not have/,
		'the missing partition is logged');
	psql("SELECT mailer.drop_job('$j')");
};

subtest 'a far-ahead epoch: later cuts skipped, restore aligns again' => sub {
	my ($j, $topic, $group) = case_job('ahead', 1, 200);
	bt_cut_at_ends($bt, $group, 1, [$topic]);
	wait_cut_checkpoint($j, 1);
	kcat_produce($topic, bt_order_lines(201, 300, 50));
	bt_cut_at_ends($bt, $group, 1000000000, [$topic]);
	wait_cut_checkpoint($j, 1000000000);
	my $log = pg_log_size();
	kcat_produce($topic, bt_order_lines(301, 400, 50));
	my $m2 = bt_cut_at_ends($bt, $group, 2, [$topic]);
	kcat_produce($topic, bt_order_lines(401, 500, 50));
	my $m3 = bt_cut_at_ends($bt, $group, 3, [$topic]);
	wait_until('cuts 2 and 3 to be skipped', sub { cut_metrics($j)->{cuts_skipped} >= 2 });
	is(cut_metrics($j)->{cuts_skipped}, 2, 'cuts 2 and 3 are counted skipped');
	is(cut_epochs($j), '1,1000000000', 'no checkpoint at cut 2 or 3 after the far-ahead cut');
	my $warned = () = pg_log_since($log)
	  =~ /WARNING:\s+barrier cut [23] of group "\Q$group\E" came after the job took or skipped cut 1000000000/g;
	is($warned, 2, 'each late cut is warned about');

	is(psql("SELECT mailer.stop_job('$j')"), 'stopped', 'the job stops');
	psql("SELECT mailer.restore_job('$j', cut_epoch => 1)");
	is(cut_epochs($j), '1', 'restored to cut 1');
	psql("SELECT mailer.start_job('$j')");
	my $e1 = cut_checkpoint($j, 1);
	wait_cut_checkpoint($j, 2, 60, $e1);
	wait_cut_checkpoint($j, 3, 60, $e1);
	cut_positions_ok($j, 2, $topic, $m2->{$topic}, 'after the restore cut 2 aligns at its markers');
	cut_positions_ok($j, 3, $topic, $m3->{$topic}, 'and cut 3');
	like(cut_epochs($j), qr/^1,2,3\b/, 'checkpoints at cuts 1, 2, 3 in that order');
	psql("SELECT mailer.drop_job('$j')");
};

subtest 'a partition named twice is malformed' => sub {
	my ($j, $topic, $group) = case_job('twice', 1, 100);
	bt_cut_at_ends($bt, $group, 1, [$topic]);
	wait_cut_checkpoint($j, 1);
	kcat_produce($topic, bt_order_lines(101, 200, 50));
	my $lo = bt_ends($topic)->{0};
	kcat_produce($topic, bt_order_lines(201, 300, 50));
	my $hi = bt_ends($topic)->{0};
	# Two entries of the topic, partition 0 in each (bt_cut_value can
	# write a topic once only).
	my $s = pack('n/a*', $topic);
	my $now = int(time() * 1000);
	my $v = pack('n q> q> c', 0, $now - 5, $now, 0) . pack('N', 2)
	  . $s . pack('N', 1) . pack('N q>', 0, $hi)
	  . $s . pack('N', 1) . pack('N q>', 0, $lo) . pack('N', 0);
	my $log = pg_log_size();
	bt_raw($bt, bt_key($group, 2), $v);
	kcat_produce($topic, bt_order_lines(301, 400, 50));
	my $m3 = bt_cut_at_ends($bt, $group, 3, [$topic]);
	wait_cut_checkpoint($j, 3);
	is(cut_checkpoint($j, 2), '', 'no checkpoint at the malformed cut');
	is(cut_epochs($j), '1,3', 'checkpoints at cuts 1 and 3 only');
	cut_positions_ok($j, 3, $topic, $m3->{$topic}, 'the next valid cut aligns at its markers');
	is(cut_metrics($j)->{cut_records_malformed}, 1, 'the malformed record is counted');
	log_has($log, qr/WARNING:\s+skipped a malformed barrier record .*names partition 0 of topic "\Q$topic\E" twice/,
		'and warned about');
	psql("SELECT mailer.drop_job('$j')");
};

subtest 'behind on one partition, read past on another: skipped, no rewind' => sub {
	my ($j, $topic, $group) = case_job('behind', 2, 200);
	my $m1 = bt_cut_at_ends($bt, $group, 1, [$topic])->{$topic};
	wait_cut_checkpoint($j, 1);
	cmp_ok($m1->{1}, '>', 0, 'partition 1 has records below cut 1');
	kcat_produce($topic, bt_order_lines(201, 300, 50));
	my $e = bt_ends($topic);
	kcat_produce($topic, bt_order_lines(301, 400, 50));
	wait_until('the job to read all 400', sub { job_metrics($j)->{records_in} == 400 });
	my $pid = job_info($j)->{pid};
	my $before = cut_metrics($j);
	bt_cut($bt, $group, 2, { $topic => { 0 => $e->{0}, 1 => $m1->{1} - 1 } });
	wait_until('cut 2 to be skipped', sub { cut_metrics($j)->{cuts_skipped} == $before->{cuts_skipped} + 1 });
	# The next cut at the ends: once it is checkpointed, cut 2 is long decided.
	my $m3 = bt_cut_at_ends($bt, $group, 3, [$topic]);
	wait_cut_checkpoint($j, 3);
	is(cut_checkpoint($j, 2), '', 'no checkpoint at the cut behind on partition 1');
	is(cut_metrics($j)->{cut_rewinds}, $before->{cut_rewinds}, 'no rewind for it');
	is(job_info($j)->{pid}, $pid, 'the same worker');
	cut_positions_ok($j, 3, $topic, $m3->{$topic}, 'the next cut aligns at its markers');
	like(cuts_of($j), qr/\b2:skipped:-/, 'mailer.cuts shows cut 2 skipped');
	psql("SELECT mailer.drop_job('$j')");
};

kafka('delete-topic', $_) for @topics;
done_testing();
