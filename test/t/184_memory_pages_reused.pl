# The memory backend's tables reuse the space of the rows it deleted,
# without waiting for a vacuum: each checkpoint prunes the pages where the
# one before deleted state rows (a fired window's) and where the undo
# cleanup deleted undo rows, and gives their space to the free space map,
# where its inserts look.  Autovacuum is off on both tables here: before,
# mailer.memory_state grew by every window the job ever had until a vacuum
# came (8 MB a second for the bench's sliding job, about a minute at a
# time), and mailer.memory_undo by every epoch's undo.
#
# A tumbling job of 1-second windows: each wave a new window for each of
# 2,000 keys, the watermark past the window before, which fires and is
# deleted.  From wave 10 to wave 30 the tables must grow by a fraction of
# what those waves' new rows would take, and every window's row must be in
# the sink.  Beside it, a
# running-totals job over the same records updates its 2,000 keys' rows in
# place at every checkpoint (HOT updates, whose old versions pruning
# frees), in the same tables: new rows land on the pages it uses, and it
# finds its rows at the addresses it kept, or by SQL, never a wrong one.
# The server crashes after wave 20 (a worker killed) and both jobs reopen the state the reuse
# wrote: the totals and the windows stay exact, and amcheck finds the
# tables' pages and the undo's index sound.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
# Each checkpoint folds, so that each wave's windows are written as rows and deleted.
setting_until_exit('mailer.memory_fold_checkpoints', 1);

my $topic = unique_name('t184');
my $job = 'pages_reused';
my $keys = 2000;
my $waves = 30;
my $early = 10;
kafka('create-topic', $topic, 1);
window_tables($job);
psql("ALTER TABLE mailer.memory_state SET (autovacuum_enabled = false);
	ALTER TABLE mailer.memory_undo SET (autovacuum_enabled = false)");
create_window_job($job, $topic, table => $job, backend => 'memory', ooo => '0 seconds',
	window => '{"type": "tumbling", "size": "1 second"}');
my $totals = 'pages_reused_totals';
psql("DROP TABLE IF EXISTS $totals; CREATE TABLE $totals (k text PRIMARY KEY, n bigint, total numeric)");
create_totals_job($totals, $topic, backend => 'memory',
	aggregates => q({"n": "count(*)", "total": "sum((value->>'a')::numeric)"}));

my $pages = sub {
	psql("SELECT pg_relation_size('mailer.memory_state') / 8192 || ' ' || "
		  . "pg_relation_size('mailer.memory_undo') / 8192");
};
my ($state_early, $undo_early);
for my $w (1 .. $waves)
{
	produce_events($topic, [ map { { p => 0, k => "k$_", t => 4000 + $w + 0.5 } } 1 .. $keys ]);
	wait_watermark($job, ev_time(4000 + $w + 0.5));
	is(wait_job($job), 'running', "wave $w committed") or last;
	is(wait_job($totals), 'running', "wave $w committed by the totals") or last;
	($state_early, $undo_early) = split / /, $pages->() if $w == $early;
	if ($w == 20)
	{
		# A worker's SIGKILL restarts the server: the other worker too.
		my $totals_pid = worker_pid($totals);
		kill_worker($job);
		wait_until("$totals has a new worker", sub { my $p = worker_pid($totals); $p > 0 && $p != $totals_pid });
	}
}
my ($state_late, $undo_late) = split / /, $pages->();
diag("pages after wave $early: state $state_early, undo $undo_early; after wave $waves: "
	  . "state $state_late, undo $undo_late");
is(psql("SELECT count(*) || ' ' || sum(n) FROM $job"), ($waves - 1) * $keys . ' ' . ($waves - 1) * $keys,
	'every window but the last fired, with its record');

# The pages one wave's 2,000 window rows fill, at the table's fillfactor
# (40), with their line pointers: the window job's state holds one wave.
# Without the reuse each wave's new rows took that many new pages (717 to
# 2,050 pages here, over 20 waves of about 65); with it, a page takes new
# rows until its line pointers run out (pruning leaves a deleted row's, for
# a vacuum to free), after about ten waves' rows, so the table grows by
# about a tenth of that (207 to 360 here).
my $wave_pages = psql("SELECT ceil(sum(pg_column_size(m.*) + 4) / (8192 * 0.4)) FROM mailer.memory_state m "
	  . "WHERE job_id = (SELECT job_id FROM mailer.job WHERE name = '$job')");
cmp_ok($state_late - $state_early, '<=', ($waves - $early) * $wave_pages / 3,
	"mailer.memory_state grew by less than a third of the new rows' pages over 20 more waves "
	  . "(a wave's: $wave_pages)");
# Without the reuse, the undo grew by about what it held after wave 10
# every ten waves (373 to 1,086); with it, by 65 pages.
cmp_ok($undo_late - $undo_early, '<=', $undo_early / 2,
	'mailer.memory_undo grew by less than half its size after wave 10 over 20 more waves');
is(psql("SELECT count(*) || ' ' || min(n) || ' ' || max(n) || ' ' || sum(total) FROM $totals"),
	"$keys $waves $waves " . $keys * $waves, 'each key\'s total counts each of its records once');
is(psql('SELECT count(*) FROM mailer.memory_state'), 2 * $keys,
	'the state table holds the open windows\' rows and the totals\'');
psql('CREATE EXTENSION IF NOT EXISTS amcheck');
is(psql("SELECT count(*) FROM verify_heapam('mailer.memory_state')"), '0', 'the state table\'s pages are sound');
is(psql("SELECT count(*) FROM verify_heapam('mailer.memory_undo')"), '0', 'the undo table\'s pages are sound');
is(psql("SELECT count(*) FROM pg_index i, LATERAL bt_index_check(i.indexrelid, true) "
		  . "WHERE i.indrelid = 'mailer.memory_undo'::regclass"),
	psql("SELECT count(*) FROM pg_index WHERE indrelid = 'mailer.memory_undo'::regclass"),
	'the undo\'s index holds an entry for each of its rows');
is(psql('SELECT count(*) FROM mailer.dead_letters'), '0', 'no dead letters');

done_testing();
