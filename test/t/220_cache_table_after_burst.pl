# The keyed cache's hash table outlives a rebuild of the cache, and a burst
# of keys does not leave it large (src/operators/keyed_cache.c,
# empty_table).  With mailer.state_cache_entries = 0 a running-totals job
# rebuilds its cache at every checkpoint and keeps no entry: the table is
# emptied with its slots kept, so the next interval does not grow it again
# through every doubling; but once an interval holds an eighth of its
# slots or fewer, the rebuild makes it anew for what the interval held.
# Checkpoints come only with input, so each one here rebuilds: no
# checkpoint without one could shrink the table instead.
#
# - 20,000 keys produced before the job starts, read in one checkpoint:
#   the table they need (32,768 slots of 56 bytes; 16,384 if the read
#   split) is still there after that checkpoint's rebuild.
# - Then five records at a time: the next rebuild makes the table small
#   again (2,048 slots, 115 kB).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

state_cache_entries_until_exit(0);
fresh_extension();
drop_tables('t220');
psql("CREATE TABLE t220_totals (k text PRIMARY KEY, n bigint)");
my $topic = unique_name('t220');
kafka('create-topic', $topic, 1);
kcat_produce($topic, [ map { "key$_\t{\"k\": \"key$_\"}" } 1 .. 20000 ]);
create_totals_job('t220_totals', $topic, interval => '2 seconds', backend => 'rocksdb');

is(wait_job('t220_totals'), 'running', 'the burst read and committed');
my $pid = worker_pid('t220_totals');
my $burst = memory_context_bytes($pid, 'mailer keyed cache table');
cmp_ok($burst, '>=', 16384 * 56,
	"after the burst's checkpoint rebuilt the cache, its table keeps the slots ($burst bytes)");

for my $round (1 .. 3)
{
	kcat_produce($topic, [ map { "key$_\t{\"k\": \"key$_\"}" } 1 .. 5 ]);
	is(wait_job('t220_totals'), 'running', "five more records read and committed ($round)");
}
is(worker_pid('t220_totals'), $pid, 'the same worker throughout');
my $after = memory_context_bytes($pid, 'mailer keyed cache table');
cmp_ok($after, '<', 512 * 1024,
	"an interval of five keys made the table small again ($burst bytes, then $after)");
is(psql("SELECT count(*) || ' ' || sum(n) || ' ' || max(n) FROM t220_totals"), '20000 20015 4',
	'every record counted once');

psql("SELECT mailer.drop_job('t220_totals')");
done_testing();
