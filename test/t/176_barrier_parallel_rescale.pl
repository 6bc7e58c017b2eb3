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

my $run = bt_rescaled_cuts('t176', [ 1, 2, 3 ]);
for my $back (1, 3)
{
	for my $j (@{ $run->{jobs} })
	{
		bt_restore_replay($j, $back, 6, $run,
			"back to cut $back (taken at parallelism " . ($back < 3 ? 1 : 2) . ") and replayed at parallelism 3: its table at cut 6");
		is(cut_epochs($j), '1,2,3,4,5,6', "$j: checkpoints at cuts 1 to 6 again");
	}
}

psql("SELECT mailer.drop_job('$_')") for @{ $run->{jobs} };
kafka('delete-topic', $_) for @$run{qw(topic barrier)};
done_testing();
