# Barrier cuts (issue 17, item 5, from the second review): cut checkpoints across rescales down (3 -> 2 -> 1) with
# retain_cuts 4: the retired subtasks' rows of reclaimed cuts go, those of
# kept cuts stay, and a restore to a cut taken at parallelism 2 replays to
# the GROUP BY at parallelism 1.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use Test::More;

my $fresh = bt_fresh('t179', 6);
my $topic = $fresh->{topics}[0];
my ($bt, $group) = @$fresh{qw(barrier group)};
my %job = %{ backend_jobs($topic, 't179', start => 'earliest', interval => '200 milliseconds',
	source => $fresh->{source}, checkpoint => '"retain_cuts": 4') };
my @jobs = map { $job{$_} } @BACKENDS;
wait_job_running($_) for @jobs;

my %markers;
my $n = 0;
sub cut
{
	my ($cut) = @_;
	kcat_produce($topic, bt_order_lines($n + 1, $n + 400, 60));
	$n += 400;
	$markers{$cut} = bt_cut_at_ends($bt, $group, $cut, [$topic])->{$topic};
	wait_cut_checkpoint($_, $cut, 90) for @jobs;
}
sub rescale
{
	my ($p) = @_;
	for my $j (@jobs)
	{
		is(psql("SELECT mailer.stop_job('$j')"), 'stopped', "$j stopped");
		psql("SELECT mailer.alter_job('$j', jsonb_set(spec, '{parallelism}', '$p')) FROM mailer.jobs WHERE name = '$j'");
		psql("SELECT mailer.start_job('$j')");
		wait_job_running($j);
	}
}
rescale(3);
cut(1);
cut(2);
rescale(2);
cut(3);
cut(4);
rescale(1);
cut(5);
cut(6);
bt_load_records($topic, 't179_rec');
for my $j (@jobs)
{
	note("$j rows: " . psql("SELECT string_agg(coalesce(cut_epoch::text,'-') || 'e' || epoch || '/' || subtask, ' ' ORDER BY epoch, subtask) FROM mailer.checkpoints c JOIN mailer.job jj USING (job_id) WHERE jj.name = '$j'"));
	is(cut_epochs($j), '3,4,5,6', "$j: cuts 3-6 retained");
	is(psql("SELECT string_agg(cut_epoch || ':' || n, ' ' ORDER BY cut_epoch) FROM (SELECT cut_epoch, count(*) n FROM mailer.checkpoints c JOIN mailer.job jj USING (job_id) WHERE jj.name = '$j' GROUP BY cut_epoch) x"),
		'3:2 4:2 5:1 6:1', "$j: a row per subtask of each retained cut, none of reclaimed ones");
}
for my $back (3)
{
	for my $j (@jobs)
	{
		is(psql("SELECT mailer.stop_job('$j')"), 'stopped', "$j stopped");
		my $at = cut_checkpoint($j, $back);
		is(psql("SELECT mailer.restore_job('$j', cut_epoch => $back)"), $at, "$j: restore_job to cut $back");
		psql("SELECT mailer.start_job('$j')");
		wait_cut_checkpoint($j, 6, 120, $at);
		totals_check('t179_rec_orders', $j, "$j, back to cut $back (p2) replayed at p1: table at cut 6", bt_below($markers{6}));
	}
}
psql("SELECT mailer.drop_job('$_')") for @jobs;
kafka('delete-topic', $_) for $topic, $bt;
done_testing();
