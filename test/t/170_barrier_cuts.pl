# Checkpoints aligned on barrier cuts (issue 17): two keyed totals jobs,
# one per state backend, on two topics of one barrier group, while a
# producer keeps writing both topics and the test, as the coordinator,
# publishes cuts at the topics' end offsets.  Each job checkpoints at
# every complete cut and only there (between_cuts is false), with the
# cut's markers as its positions; its table at a cut equals the GROUP BY
# over exactly the records below the markers.  A partial cut is skipped
# and the next complete one aligns; a cut naming partition 0 only is not
# held by partition 1; a cut behind the job's committed positions is
# skipped.  Aligning rewinds the worker when it has read past a marker,
# which is neither a failure nor a restart.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use Test::More;

my $fresh = bt_fresh('t170', 2, scalar @BACKENDS);
my @topics = @{ $fresh->{topics} };
my %topic = map { $BACKENDS[$_] => $topics[$_] } 0 .. $#BACKENDS;
my ($bt, $group) = @$fresh{qw(barrier group)};

my %job;
for my $b (@BACKENDS)
{
	my $j = $job{$b} = "t170_$b";
	totals_sink($j);
	psql("SELECT mailer.create_job('$j', \$\$"
		  . totals_spec($topic{$b}, $j, backend => $b, start => 'earliest', interval => '200 milliseconds',
			source => $fresh->{source}) . "\$\$)");
}

my $producer = bt_producer(\@topics);
END { bt_producer_stop($producer) if $producer }
wait_until('the producer to write both topics', sub {
	my @n = map { my $e = bt_ends($_); $e->{0} + $e->{1} } @topics;
	return $n[0] >= 200 && $n[1] >= 200;
});
wait_job_running($_) for values %job;

# Publish a cut at the ends now; wait for both jobs' checkpoints at it and
# keep a copy of each table as it is then: until the next cut, nothing
# else is checkpointed, so nothing else is written.
my %markers;
sub cut_and_wait
{
	my ($cut, %opt) = @_;
	# Published already (with these markers), or now at the ends.
	$markers{$cut} = delete $opt{markers} // bt_cut_at_ends($bt, $group, $cut, \@topics, %opt);
	for my $b (@BACKENDS)
	{
		wait_cut_checkpoint($job{$b}, $cut);
		psql("CREATE TABLE t170_snap_${b}_$cut AS SELECT * FROM $job{$b}");
	}
}

# Cut 1 with a known time, to see mailer.cuts decode it.
cut_and_wait(1, triggered_at_ms => 1893456000000, completed_at_ms => 1893456000250);
cut_and_wait(2);

# Cut 3 published only once both jobs read past its markers: each goes
# back to its checkpoint at cut 2 to take it.
my %rewinds = map { $_ => job_metric($job{$_}, 'cut_rewinds') } @BACKENDS;
my $m3 = bt_markers_at_ends(\@topics);
wait_read_past($job{$_}, $topic{$_}, $m3->{ $topic{$_} }) for @BACKENDS;
bt_cut($bt, $group, 3, $m3);
cut_and_wait(3, markers => $m3);
for my $b (@BACKENDS)
{
	cmp_ok(job_metric($job{$b}, 'cut_rewinds'), '>', $rewinds{$b}, "$b: cut 3, learned of late, is taken by going back");
}

# A partial cut, then a complete one right after it.
bt_cut_at_ends($bt, $group, 4, \@topics, status => 1, missed => [ [ $topic{rocksdb}, 1 ] ]);
cut_and_wait(5);

# Partition 0 of each topic only: partition 1 holds nothing back.
cut_and_wait(6, partitions => { map { $_ => [0] } @topics });

# A cut behind the committed positions (cut 1's markers), then a complete one.
bt_cut($bt, $group, 7, $markers{1});
cut_and_wait(8);

bt_producer_stop($producer);
undef $producer;

my @aligned = (1, 2, 3, 5, 6, 8);
for my $b (@BACKENDS)
{
	my $j = $job{$b};
	my $t = $topic{$b};
	my $n = bt_load_records($t, "t170_rec_$b");
	note("$b: $n records in $t");
	for my $cut (@aligned)
	{
		cut_positions_ok($j, $cut, $t, $markers{$cut}{$t});
		cut_totals_check("t170_rec_$b", "t170_snap_${b}_$cut", $j, $cut, $t,
			"$b: its table at cut $cut equals the GROUP BY below the cut");
	}
	is(cut_epochs($j), join(',', @aligned),
		"$b: checkpoints at the complete cuts only, not the partial 4 or the behind 7, none between cuts");

	my $m = cut_metrics($j);
	note("$b: " . join(', ', map { "$_=" . ($m->{$_} // 'NULL') } sort keys %$m));
	is($m->{last_cut_epoch}, 8, "$b: last_cut_epoch 8");
	cmp_ok($m->{cuts_partial}, '>=', 1, "$b: the partial cut is counted");
	is($m->{cuts_skipped}, 1, "$b: the cut behind its positions is counted skipped");
	is($m->{cut_records_malformed}, 0, "$b: no malformed barrier record");
	is($m->{cut_holding_epoch}, undef, "$b: holding at no cut");
	cmp_ok($m->{cut_held_seconds}, '>=', 0, "$b: cut_held_seconds is a duration");

	is(cuts_of($j), join(' ', map { $_ == 7 ? '7:skipped:-' : "$_:checkpoint:r" } 1 .. 3, 5 .. 8),
		"$b: mailer.cuts shows each complete cut, 7 skipped, the others restorable checkpoints");
	is(psql("SELECT count(*) FROM mailer.cuts('$j') k LEFT JOIN (mailer.checkpoints c JOIN mailer.job USING (job_id))
		ON c.cut_epoch = k.cut_epoch AND c.subtask = 0 AND job.name = '$j'
		WHERE k.checkpoint_epoch IS DISTINCT FROM c.epoch"), 0,
		"$b: mailer.cuts names each cut's checkpoint epoch");
	is(psql("SELECT triggered_at = '2030-01-01 00:00:00+00' AND completed_at = '2030-01-01 00:00:00.25+00'
		FROM mailer.cuts('$j') WHERE cut_epoch = 1"), 't', "$b: mailer.cuts shows cut 1's times");

	my $info = job_info($j);
	is("$info->{state} $info->{restarts}", 'running 0', "$b: running, the rewinds to align counted as no restart");
}

psql("SELECT mailer.drop_job('$_')") for values %job;
kafka('delete-topic', $_) for @topics, $bt;
done_testing();
