# Under a publication FOR ALL TABLES (what a change-data-capture tool
# makes), PostgreSQL refuses UPDATE and DELETE on a table without a replica
# identity.  mailer.memory_state, mailer.memory_undo and mailer.dead_letters
# have no primary key; their identity is FULL (docs/ARCHITECTURE.md,
# "Tables").  A memory-backend job runs there: its checkpoints update the
# state rows at their addresses, the undo of epochs no longer retained is
# deleted, a bad record is dead-lettered, restore_job rewinds the state and
# deletes the dead letters after the epoch, and drop_job deletes it all.
# Then a DBA sets the state table's identity back to DEFAULT: the heap-level
# writes, which do not check it, stop, and the checkpoint fails with
# PostgreSQL's own error instead of publishing updates no subscriber could
# apply; FULL again, the job catches up with every order counted once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerKafkaTest;
use MailerTest;
use Test::More;

my $BATCH = 500;
my $topic = orders_topic('118', 1, 8 * $BATCH, 100);
# The worker connects as this role: its checkpoints log what they wrote.
psql("ALTER ROLE CURRENT_USER SET log_min_messages = 'debug1'");
psql('DROP PUBLICATION IF EXISTS t118_all');
psql('CREATE PUBLICATION t118_all FOR ALL TABLES');
# Whatever happens below, the next test files must not run under it.
END { eval { psql('DROP PUBLICATION IF EXISTS t118_all') } }

is(psql("SELECT string_agg(relname || '=' || relreplident::text, ',' ORDER BY relname) FROM pg_class "
		. "WHERE relnamespace = 'mailer'::regnamespace "
		. "AND relname IN ('dead_letters', 'memory_state', 'memory_undo')"),
	'dead_letters=f,memory_state=f,memory_undo=f', 'the tables without a primary key have replica identity FULL');

totals_sink('t118_totals');
psql("SELECT mailer.create_job('t118_totals', \$\$"
	. totals_spec($topic, 't118_totals', backend => 'memory', interval => '50 milliseconds', retain => 3)
	. "\$\$)");
my $job_id = psql("SELECT job_id FROM mailer.job WHERE name = 't118_totals'");
my $feed = orders_feed('orders_118', $topic, 't118_totals', 't118_totals', $BATCH);

my $from = pg_log_size();
for (1 .. 3)
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
cmp_ok(psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = $job_id"), '<=', 5,
	'old checkpoints were let go');
is(psql("SELECT failures FROM mailer.job_status WHERE job_id = $job_id"), '0', 'the job never failed');

# A record that is not JSON: a dead letter, in the epoch after $before
# (an idle job takes no checkpoint).
my $before = job_epoch('t118_totals');
kcat_produce_raw($topic, "t118-bad\tnot json\n");
is(psql("SELECT mailer.wait_job('t118_totals', '5 minutes')"), 'running', 'the bad record read');
is(scalar(@{ dead_letters('t118_totals') }), 1, 'the bad record is dead-lettered');

is(psql("SELECT epoch FROM mailer.dead_letters WHERE job_id = $job_id"), $before + 1,
	'the dead letter is in the next epoch');

# restore_job to the epoch before the dead letter's (still retained: the
# job keeps 3, and took 2 since): it deletes the state rows and undo the
# later epochs wrote, and the dead letter, which is read again.
is(psql("SELECT mailer.stop_job('t118_totals')"), 'stopped', 'stopped');
is(psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = $job_id AND epoch = $before"), '1',
	'the epoch before the dead letter is retained');
is(psql("SELECT mailer.restore_job('t118_totals', $before)"), $before, 'restore_job under the publication');
is(psql("SELECT count(*) FROM mailer.dead_letters WHERE job_id = $job_id"), '0',
	'restore_job deleted the dead letter of the later epoch');
psql("SELECT mailer.start_job('t118_totals')");
$feed->caught_up('after the restore');
is(scalar(@{ dead_letters('t118_totals') }), 1, 'after the restore: the bad record dead-lettered once');
totals_check('orders_118', 't118_totals', 'after the restore', "order_id <= $feed->{produced}");

# A DBA's DEFAULT identity: the heap path would update rows whose changes
# a subscriber cannot find.  The writes go to SQL, which the publication
# refuses: the checkpoint fails and commits nothing.
psql('ALTER TABLE mailer.memory_state REPLICA IDENTITY DEFAULT');
my $failures = psql("SELECT failures FROM mailer.job_status WHERE job_id = $job_id");
$feed->produce;
wait_for_sql('the checkpoint fails on the replica identity',
	"SELECT failures > $failures AND last_error LIKE '%replica identity%' "
	  . "FROM mailer.job_status WHERE job_id = $job_id", 't', 60);
is(psql('SELECT sum(orders) FROM t118_totals'), $feed->{produced} - $BATCH, 'identity DEFAULT: nothing committed');
psql('ALTER TABLE mailer.memory_state REPLICA IDENTITY FULL');
$feed->caught_up('identity FULL again');
$from = pg_log_size();
$feed->produce;
$feed->caught_up('the batch after');
$w = memory_rows_written([$job_id], $from);
cmp_ok($w->{updated}, '>', 0, 'identity FULL again: rows updated at their addresses');
is($w->{sql}, 0, 'identity FULL again: none by SQL');
totals_check('orders_118', 't118_totals', 'the memory job under the publication', "order_id <= $feed->{produced}");

# drop_job deletes the job's state, undo and dead letters (the last
# through the foreign key's cascade).
psql("SELECT mailer.drop_job('t118_totals')");
is(psql("SELECT (SELECT count(*) FROM mailer.memory_state WHERE job_id = $job_id) + "
		. "(SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id) + "
		. "(SELECT count(*) FROM mailer.dead_letters WHERE job_id = $job_id)"),
	'0', 'drop_job under the publication: nothing of the job is left');

psql('ALTER ROLE CURRENT_USER RESET log_min_messages');
psql('DROP PUBLICATION t118_all');
psql('DROP TABLE t118_totals, orders_118');

done_testing();
