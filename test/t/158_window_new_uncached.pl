# Tumbling windows of 30 keys, with a cache of 10 entries
# (mailer.state_cache_entries), give SQL's windows.  At a checkpoint where
# it holds more than 10 beyond what it last kept, the cache is rebuilt
# with at most 10 of the windows the interval changed that have not ended,
# copied through their stored form (keyed_cache.c); the others are let go.
# A window that has not ended and holds no timer is new, and its first
# record makes it without asking the backend (window.c, lookup_unended); a
# window that holds its fire timer is read back, as is one that has ended
# (late records, within the allowed lateness).  A worker that took a
# window for new when the backend had it, or kept a window's copy wrong,
# would start its count again, and the sums below would come out short.
# Emit final (RocksDB) and update (memory), a SIGKILL of a worker
# mid-stream, and a restart of the other from its checkpoint (stop and
# start: the timers are made again from the entries).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
state_cache_entries_until_exit(10);

my $topic = unique_name('t158');
kafka('create-topic', $topic, 1);
my $final = '{"type": "tumbling", "size": "10 seconds", "allowed_lateness": "10 minutes"}';
my $update = '{"type": "tumbling", "size": "10 seconds", "allowed_lateness": "10 minutes", "emit": "update"}';
window_tables('t158_final', 't158_update');
create_window_job('t158_final', $topic, window => $final, ooo => '2 seconds', table => 't158_final',
	backend => 'rocksdb');
create_window_job('t158_update', $topic, window => $update, ooo => '2 seconds', table => 't158_update',
	backend => 'memory');

# 30 keys in order, each with about 3 records per window, so that most
# records find their window made in an earlier checkpoint; every 7th record
# 15 to 50 s late (its window fired, written out and let go).
my @events;
my $n = 0;
for (my $t = 100; $t < 250; $t += 0.1)
{
	my $late = $n % 7 == 0 ? 15 + ($n % 36) : 0;
	push @events, { p => 0, k => 'k' . ($n % 30), t => sprintf('%.1f', $t - $late), a => $n % 13 };
	$n++;
}
my $end = { p => 0, k => 'zz', t => 2000, a => 1 };
events_table('t158_events', [ @events, $end ]);

# In chunks of 70 records, each read and committed before the next goes
# out, so that a window's records span checkpoints (a window holds 100).
# The final job's worker is killed after a third of them; the update job
# restarts from its checkpoint after two thirds.
produce_chunks_kill_restart($topic, \@events, $end, 70, 't158_final', 't158_update');

my $want = want_tumbling("(SELECT * FROM t158_events WHERE k <> 'zz') e", '10 seconds');
for my $table ('t158_final', 't158_update')
{
	same_rows("SELECT k, window_start, window_end, n, total FROM $table WHERE k <> 'zz'", $want,
		"$table: every window, late records included, as SQL's");
}
is(job_metric('t158_final', 'records_late'), '0', 'no record was late');
cmp_ok(psql("SELECT count(*) FROM t158_final WHERE k <> 'zz'"), '>=', 450,
	'the final job emitted its windows (30 keys, 15 windows each)');
psql("SELECT mailer.stop_job('$_')") for ('t158_final', 't158_update');
done_testing();
