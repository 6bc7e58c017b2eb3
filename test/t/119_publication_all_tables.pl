# Under a publication FOR ALL TABLES (what a change-data-capture tool
# makes), PostgreSQL refuses UPDATE and DELETE on a table without a replica
# identity.  mailer.memory_state, mailer.memory_undo and mailer.dead_letters
# have no primary key; their identity is FULL (docs/ARCHITECTURE.md,
# "Tables").  On a server of its own at wal_level = logical, with a
# logical replication slot (test_decoding), a memory-backend job runs under
# such a publication: its checkpoints update the state rows at their
# addresses, the undo of epochs no longer retained is deleted, a bad record
# is dead-lettered, restore_job rewinds the state and deletes the dead
# letters after the epoch, and drop_job deletes it all; a window job
# deletes the rows of the windows it fired at their addresses.  Each update
# and delete the slot decodes carries the whole old row, as a subscriber
# needs it.  The heap-level writes log what the identity asks for but check
# nothing, so they run the executor's check: a DBA's DEFAULT identity, and
# a publication's column list, fail the checkpoint with PostgreSQL's own
# error instead of publishing changes no subscriber could apply; without a
# publication, DEFAULT keeps the heap path.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerKafkaTest;
use MailerTest;
use Test::More;

mailer_node('t119', "wal_level = logical\n");
# Each checkpoint folds: the rows' heap-level updates and deletes are what this checks.
setting_until_exit('mailer.memory_fold_checkpoints', 1);
my $BATCH = 500;
my $topic = orders_topic('119', 1, 20 * $BATCH, 100);
# The worker connects as this role: its checkpoints log what they wrote.
psql("ALTER ROLE CURRENT_USER SET log_min_messages = 'debug1'");
psql('CREATE PUBLICATION t119_all FOR ALL TABLES');
psql("SELECT pg_create_logical_replication_slot('t119', 'test_decoding')");

is(psql("SELECT string_agg(relname || '=' || relreplident::text, ',' ORDER BY relname) FROM pg_class "
		. "WHERE relnamespace = 'mailer'::regnamespace "
		. "AND relname IN ('dead_letters', 'memory_state', 'memory_undo', 'memory_redo')"),
	'dead_letters=f,memory_redo=f,memory_state=f,memory_undo=f', 'the tables without a primary key have replica identity FULL');

my $job_id = totals_job('t119_totals', $topic, backend => 'memory', interval => '50 milliseconds', retain => 10);
my $feed = orders_feed('orders_119', $topic, 't119_totals', 't119_totals', $BATCH);

# The next batch fails its checkpoint with an error matching $error (a
# regular expression, as mailer.job_status.last_error holds it), and
# nothing of it commits.
sub checkpoint_refused
{
	my ($what, $error) = @_;
	my $failures = psql("SELECT failures FROM mailer.job_status WHERE job_id = $job_id");
	$feed->produce;
	wait_for_sql("$what: the checkpoint fails",
		"SELECT failures > $failures AND last_error ~ '$error' FROM mailer.job_status WHERE job_id = $job_id",
		't', 60);
	is(psql('SELECT sum(orders) FROM t119_totals'), $feed->{produced} - $BATCH, "$what: nothing committed");
}

# The next batch commits, its rows updated at their addresses, none by SQL.
sub heap_path_batch
{
	my ($what) = @_;
	my $from = pg_log_size();
	$feed->produce;
	$feed->caught_up($what);
	my $w = memory_rows_written([$job_id], $from);
	cmp_ok($w->{updated}, '>', 0, "$what: rows updated at their addresses");
	is($w->{sql}, 0, "$what: none by SQL");
}

my $from = pg_log_size();
for (1 .. 12)
{
	$feed->produce;
	$feed->caught_up("batch $_");
}
my $w = memory_rows_written([$job_id], $from);
cmp_ok($w->{updated}, '>', 0, 'the checkpoints updated state rows at their addresses');
is($w->{sql}, 0, 'no row went by SQL');

# The undo of epochs no retained checkpoint needs is deleted after each
# commit (mem_committed): its DELETE is what the publication refused.
wait_for_sql('the undo of epochs no longer retained is deleted',
	"SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id AND epoch <= "
	  . "(SELECT min(epoch) FROM mailer.checkpoints WHERE job_id = $job_id)", '0', 60);
cmp_ok(job_epoch('t119_totals'), '>=', 12, 'a checkpoint per batch at least');
cmp_ok(psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = $job_id"), '<=', 11,
	'old checkpoints were let go');
is(psql("SELECT failures FROM mailer.job_status WHERE job_id = $job_id"), '0', 'the job never failed');

# A record that is not JSON, then a batch: a dead letter and updates in
# the epochs after $before (an idle job takes no checkpoint).
my $before = job_epoch('t119_totals');
kcat_produce_raw($topic, "t119-bad\tnot json\n");
$feed->produce;
$feed->caught_up('the bad record and a batch');
is(scalar(@{ dead_letters('t119_totals') }), 1, 'the bad record is dead-lettered');
cmp_ok(psql("SELECT epoch FROM mailer.dead_letters WHERE job_id = $job_id"), '>', $before,
	'the dead letter is in a later epoch');

# restore_job to $before (still retained: the job keeps 10, and took a
# few since, the stop's included): it rewinds the keys the later epochs
# changed (their rows deleted and inserted again), deletes the undo it
# used and the dead letter, which is read again.
is(psql("SELECT mailer.stop_job('t119_totals')"), 'stopped', 'stopped');
is(psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = $job_id AND epoch = $before"), '1',
	'the epoch before the dead letter is still retained');
is(psql("SELECT mailer.restore_job('t119_totals', $before)"), $before, 'restore_job under the publication');
is(psql("SELECT count(*) FROM mailer.dead_letters WHERE job_id = $job_id"), '0',
	'restore_job deleted the dead letter of the later epoch');
psql("SELECT mailer.start_job('t119_totals')");
$feed->caught_up('after the restore');
is(scalar(@{ dead_letters('t119_totals') }), 1, 'after the restore: the bad record dead-lettered once');
totals_check('orders_119', 't119_totals', 'after the restore', "order_id <= $feed->{produced}");

# A window job on the memory backend: windows of the first events are
# committed, then fired by later events, and their rows deleted at their
# addresses (heap_delete).
my $wtopic = unique_name('t119w');
kafka('create-topic', $wtopic, 1);
window_tables('t119_windows');
create_window_job('t119_win', $wtopic, table => 't119_windows', backend => 'memory',
	window => '{"type": "tumbling", "size": "10 seconds"}', interval => '50 milliseconds');
my $win_id = psql("SELECT job_id FROM mailer.job WHERE name = 't119_win'");
$from = pg_log_size();
produce_events($wtopic, [ map { { p => 0, k => "k$_", t => 1 + $_ / 10 } } 1 .. 20 ]);
is(wait_job('t119_win'), 'running', 'the window job read the first events');
produce_events($wtopic, [ map { { p => 0, k => "k$_", t => 30 + $_ / 10 } } 1 .. 20 ]);
is(wait_job('t119_win'), 'running', 'the window job read the later events');
wait_for_sql('the first windows are out', 'SELECT count(*) FROM t119_windows', '20', 60);
$w = memory_rows_written([$win_id], $from);
cmp_ok($w->{deleted}, '>=', 20, "the fired windows' rows were deleted at their addresses");

# What the slot decoded of the three tables: every update and delete
# carries the whole old row (test_decoding prints an update's after
# "old-key:", a delete's alone; "(no-tuple-data)" when none was logged).
my $jobs = "(?:$job_id|$win_id)";
my $bytea = q{'\\\\x[0-9a-f]*'};
my %whole = (
	'memory_state UPDATE' => qr/^UPDATE: old-key: job_id\[bigint\]:$jobs key\[bytea\]:$bytea value\[bytea\]:$bytea key_group\[integer\]:\d+ new-tuple: job_id\[bigint\]:$jobs key\[bytea\]:$bytea value\[bytea\]:$bytea key_group\[integer\]:\d+$/,
	'memory_state DELETE' => qr/^DELETE: job_id\[bigint\]:$jobs key\[bytea\]:$bytea value\[bytea\]:$bytea key_group\[integer\]:\d+$/,
	'memory_undo DELETE' => qr/^DELETE: job_id\[bigint\]:$jobs epoch\[bigint\]:\d+ key_group\[integer\]:\d+ keys\[bytea\[\]\]:'\{.+\}' old_values\[bytea\[\]\]:'\{.+\}'$/,
	'dead_letters DELETE' => qr/^DELETE: job_id\[bigint\]:$jobs at\[timestamp with time zone\]:'[^']+' epoch\[bigint\]:\d+ topic\[text\]:'[^']+' partition\[integer\]:\d+ "?offset"?\[bigint\]:\d+ key\[bytea\]:$bytea value\[bytea\]:$bytea stage\[text\]:'[^']+' error\[text\]:'.+'$/,
);
my %decoded;
my $window_deletes = 0;
for my $line (split /\n/, psql("SELECT data FROM pg_logical_slot_get_changes('t119', NULL, NULL) "
		. "WHERE data ~ '^table mailer\\.(memory_state|memory_undo|dead_letters): (UPDATE|DELETE):'"))
{
	my ($table, $op, $rest) = $line =~ /^table mailer\.(\w+): ((\w+):.*)$/ ? ($1, $3, $2) : ('?', '?', '');
	my $change = "$table $op";
	my $ok = $whole{$change} && $rest =~ $whole{$change};
	diag("not a whole old row: $line") if !$ok && !$decoded{$change}{'no old row'};
	$decoded{$change}{ $ok ? 'old row' : 'no old row' }++;
	$window_deletes++ if $ok && $change eq 'memory_state DELETE' && $rest =~ /^DELETE: job_id\[bigint\]:$win_id /;
}
psql("SELECT pg_drop_replication_slot('t119')");
diag(explain(\%decoded));
for my $change ('memory_state UPDATE', 'memory_state DELETE', 'memory_undo DELETE', 'dead_letters DELETE')
{
	cmp_ok($decoded{$change}{'old row'} // 0, '>', 0, "decoded: $change with the old row");
	is($decoded{$change}{'no old row'} // 0, 0, "decoded: no $change without it");
}
cmp_ok($window_deletes, '>=', 20, "decoded: the fired windows' rows deleted at the heap level, with the old row");

# A DBA's DEFAULT identity: the heap path would update rows whose changes
# a subscriber cannot find.  The executor's check refuses the update, as
# SQL's would: the checkpoint fails and commits nothing (and each restart
# fails at its open, whose rewind deletes by SQL).
psql('ALTER TABLE mailer.memory_state REPLICA IDENTITY DEFAULT');
checkpoint_refused('identity DEFAULT',
	'^cannot (update|delete from) table "memory_state" because it does not have a replica identity');
psql('ALTER TABLE mailer.memory_state REPLICA IDENTITY FULL');
$feed->caught_up('identity FULL again');
heap_path_batch('the batch after identity FULL');
totals_check('orders_119', 't119_totals', 'the memory job under the publication', "order_id <= $feed->{produced}");

# A publication of the state table with a column list: PostgreSQL 15
# refuses UPDATE and DELETE of a FULL identity table under any, and the
# heap path, which had nothing to send to SQL, refuses too.
psql('CREATE PUBLICATION t119_cols FOR TABLE mailer.memory_state (job_id, key)');
checkpoint_refused('a column list', '^cannot (update|delete from) table "memory_state": '
	  . 'Column list used by the publication does not cover the replica identity');
psql('DROP PUBLICATION t119_cols');
$feed->caught_up('the column list dropped');

# No publication: DEFAULT identifies no row, and nothing needs it to.
psql('DROP PUBLICATION t119_all');
psql('ALTER TABLE mailer.memory_state REPLICA IDENTITY DEFAULT');
heap_path_batch('identity DEFAULT, no publication');
psql('ALTER TABLE mailer.memory_state REPLICA IDENTITY FULL');

# Under the publication again, drop_job deletes the jobs' state, undo and
# dead letters (the last through the foreign key's cascade).
psql('CREATE PUBLICATION t119_all FOR ALL TABLES');
psql("SELECT mailer.drop_job('t119_totals')");
psql("SELECT mailer.drop_job('t119_win')");
is(psql("SELECT (SELECT count(*) FROM mailer.memory_state WHERE job_id = $job_id) + "
		. "(SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id) + "
		. "(SELECT count(*) FROM mailer.dead_letters WHERE job_id = $job_id) + "
		. "(SELECT count(*) FROM mailer.memory_state WHERE job_id = $win_id)"),
	'0', 'drop_job under the publication: nothing of the job is left');


done_testing();
