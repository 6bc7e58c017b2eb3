# A cut whose record is published twice in a row (partial then complete,
# or complete twice with other times, as a coordinator's retry does) is
# taken by a job of one worker and by a parallel job alike (issue 17, item
# 5, after the second review): a subtask whose reader is behind subtask
# 0's waits until it has read as far, and a record with the same markers
# is the same cut.  Each mode publishes 8 cuts; none may be skipped.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use Test::More;
use Time::HiRes qw(sleep);

my $fresh = bt_fresh('t178', 6);
my $topic = $fresh->{topics}[0];
my ($bt, $group) = @$fresh{qw(barrier group)};
my %job = (t178_p1 => 1, t178_p3 => 3);
for my $j (sort keys %job)
{
	totals_sink($j);
	my $spec = totals_spec($topic, $j, backend => 'memory', start => 'earliest',
		interval => '200 milliseconds', source => $fresh->{source});
	$spec =~ s/^\{/{"parallelism": $job{$j},/;
	psql("SELECT mailer.create_job('$j', \$\$$spec\$\$)");
}
my @jobs = sort keys %job;
wait_job_running($_) for @jobs;
my $n = 0;
my %skips;
my $N = 8;
my $cut = 0;
for my $mode (qw(partial times))
{
	for my $i (1 .. $N)
	{
		$cut++;
		kcat_produce($topic, bt_order_lines($n + 1, $n + 120, 60));
		$n += 120;
		my $m = bt_markers_at_ends([$topic]);
		my $now = int(time() * 1000);
		if ($mode eq 'partial') {
			bt_cut($bt, $group, $cut, $m, status => 1, missed => [ [ $topic, 0 ] ]);
			bt_cut($bt, $group, $cut, $m);
		} else {
			bt_cut($bt, $group, $cut, $m, completed_at_ms => $now);
			bt_cut($bt, $group, $cut, $m, completed_at_ms => $now + 1);
		}
		for my $j (@jobs)
		{
			wait_until("$j to decide cut $cut", sub {
				my $m = cut_metrics($j);
				($m->{last_cut_epoch} // 0) == $cut || ($m->{cuts_skipped} // 0) > ($skips{$j} // 0) }, 60);
			$skips{$j} = cut_metrics($j)->{cuts_skipped} // 0;
		}
	}
}
for my $j (@jobs)
{
	my $c = cuts_of($j);
	my $skipped = $skips{$j};
	note("$j: $c; metrics " . join(' ', map { "$_=" . (cut_metrics($j)->{$_} // 'NULL') } sort keys %{ cut_metrics($j) }));
	is($skipped, 0, "$j: no cut skipped of $cut");
	is(cut_epochs($j), join(',', 1 .. $cut), "$j: a checkpoint at each of the $cut cuts");
}
psql("SELECT mailer.drop_job('$_')") for @jobs;
kafka('delete-topic', $_) for $topic, $bt;
done_testing();
