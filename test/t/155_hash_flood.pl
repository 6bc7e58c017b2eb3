# A producer cannot flood the worker's hash tables (base/local_hash.h).
# They hashed with PostgreSQL's unseeded hashes, so a producer could send
# keys that all land in one slot: each insert of them then walked the whole
# cluster, and simplehash, which grows a table when an insert lands too far
# from its key's home while the table is at least a tenth full, grew it up
# to tenfold.  The tables now hash with a seed drawn at random in each
# worker, and the same keys spread like any others.  The worker's memory
# contexts, logged with pg_log_backend_memory_contexts, show each table's
# size before and after the crafted keys; every key is counted once either
# way.
#
# - The keyed cache of a running-totals job keyed by text: 100 keys found
#   offline (test/hash_flood) whose cache keys' hash_bytes agree in their
#   low 17 bits.  Unseeded, they took the table of 10,000 keys from 16,384
#   slots to 131,072 (6.4 MB more).
# - The sink's rows of one key, in an upsert on a bigint key: int8's hash
#   folds the value's halves, so every (k << 32) | k hashes alike with no
#   search at all.  1,000 of them among 10,000 rows of one checkpoint took
#   the table from 16,384 slots to 131,072 (1.5 MB).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

system('make', '-s', '-C', "$ROOT/test/hash_flood") == 0 or die "could not build test/hash_flood\n";
my @crafted = split /\n/, `$ROOT/test/hash_flood/hash_flood flood 100 17`;
is(scalar(@crafted), 100, '100 crafted text keys');

fresh_extension();
drop_tables('t155');
psql("CREATE TABLE t155_totals (k text PRIMARY KEY, n bigint)");
psql("CREATE TABLE t155_rows (id bigint PRIMARY KEY, v int)");
my $totals_topic = unique_name('t155_totals');
my $rows_topic = unique_name('t155_rows');
kafka('create-topic', $totals_topic, 1);
kafka('create-topic', $rows_topic, 1);
create_totals_job('t155_totals', $totals_topic, backend => 'rocksdb');

# Waits until the job has committed what was produced, then measures its
# worker's memory contexts named $context: their bytes, and the pid.
sub produced_then_measured
{
	my ($job, $context, $what) = @_;
	is(wait_job($job), 'running', "$job: $what read and committed");
	my $pid = worker_pid($job);
	return (memory_context_bytes($pid, $context), $pid);
}

# The keyed cache.
kcat_produce($totals_topic, [ map { "key$_\t{\"k\": \"key$_\"}" } 1 .. 10000 ]);
my ($before, $pid) = produced_then_measured('t155_totals', 'mailer keyed cache table', '10,000 plain keys');
cmp_ok($before, '>=', 16384 * 56, "the cache's table holds the plain keys ($before bytes)");
kcat_produce($totals_topic, [ map { "$_\t{\"k\": \"$_\"}" } @crafted ]);
my ($after, $pid2) = produced_then_measured('t155_totals', 'mailer keyed cache table', 'the crafted keys');
is($pid2, $pid, 'the same worker measured twice');
cmp_ok($after - $before, '<', 1024 * 1024,
	"100 crafted keys grow the keyed cache's table by less than 1 MB ($before bytes, then $after)");
is(psql("SELECT count(*) || ' ' || sum(n) || ' ' || max(n) FROM t155_totals"), '10100 10100 1',
	'every key counted once');
is(psql("SELECT count(*) FROM t155_totals WHERE k LIKE 'flood%'"), '100', 'the crafted keys among them');
# The bytes test/hash_flood hashed ('A', the length as a native int32, the
# text) are the job's state keys, which the cache is keyed by: a changed
# layout would leave the tool's keys harmless and this test blind.
my $stored = rocksdb_keys('t155_totals');
SKIP:
{
	skip 'ldb (rocksdb-tools) is not installed', 1 unless $stored;
	my %have = map { $_ => 1 } @$stored;
	is(scalar(grep { $have{ '0x' . uc(unpack('H*', 'A' . pack('l', length($_)) . $_)) } } @crafted), 100,
		'the crafted keys, laid out as test/hash_flood hashed them, are the state keys');
}

# The sink's rows: 11,000 rows produced before the job starts, so that a
# fresh worker reads them at once, mostly in one checkpoint; every
# eleventh key is one that int8's hash folds to the same value.
kcat_produce($rows_topic, [ map {
	my $id = $_ % 11 == 0 ? ($_ << 32) | $_ : $_;
	"$_\t{\"id\": $id, \"v\": $_}" } 1 .. 11000 ]);
psql(sprintf(q{SELECT mailer.create_job('t155_rows', $${
	"source": {"type": "kafka", "brokers": "%s", "topic": "%s", "start": "earliest"},
	"steps": [{"map": {"id": "(value->>'id')::bigint", "v": "(value->>'v')::int"}}],
	"sink": {"type": "table", "table": "t155_rows"},
	"checkpoint": {"interval": "1 second"}}$$)}, $BROKERS, $rows_topic));
my ($rows_bytes) = produced_then_measured('t155_rows', 'mailer sink keys', '11,000 rows, 1,000 of them crafted');
cmp_ok($rows_bytes, '<', 512 * 1024,
	"the sink's key table stays under 512 kB ($rows_bytes bytes; 16,384 slots of 12 bytes hold 11,000 keys)");
is(psql("SELECT count(*) || ' ' || count(*) FILTER (WHERE id > 4294967295) || ' ' || sum(v) FROM t155_rows"),
	'11000 1000 ' . (11000 * 11001 / 2), 'every row once, the crafted ones among them');

psql("SELECT mailer.drop_job('t155_totals'); SELECT mailer.drop_job('t155_rows')");
done_testing();
