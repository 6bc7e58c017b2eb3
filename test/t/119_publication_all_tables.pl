# Under a publication FOR ALL TABLES (what a change-data-capture tool
# makes), PostgreSQL refuses UPDATE and DELETE on a table without a replica
# identity.  mailer.memory_state, mailer.memory_undo and mailer.dead_letters
# have no primary key; their identity is FULL (docs/ARCHITECTURE.md,
# "Tables").  On a server of its own at wal_level = logical, with a
# logical replication slot (test_decoding), a memory-backend job runs under
# such a publication: its checkpoints update the state rows at their
# addresses, the undo of epochs no longer retained is deleted, a bad record
# is dead-lettered, restore_job rewinds the state and deletes the dead
# letters after the epoch, and drop_job deletes it all.  Each update and
# delete the slot decodes carries the old row, as a subscriber needs it.
# Then a DBA sets the state table's identity back to DEFAULT: the heap-level
# writes, which log what the identity asks for but check nothing, refuse as
# the executor does, and the checkpoint fails with PostgreSQL's own error
# instead of publishing updates no subscriber could apply; FULL again, the
# job catches up with every order counted once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerKafkaTest;
use MailerTest;
use Test::More;

mailer_node('t119', "wal_level = logical\n");
my $BATCH = 500;
my $topic = orders_topic('119', 1, 12 * $BATCH, 100);
# The worker connects as this role: its checkpoints log what they wrote.
psql("ALTER ROLE CURRENT_USER SET log_min_messages = 'debug1'");
psql('CREATE PUBLICATION t119_all FOR ALL TABLES');
psql("SELECT pg_create_logical_replication_slot('t119', 'test_decoding')");

is(psql("SELECT string_agg(relname || '=' || relreplident::text, ',' ORDER BY relname) FROM pg_class "
		. "WHERE relnamespace = 'mailer'::regnamespace "
		. "AND relname IN ('dead_letters', 'memory_state', 'memory_undo')"),
	'dead_letters=f,memory_state=f,memory_undo=f', 'the tables without a primary key have replica identity FULL');

totals_sink('t119_totals');
psql("SELECT mailer.create_job('t119_totals', \$\$"
	. totals_spec($topic, 't119_totals', backend => 'memory', interval => '50 milliseconds', retain => 5)
	. "\$\$)");
my $job_id = psql("SELECT job_id FROM mailer.job WHERE name = 't119_totals'");
my $feed = orders_feed('orders_119', $topic, 't119_totals', 't119_totals', $BATCH);

my $from = pg_log_size();
for (1 .. 7)
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
cmp_ok(psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = $job_id"), '<=', 7,
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

# restore_job to $before (still retained: the job keeps 5, and took at
# most 3 since, the stop's included): it rewinds the keys the later epochs
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

# What the slot decoded of the three tables: every update and delete
# carries the old row, all its columns (test_decoding prints an update's
# as "old-key:", a delete's alone).
my %decoded;
for my $line (split /\n/, psql("SELECT data FROM pg_logical_slot_get_changes('t119', NULL, NULL) "
		. "WHERE data ~ '^table mailer\\.(memory_state|memory_undo|dead_letters): (UPDATE|DELETE):'"))
{
	my ($table, $op) = $line =~ /^table mailer\.(\w+): (\w+):/;
	my $with_old = $line =~ /^table mailer\.\w+: (?:UPDATE: old-key|DELETE): job_id\[bigint\]:$job_id /
	  && ($table eq 'dead_letters' || $line =~ / key_group\[integer\]:\d+/)
	  && ($op ne 'UPDATE' || $line =~ / new-tuple: /);
	$decoded{"$table $op"}{ $with_old ? 'old row' : 'no old row' }++;
}
diag(explain(\%decoded));
for my $change ('memory_state UPDATE', 'memory_state DELETE', 'memory_undo DELETE', 'dead_letters DELETE')
{
	cmp_ok($decoded{$change}{'old row'} // 0, '>', 0, "decoded: $change with the old row");
	is($decoded{$change}{'no old row'} // 0, 0, "decoded: no $change without it");
}

# A DBA's DEFAULT identity: the heap path would update rows whose changes
# a subscriber cannot find.  The writes go to SQL, which the publication
# refuses: the checkpoint fails and commits nothing.
psql('ALTER TABLE mailer.memory_state REPLICA IDENTITY DEFAULT');
my $failures = psql("SELECT failures FROM mailer.job_status WHERE job_id = $job_id");
$feed->produce;
wait_for_sql('the checkpoint fails on the replica identity',
	"SELECT failures > $failures AND last_error LIKE '%replica identity%' "
	  . "FROM mailer.job_status WHERE job_id = $job_id", 't', 60);
is(psql('SELECT sum(orders) FROM t119_totals'), $feed->{produced} - $BATCH, 'identity DEFAULT: nothing committed');
psql('ALTER TABLE mailer.memory_state REPLICA IDENTITY FULL');
$feed->caught_up('identity FULL again');
$from = pg_log_size();
$feed->produce;
$feed->caught_up('the batch after');
$w = memory_rows_written([$job_id], $from);
cmp_ok($w->{updated}, '>', 0, 'identity FULL again: rows updated at their addresses');
is($w->{sql}, 0, 'identity FULL again: none by SQL');
totals_check('orders_119', 't119_totals', 'the memory job under the publication', "order_id <= $feed->{produced}");

# drop_job deletes the job's state, undo and dead letters (the last
# through the foreign key's cascade).
psql("SELECT mailer.drop_job('t119_totals')");
is(psql("SELECT (SELECT count(*) FROM mailer.memory_state WHERE job_id = $job_id) + "
		. "(SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id) + "
		. "(SELECT count(*) FROM mailer.dead_letters WHERE job_id = $job_id)"),
	'0', 'drop_job under the publication: nothing of the job is left');


done_testing();
