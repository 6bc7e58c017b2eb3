# Late records inside allowed lateness into fired sliding windows whose
# panes the cache let go (mailer.state_cache_entries = 0) give SQL's
# windows: a pane of a window that has ended is read from the backend even
# though its fire timer was popped, and emit final re-emits a fired window
# a late record changed.  The lateness is long enough that the purge timers
# outnumber the fire timers eight to one, so no watermark step scans its
# panes and each pane is looked up alone.  Emit final (RocksDB) and update
# (memory), and a SIGKILL of a worker mid-stream.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
state_cache_entries_until_exit(0);

my $topic = unique_name('t154');
kafka('create-topic', $topic, 1);
my $final = '{"type": "sliding", "size": "20 seconds", "slide": "5 seconds", "allowed_lateness": "10 minutes"}';
my $update = '{"type": "sliding", "size": "20 seconds", "slide": "5 seconds", "allowed_lateness": "10 minutes", "emit": "update"}';
window_tables('t154_final', 't154_update');
create_window_job('t154_final', $topic, window => $final, ooo => '2 seconds', table => 't154_final',
	backend => 'rocksdb');
create_window_job('t154_update', $topic, window => $update, ooo => '2 seconds', table => 't154_update',
	backend => 'memory');

# 30 keys in order, every 9th record 25 to 60 s late (its windows fired,
# their panes written out and let go).
my @events;
my $n = 0;
for (my $t = 100; $t < 400; $t += 0.1)
{
	my $late = $n % 9 == 0 ? 25 + ($n % 36) : 0;
	push @events, { p => 0, k => 'k' . ($n % 30), t => sprintf('%.1f', $t - $late), a => $n % 13 };
	$n++;
}
my $end = { p => 0, k => 'zz', t => 2000, a => 1 };
events_table('t154_events', [ @events, $end ]);

produce_thirds_with_kill($topic, \@events, $end, 't154_final', 't154_final', 't154_update');

my $want = want_sliding('t154_events', 20, 5, "k <> 'zz'");
for my $table ('t154_final', 't154_update')
{
	same_rows("SELECT k, window_start, window_end, n, total FROM $table WHERE k <> 'zz'", $want,
		"$table: every window, late records included, as SQL's");
}
is(job_metric('t154_final', 'records_late'), '0', 'no record was late');
psql("SELECT mailer.stop_job('$_')") for ('t154_final', 't154_update');
done_testing();
