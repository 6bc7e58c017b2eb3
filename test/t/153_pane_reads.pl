# The reads of sliding-window panes that skip the backend give SQL's
# windows: a watermark step fires its windows in one scan of their panes
# (a pane a record changed since the checkpoint, or made since, taken from
# the cache), and a pane whose window has not ended and holds no fire
# timer is known new (not read).  With the cache emptied
# at every checkpoint (mailer.state_cache_entries = 0) every fire reads the
# backend; dense and sparse keys (panes missing inside windows), the text
# keys a, ab and abc (stored with their lengths, so their pane ranges do
# not overlap; the scan checks a key's length), a jump of the watermark
# over several slides (several runs of windows in one step), emit final
# (RocksDB) and update (memory), and a SIGKILL of a worker mid-stream.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
state_cache_entries_until_exit(0);

my $topic = unique_name('t153');
kafka('create-topic', $topic, 1);
my $window = '{"type": "sliding", "size": "20 seconds", "slide": "5 seconds"}';
my $update = '{"type": "sliding", "size": "20 seconds", "slide": "5 seconds", "emit": "update"}';
window_tables('t153_final', 't153_update');
create_window_job('t153_final', $topic, window => $window, ooo => '2 seconds', table => 't153_final',
	backend => 'rocksdb');
create_window_job('t153_update', $topic, window => $update, ooo => '2 seconds', table => 't153_update',
	backend => 'memory');

# In order (nothing late): dense keys every 7.5 s (some of their panes
# empty), sparse keys every 40 s, the keys a, ab and abc, and no event
# from 80 s to 115 s.
my @events;
my $n = 0;
for (my $t = 0; $t < 160; $t += 0.05)
{
	next if $t >= 80 && $t < 115;
	my $k = $n % 40 == 0 ? 's' . ($n / 40 % 20)
		  : $n % 7 == 0 ? (qw(a ab abc))[ $n / 7 % 3 ]
		  : 'd' . ($n % 150);
	push @events, { p => 0, k => $k, t => $t, a => $n % 13 };
	$n++;
}
my $end = { p => 0, k => 'zz', t => 400, a => 1 };
events_table('t153_events', [ @events, $end ]);

# A SIGKILL while the second third is read: the jobs resume from their
# checkpoints, their panes' timers made again from the state.
produce_thirds_with_kill($topic, \@events, $end, 't153_final', 't153_final', 't153_update');

my $want = want_sliding('t153_events', 20, 5, "k <> 'zz'");
for my $table ('t153_final', 't153_update')
{
	same_rows("SELECT k, window_start, window_end, n, total FROM $table WHERE k <> 'zz'", $want,
		"$table: every window of the keys before the last event, as SQL's");
}
cmp_ok(psql("SELECT count(*) FROM t153_final"), '>', 1000, 'windows were written');
is(job_metric('t153_final', 'records_late'), '0', 'no record was late');

psql("SELECT mailer.stop_job('$_')") for ('t153_final', 't153_update');
done_testing();
