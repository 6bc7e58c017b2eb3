# An upsert sink's rows go through the bulk path (table_multi_insert) as if
# their keys were new, and through INSERT ... ON CONFLICT once a key exists
# (connectors/sink_table.c, bulk_attempt_failed).  What the owner sees is
# the statement's: rows of new keys are inserted, rows of existing keys
# update theirs (and a flush of new keys takes the bulk path again later),
# in a flush of more than one chunk too, a row the table refuses is a dead
# letter and the others are written, a key another transaction inserts at
# the same time is updated, the statement's UPDATE privilege is needed even
# when every key is new, a worker killed after the bulk insert loses
# nothing, and a sink of key columns only (DO NOTHING) keeps the rows that
# exist.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $owner = 't116_owner';
fresh_with_owner('t116', $owner);
my $topic = unique_name('t116');
kafka('create-topic', $topic, 1);
psql("CREATE TABLE t116_up (k int PRIMARY KEY, v int CHECK (v <> 13), note text DEFAULT 'd');
      INSERT INTO t116_up (k, v, note) SELECT g, 0, 'before' FROM generate_series(1, 5) g;
      GRANT INSERT, SELECT, UPDATE ON t116_up TO $owner");

# Records {"k": k, "v": v}, one per pair; %produced: every k sent.
my %produced;
sub produce
{
	my (@pairs) = @_;
	my @lines;
	while (my ($k, $v) = splice(@pairs, 0, 2))
	{
		push @lines, "k$k\t{\"k\": $k, \"v\": $v}";
		$produced{$k} = 1;
	}
	kcat_produce($topic, \@lines);
}

sub rows
{
	my ($where) = @_;
	return psql("SELECT string_agg(k || ':' || v || ':' || note, ' ' ORDER BY k) FROM t116_up WHERE $where");
}

sub pairs { my ($from, $to, $plus) = @_; return map { ($_, $_ + $plus) } $from .. $to }

# New keys: the bulk path, and the rows are the statement's (the default filled).
my $from = test_point_hold('sink_after_bulk_insert');
psql_as($owner, qq{SELECT mailer.create_job('j116', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	"steps": [{"map": {"k": "(value->>'k')::int", "v": "(value->>'v')::int"}}],
	"sink": {"type": "table", "table": "t116_up"}, "on_error": "dead_letter",
	"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
produce(pairs(100, 149, 0));
ok(test_point_wait_reached('sink_after_bulk_insert', $from, 60),
	'the rows of new keys go through the bulk path, not the INSERT');
test_point_release();
is(wait_job('j116'), 'running', 'the job commits its input');
is(psql("SELECT count(*) || ' ' || count(*) FILTER (WHERE v = k AND note = 'd') FROM t116_up WHERE k >= 100"),
	'50 50', 'every new key is a row with its value and the default');
is(rows('k <= 5'), join(' ', map { "$_:0:before" } 1 .. 5), 'the rows from before are untouched');

# Existing keys with new ones in one flush: each existing row is updated,
# not duplicated, and the new ones are inserted.
produce(pairs(1, 5, 1000), pairs(200, 204, 1000), pairs(120, 122, 2000));
is(wait_job('j116'), 'running', 'the job commits existing and new keys');
is(rows('k <= 5'), join(' ', map { "$_:" . ($_ + 1000) . ':before' } 1 .. 5),
	'the existing keys are updated, their other columns kept');
is(rows('k BETWEEN 120 AND 122'), join(' ', map { "$_:" . ($_ + 2000) . ':d' } 120 .. 122),
	'so are keys the job wrote itself');
is(rows('k >= 200'), join(' ', map { "$_:" . ($_ + 1000) . ':d' } 200 .. 204), 'the new keys are inserted');
is(psql("SELECT count(*) FROM t116_up"), 5 + 50 + 5, 'one row per key');

# After a key found to exist, a later flush of new keys takes the bulk
# path again: batches of new keys until one is held there.
$from = test_point_hold('sink_after_bulk_insert');
my $next = 300;
my $reached;
for my $try (1 .. 5)
{
	produce(pairs($next, $next + 9, 0));
	$next += 10;
	my $want = $next - 300;
	wait_until("batch $try written, or held on the bulk path", sub {
		($reached) = pg_log_since($from) =~ /\[(\d+)\] [^\n]*mailer test point sink_after_bulk_insert reached/;
		return $reached || psql("SELECT count(*) FROM t116_up WHERE k >= 300") == $want;
	}, 60);
	last if $reached;
}
ok($reached, 'after a key found to exist, a later flush of new keys takes the bulk path again');
test_point_release();
is(wait_job('j116'), 'running', 'the job commits them');
is(psql("SELECT count(*) FROM t116_up WHERE k >= 300 AND v = k"), $next - 300, 'every one is a row');

# The statement's privileges: UPDATE taken away, new keys alone still fail
# the checkpoint, as INSERT ... ON CONFLICT DO UPDATE does.
my $ckpts = "SELECT max(epoch) FROM mailer.checkpoints WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'j116')";
my $epoch_before = psql($ckpts);
psql("REVOKE UPDATE ON t116_up FROM $owner");
produce(pairs(600, 609, 0));
my $info = wait_job_state('j116', qr/^restarting$/, 60);
# The restarted worker's plan check may have said it in its own words since.
like($info->{last_error}, qr/permission denied for table t116_up|may not update column "v" of table public\.t116_up/,
	"UPDATE revoked: the job reports it: $info->{last_error}");
is(psql("SELECT count(*) FROM t116_up WHERE k >= 600"), 0, 'no row of new keys is written without UPDATE');
is(psql($ckpts), $epoch_before, 'no checkpoint commits');
psql("GRANT UPDATE ON t116_up TO $owner");
wait_job_state('j116', qr/^running$/, 60);
is(wait_job('j116'), 'running', 'UPDATE granted again: the job commits');
is(psql("SELECT count(*) FROM t116_up WHERE k >= 600 AND v = k"), 10, 'the rows are written');

# Killed once the bulk insert is done, before the checkpoint commits: the
# job, restarted, writes the rows from its last checkpoint.
$from = test_point_hold('sink_after_bulk_insert');
produce(pairs(700, 749, 7));
my $pid = test_point_wait_reached('sink_after_bulk_insert', $from, 60);
ok($pid, 'the worker is held after the bulk insert, before the commit');
is(kill('KILL', $pid), 1, 'SIGKILL sent to it');
wait_until('the server restarted after the crash', sub { my $p = worker_pid('j116'); $p > 0 && $p != $pid }, 120);
test_point_release();
is(wait_job('j116'), 'running', 'the job recovers and commits');
is(psql("SELECT count(*) FROM t116_up WHERE k BETWEEN 700 AND 749 AND v = k + 7"), 50, 'every row is there with its value');
# More rows than a chunk (10,000), a key of a later chunk existing: every
# row is written once, the existing ones updated.
psql("INSERT INTO t116_up SELECT g, 0, 'before' FROM generate_series(30000, 30004) g");
produce(pairs(20000, 34999, 3));
is(wait_job('j116'), 'running', 'the job commits 15,000 rows');
is(psql("SELECT count(*) || ' ' || count(*) FILTER (WHERE v = k + 3) FROM t116_up WHERE k >= 20000"), '15000 15000',
	'every key is one row with its value');
is(rows('k BETWEEN 30000 AND 30004'), join(' ', map { "$_:" . ($_ + 3) . ':before' } 30000 .. 30004),
	'the keys that existed are updated');

# A row the table refuses among new keys: a dead letter, the others written.
produce(pairs(400, 409, 0), 410, 13, pairs(411, 419, 0), 1, 13);
is(wait_job('j116'), 'running', 'the job goes on past the refused rows');
is(psql("SELECT count(*) FROM t116_up WHERE k BETWEEN 400 AND 419"), 19, 'the rows the table accepts are written');
is(rows('k IN (1, 410)'), '1:1001:before', 'the refused rows wrote nothing');
my @dl = @{ dead_letters('j116') };
is(scalar(@dl), 2, 'the two refused rows are dead letters');
like($dl[0]{error} // '', qr/violates check constraint/, "... with the INSERT's error: " . ($dl[0]{error} // ''));

# A key another transaction inserts, uncommitted, while the job writes it:
# the job waits for it, and then updates the row it committed.
my $other = psql_session("BEGIN; INSERT INTO t116_up VALUES (500, -1, 'other'); SELECT 'inserted';\n");
wait_until('the other transaction inserted key 500', sub { psql_session_output($other) =~ /inserted/ });
produce(pairs(500, 501, 0));
wait_until('the worker waits for the other transaction', sub {
	psql("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
	       WHERE a.backend_type LIKE 'mailer%' AND l.locktype = 'transactionid' AND NOT l.granted") > 0 });
psql_session_finish($other, "COMMIT;\n");
is(wait_job('j116'), 'running', 'the job commits once the other transaction did');
is(rows('k IN (500, 501)'), '500:500:other 501:501:d', "the other transaction's row is updated, the new key inserted");

accounting_ok('j116');

psql("SELECT mailer.drop_job('j116')");

# A sink of key columns only: ON CONFLICT DO NOTHING.  Over the whole
# topic, the keys that exist keep their rows, every other key is a row.
psql("CREATE TABLE t116_keys (k int PRIMARY KEY, note text DEFAULT 'd');
      INSERT INTO t116_keys SELECT g, 'before' FROM generate_series(1, 5) g;
      GRANT INSERT, SELECT ON t116_keys TO $owner");
psql_as($owner, qq{SELECT mailer.create_job('j116k', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic", "start": "earliest"},
	"steps": [{"map": {"k": "(value->>'k')::int"}}], "sink": {"type": "table", "table": "t116_keys"},
	"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
is(wait_job('j116k'), 'running', 'the key-only job commits the topic');
my %want = (%produced, map { ($_ => 1) } 1 .. 5);
is(psql("SELECT count(*) || ' ' || count(*) FILTER (WHERE note = 'd') FROM t116_keys"),
	scalar(keys %want) . ' ' . (scalar(keys %want) - 5), 'one row per key, new keys inserted');
is(psql("SELECT string_agg(k || ':' || note, ' ' ORDER BY k) FROM t116_keys WHERE k <= 5"),
	join(' ', map { "$_:before" } 1 .. 5), 'the keys that existed keep their rows');
psql("SELECT mailer.drop_job('j116k')");
done_testing();
