# A purged window's deletion leaves the RocksDB state once compacted: the
# state's size follows the windows alive, not every window the job ever
# purged.  Each checkpoint's file lands in level 0 (or, into an empty
# database, in the last level), and level 0 compacts into the last level,
# where a deletion is dropped.  With fixed level sizes the first files went
# to levels 6, 5, 4..., level 0 compacted into level 1, and every deletion
# stayed there for good, read over by each range scan and counted in
# state_bytes.
#
# 30 waves of 5,000 keys, each wave a new tumbling window per key and the
# watermark past the window before it: 150,000 windows, each written at
# one checkpoint and deleted at a later one (the last 5,000 at the first
# tick).  Then one key's record at a time, each committed, until level 0
# has compacted: state_bytes must come down below 64 kB, the few windows
# alive then, where the deletions kept 2.47 MB with fixed level sizes.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my $topic = unique_name('t178');
my $job = 'deletions';
my $keys = 5000;
my $waves = 30;
my $small = 64 * 1024;
kafka('create-topic', $topic, 1);
window_tables($job);
create_window_job($job, $topic, table => $job, backend => 'rocksdb', ooo => '0 seconds',
	window => '{"type": "tumbling", "size": "1 second"}');

# Records of @keys at $t (seconds), committed; returns state_bytes then.
sub commit_at
{
	my ($t, $what, @keys) = @_;
	produce_events($topic, [ map { { p => 0, k => $_, t => $t } } @keys ]);
	wait_watermark($job, ev_time($t));
	is(wait_job($job), 'running', "$what committed") or return undef;
	return job_metric($job, 'state_bytes');
}

my $largest = 0;
for my $w (1 .. $waves)
{
	my $bytes = commit_at(2000 + $w + 0.5, "wave $w", map { "k$_" } 1 .. $keys) // last;
	$largest = $bytes if $bytes > $largest;
}
is(psql("SELECT count(*) || ' ' || sum(n) || ' ' || count(DISTINCT k) FROM $job"),
	($waves - 1) * $keys . ' ' . ($waves - 1) * $keys . " $keys",
	'every window but the last fired once, with its record');

# One record a checkpoint: each adds a level-0 file; with those the waves
# left there, 8 start a compaction.
my @sizes;
for my $i (1 .. 40)
{
	push @sizes, commit_at(2000 + $waves + $i + 0.5, "tick $i", 'tick') // last;
	like($sizes[-1], qr/^\d+$/, "tick $i: state_bytes is known") or last;
	last if $sizes[-1] < $small;
}
diag("state_bytes: largest during the waves $largest; after each tick @sizes");
cmp_ok($sizes[-1], '<', $small,
	'after level 0 compacted, the state is the live windows, without the deleted ones');
cmp_ok($largest, '>', 4 * $small, 'the waves made state far larger than that');
is(psql("SELECT count(*) FROM $job"), $waves * $keys + @sizes - 1, 'and the windows they ended fired');
is(psql('SELECT count(*) FROM mailer.dead_letters'), '0', 'no dead letters');

done_testing();
