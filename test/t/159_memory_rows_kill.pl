# The memory backend's heap-level checkpoint writes (src/state/
# memory_rows.c) against SQL's answer.  Running totals over 400 keys on the
# memory backend, read from a topic the test fills batch by batch (the job
# can never run ahead of a step): each key's row is updated at its address
# many times, first while a long transaction's snapshot keeps pruning from
# freeing the pages (they fill: updates that are not HOT), then with the worker killed by SIGKILL after a checkpoint wrote
# its rows and undo but before the commit, and before the writes (118
# restores after updates in place), then after a superuser's UPDATE of
# every state row (each address is stale: those keys go by SQL, and the
# next checkpoint is at the addresses again).  The worker's DEBUG1 line per
# checkpoint says which way each row went.  The totals equal SQL's over the
# orders, and each key has one row (the table has no index to see to it).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use IPC::Run;
use Time::HiRes qw(time sleep);
use MailerKafkaTest;
use MailerTest;
use Test::More;

my $BATCH = 1000;
my $topic = orders_topic('159', 1, 15 * $BATCH, 400);
test_point_release();
# Each checkpoint folds (writes the rows): the heap-level writes are what this counts.
setting_until_exit('mailer.memory_fold_checkpoints', 1);
# The worker connects as this role: its checkpoints log what they wrote.
psql("ALTER ROLE CURRENT_USER SET log_min_messages = 'debug1'");
my $job_id = totals_job('t159_totals', $topic, backend => 'memory', interval => '50 milliseconds', retain => 30);

my $feed = orders_feed('orders_159', $topic, 't159_totals', 't159_totals', $BATCH);

sub written_since
{
	my ($from) = @_;
	return memory_rows_written([$job_id], $from);
}

my $log_start = pg_log_size();
$feed->produce for 1 .. 2;
$feed->caught_up('the first orders');

# A snapshot held while four batches are written: no version the updates
# leave can go, the pages fill, and rows move to other pages (a HOT update
# never does).
psql("DROP TABLE IF EXISTS t159_before; CREATE TABLE t159_before AS "
	. "SELECT key, (ctid::text::point)[0] AS page FROM mailer.memory_state WHERE job_id = $job_id");
my ($in, $out, $err) = ("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 'held', count(*) FROM orders_159;\n", '', '');
my $holder = IPC::Run::start([ 'psql', '-X', '-q', '-A', '-t' ], '<', \$in, '>', \$out, '2>', \$err);
wait_until('the snapshot is held', sub { $holder->pump_nb; $out =~ /held/ }, 30);
my $from = pg_log_size();
for (1 .. 4)
{
	$feed->produce;
	$feed->caught_up('under the held snapshot');
}
my $w = written_since($from);
$in .= "COMMIT;\n\\q\n";
$holder->finish;
cmp_ok(psql("SELECT count(*) FROM t159_before b JOIN mailer.memory_state m ON m.job_id = $job_id "
		. "AND m.key = b.key WHERE (m.ctid::text::point)[0] <> b.page"), '>', 0,
	'updates that were not HOT moved rows to other pages');
cmp_ok($w->{updated} - $w->{hot}, '>', 0, 'the heap path updated rows that were not HOT');
cmp_ok($w->{updated}, '>=', 400, 'the heap path updated the rows at their address');
is($w->{sql}, 0, 'no row went by SQL');

for my $point (qw(memory_checkpoint_written checkpoint_after_ext_check))
{
	my $from = test_point_hold($point);
	$feed->produce;
	my $pid = test_point_wait_reached($point, $from, 60);
	ok($pid, "$point: the worker is held there");
	kill_held($pid, "$point: SIGKILL to the worker");
	$feed->caught_up("$point: after the restart");
	$feed->produce;
	$feed->caught_up("$point: the next batch");
}

# A superuser's UPDATE of every state row of the job: each address the
# worker keeps now holds a dead version, and those keys go by SQL.
psql("UPDATE mailer.memory_state SET value = value WHERE job_id = $job_id");
$from = pg_log_size();
$feed->produce;
$feed->caught_up('after the UPDATE of the state rows');
$w = written_since($from);
cmp_ok($w->{sql}, '>', 0, 'rows updated by someone else went by SQL');
$from = pg_log_size();
$feed->produce;
$feed->caught_up('the batch after');
$w = written_since($from);
cmp_ok($w->{updated}, '>', 0, 'then the rows are updated at their addresses again');
is($w->{sql}, 0, '... and none by SQL');

# A column the table gains (NOT NULL, with a default) and a CHECK
# constraint (NOT VALID): the executor fills the one and checks the other,
# so every row goes by SQL while they are there, and a row the constraint
# refuses fails the checkpoint as the SQL's would.
psql("ALTER TABLE mailer.memory_state ADD COLUMN t159_note text NOT NULL DEFAULT 'x'");
$from = pg_log_size();
$feed->produce;
$feed->caught_up('with a column added');
$w = written_since($from);
is($w->{updated} + $w->{deleted} + $w->{inserted}, 0, 'a column added: no row written at the heap level');
cmp_ok($w->{sql}, '>', 0, 'a column added: the rows went by SQL');
is(psql("SELECT count(*) FROM mailer.memory_state WHERE t159_note IS DISTINCT FROM 'x'"), '0',
	'a column added: every row keeps its value');

my $failures = psql("SELECT failures FROM mailer.job_status WHERE job_id = $job_id");
my $rows = "SELECT md5(string_agg(key::text || value::text, ',' ORDER BY key)) FROM mailer.memory_state "
	. "WHERE job_id = $job_id";
my $rows_before = psql($rows);
psql("ALTER TABLE mailer.memory_state ADD CONSTRAINT t159_check CHECK (job_id <> $job_id) NOT VALID");
$feed->produce;
wait_for_sql('a CHECK the rows violate fails the checkpoint',
	"SELECT failures > $failures AND last_error LIKE '%t159_check%' FROM mailer.job_status WHERE job_id = $job_id",
	't', 60);
is(psql('SELECT sum(orders) FROM t159_totals'), $feed->{produced} - $BATCH, 'a CHECK violated: nothing committed');
is(psql($rows), $rows_before, 'a CHECK violated: the state rows are as before');
$from = pg_log_size();
psql('ALTER TABLE mailer.memory_state DROP CONSTRAINT t159_check');
$feed->caught_up('the CHECK dropped');
$w = written_since($from);
is($w->{updated} + $w->{deleted} + $w->{inserted}, 0, 'the column still there: no row written at the heap level');

psql('ALTER TABLE mailer.memory_state DROP COLUMN t159_note');
$from = pg_log_size();
$feed->produce;
$feed->caught_up('the column dropped');
$w = written_since($from);
cmp_ok($w->{updated}, '>', 0, 'the column dropped: rows updated at their addresses again');
is($w->{sql}, 0, 'the column dropped: none by SQL');

$w = written_since($log_start);
cmp_ok($w->{updated}, '>', $w->{sql}, 'most rows were written at their address');
cmp_ok($w->{inserted}, '>=', 400, 'the new keys were inserted by the heap path');

totals_check('orders_159', 't159_totals', 'the killed and restored memory job');
is(psql("SELECT count(*) FROM mailer.memory_state WHERE job_id = $job_id"),
	psql('SELECT count(*) FROM t159_totals'), 'one state row per key');
is(psql("SELECT count(DISTINCT key) FROM mailer.memory_state WHERE job_id = $job_id"),
	psql('SELECT count(*) FROM t159_totals'), 'no key has two rows');

psql('ALTER ROLE CURRENT_USER RESET log_min_messages');
psql("SELECT mailer.drop_job('t159_totals')");
psql('DROP TABLE t159_totals, t159_before, orders_159');

done_testing();
