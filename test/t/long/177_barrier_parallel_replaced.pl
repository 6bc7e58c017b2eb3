# A parallel job at barrier cuts (issue 17, item 5, after the hostile
# review) when a cut's record is replaced by another complete record of
# the same epoch, and while it is held.
#
# - Subtask 0 takes the first version of cut 2; subtask 1, held in its
#   poll meanwhile (test point kafka_polled), reads the second.  The job
#   must not checkpoint at positions that are no record's markers: it
#   skips the cut (its subtasks saw different versions) or checkpoints at
#   one version's markers, and then aligns on cut 3 exactly.
# - Held at a cut whose marker is ahead of the data, no subtask spins:
#   each uses under a second of CPU in ten seconds.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use Test::More;

my $fresh = bt_fresh('t177', 4);
my $topic = $fresh->{topics}[0];
my ($bt, $group) = @$fresh{qw(barrier group)};
test_point_release();
END { eval { test_point_release() } }
my $j = 't177_p2';
totals_sink($j);
my $spec = totals_spec($topic, $j, backend => 'memory', start => 'earliest',
	interval => '200 milliseconds', source => $fresh->{source});
$spec =~ s/^\{/{"parallelism": 2,/;
psql("SELECT mailer.create_job('$j', \$\$$spec\$\$)");
kcat_produce($topic, bt_order_lines(1, 400, 50));
wait_job_running($j);
bt_cut_at_ends($bt, $group, 1, [$topic]);
wait_cut_checkpoint($j, 1);
my @pids = split /\n/, psql("SELECT pid FROM mailer.subtasks WHERE name = '$j' ORDER BY subtask");

# Subtask 1 (partitions 1 and 3) held in its poll.
my $from = test_point_hold('kafka_polled');
kcat_produce($topic, bt_order_lines(401, 450, 50), partition => 1);
my $pid = test_point_wait_reached('kafka_polled', $from);
is($pid, $pids[1], 'subtask 1 is held in its poll');
my $end = bt_ends($topic);
my %m1 = (%$end, 1 => $end->{1} + 1000);	# subtask 0's partitions can reach theirs
my %m2 = (%$end, 0 => $end->{0} + 1000);	# subtask 1's partitions can reach theirs
bt_cut($bt, $group, 2, { $topic => \%m1 });
wait_holding($j, 2);
bt_cut($bt, $group, 2, { $topic => \%m2 });
# Subtask 1's reader fetches the second version in its own threads while
# the worker is held; whether it has by the release, the result must hold.
sleep 2;
test_point_release();

# Cut 3 at the ends: taken exactly, whatever became of cut 2.
kcat_produce($topic, bt_order_lines(451, 850, 50));
my %m3 = %{ bt_ends($topic) };
bt_cut($bt, $group, 3, { $topic => \%m3 });
wait_cut_checkpoint($j, 3);
my $fmt = sub { my ($m) = @_; join(' ', map { "$_:$m->{$_}" } sort { $a <=> $b } keys %$m) };
my $pos2 = psql("SELECT string_agg(p.key || ':' || p.value, ' ' ORDER BY p.key::int)
	FROM mailer.checkpoints c JOIN mailer.job jj USING (job_id), jsonb_each_text(c.positions->'$topic') p
	WHERE jj.name = '$j' AND c.cut_epoch = 2");
note("m1: " . $fmt->(\%m1) . "; m2: " . $fmt->(\%m2) . "; checkpoint at cut 2: " . ($pos2 || 'none'));
ok(!$pos2 || $pos2 eq $fmt->(\%m1) || $pos2 eq $fmt->(\%m2), 'no checkpoint at cut 2, or one at one version\'s markers');
bt_load_records($topic, 't177_rec');
totals_check('t177_rec_orders', $j, 'at cut 3: the GROUP BY below its markers', bt_below(\%m3));

# Held at cut 4, whose partition 1 marker is 50 records past the end.
$end = bt_ends($topic);
bt_cut($bt, $group, 4, { $topic => { %$end, 1 => $end->{1} + 50 } });
wait_holding($j, 4);
@pids = split /\n/, psql("SELECT pid FROM mailer.subtasks WHERE name = '$j' ORDER BY subtask");
my @t0 = map { cpu_ticks($_) } @pids;
sleep 10;
my @t1 = map { cpu_ticks($_) } @pids;
note("CPU ticks over 10 s while held: " . join(' ', map { $t1[$_] - $t0[$_] } 0 .. $#pids));
cmp_ok($t1[$_] - $t0[$_], '<', 100, "subtask $_ does not spin while held at cut 4") for 0 .. $#pids;
kcat_produce($topic, bt_order_lines(851, 900, 50), partition => 1);
wait_cut_checkpoint($j, 4);

psql("SELECT mailer.drop_job('$j')");
kafka('delete-topic', $_) for $topic, $bt;
done_testing();

# A process's user and system CPU, in clock ticks.
sub cpu_ticks
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my @f = split / /, <$fh>;
	return $f[13] + $f[14];
}
