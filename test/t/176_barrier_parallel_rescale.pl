# Cut checkpoints of a parallel job across rescales (issue 17, item 5,
# after the hostile review): two keyed totals jobs (memory and RocksDB
# state) take cuts 1-2 at parallelism 1, cuts 3-4 at 2 and cuts 5-6 at 3.
# restore_job(cut_epoch => 1), then (cut_epoch => 3), each replayed at
# parallelism 3, brings each table at cut 6 back to the GROUP BY below
# cut 6's markers: every subtask kept what a restore to an older cut needs
# (the memory backend's undo of key groups a new subtask took over too).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use Test::More;

my $fresh = bt_fresh('t176', 6);
my $topic = $fresh->{topics}[0];
my ($bt, $group) = @$fresh{qw(barrier group)};
my %job = %{ backend_jobs($topic, 't176', start => 'earliest', interval => '200 milliseconds',
	source => $fresh->{source}) };
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

cut(1);
cut(2);
rescale(2);
cut(3);
cut(4);
rescale(3);
cut(5);
cut(6);
bt_load_records($topic, 't176_rec');

for my $back (1, 3)
{
	for my $j (@jobs)
	{
		is(psql("SELECT mailer.stop_job('$j')"), 'stopped', "$j stopped");
		my $at = cut_checkpoint($j, $back);
		is(psql("SELECT mailer.restore_job('$j', cut_epoch => $back)"), $at,
			"$j: restore_job to cut $back, taken at parallelism " . ($back < 3 ? 1 : 2));
		is(cut_epochs($j), join(',', 1 .. $back), "$j: the checkpoints after cut $back are gone");
		psql("SELECT mailer.start_job('$j')");
		# Epochs after the restored one are numbered again from it.
		wait_cut_checkpoint($j, 6, 120, $at);
		totals_check('t176_rec_orders', $j, "$j, back to cut $back and replayed at parallelism 3: its table at cut 6",
			bt_below($markers{6}));
		is(cut_epochs($j), '1,2,3,4,5,6', "$j: checkpoints at cuts 1 to 6 again");
	}
}

psql("SELECT mailer.drop_job('$_')") for @jobs;
kafka('delete-topic', $_) for $topic, $bt;
done_testing();
