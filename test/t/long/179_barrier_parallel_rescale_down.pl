# Cut checkpoints across rescales down (issue 17, item 5, from the second
# review): cuts 1-2 at parallelism 3, 3-4 at 2 and 5-6 at 1, with
# retain_cuts 4.  The retired subtasks' rows of reclaimed cuts go, those of
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

my $run = bt_rescaled_cuts('t179', [ 3, 2, 1 ], checkpoint => '"retain_cuts": 4');
for my $j (@{ $run->{jobs} })
{
	is(cut_epochs($j), '3,4,5,6', "$j: cuts 3-6 retained");
	is(psql("SELECT string_agg(cut_epoch || ':' || n, ' ' ORDER BY cut_epoch)
	           FROM (SELECT cut_epoch, count(*) n FROM mailer.checkpoints c JOIN mailer.job jj USING (job_id)
	                  WHERE jj.name = '$j' GROUP BY cut_epoch) x"),
		'3:2 4:2 5:1 6:1', "$j: a row per subtask of each retained cut, none of reclaimed ones");
	bt_restore_replay($j, 3, 6, $run, "back to cut 3 (taken at parallelism 2) and replayed at parallelism 1: its table at cut 6");
}

psql("SELECT mailer.drop_job('$_')") for @{ $run->{jobs} };
kafka('delete-topic', $_) for @$run{qw(topic barrier)};
done_testing();
