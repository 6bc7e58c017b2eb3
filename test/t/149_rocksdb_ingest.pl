# The RocksDB backend ingests each checkpoint's writes as one SST file
# (ingest-<epoch>.sst beside live/).  A tumbling window job over many
# checkpoints: each fired window's state and timer are deleted in a later
# file than the one that wrote them, and compaction (at 8 level-0 files)
# moves the older files down, so deletes meet their puts across files and
# levels.  Then the worker is killed at test point rocksdb_after_sst_written,
# with the file written and not ingested: the file is left, the restart
# removes it, and replay gives exactly what plain SQL computes.
# On a server of its own (MailerCluster): a SIGKILL reinitializes it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use Test::More;

mailer_node();
fresh_extension();

my $topic = unique_name('t149');
kafka('create-topic', $topic, 2);

my $per_part = 200;
my @events = random_events(seed => 149, partitions => 2, count => $per_part, step => 0.25, spread => 29,
	keys => [qw(a b c d e f g h i j k l)], amount => sub { sprintf('%.1f', ($_[0] % 1000) / 10) });
events_table('ev149', \@events);
my $nparts = 20;
my $size = $per_part / $nparts;
my @part;
for my $i (0 .. $nparts - 1)
{
	$part[$i] = [ map { my $p = $_; my @e = grep { $_->{p} == $p } @events; @e[ $i * $size .. $i * $size + $size - 1 ] } 0 .. 1 ];
}

window_tables('t149');
create_window_job('t149', $topic, table => 't149', backend => 'rocksdb',
	window => '{"type": "tumbling", "size": "10 seconds"}',
	extra_steps => q[{"filter": "value->>'k' <> 'end'"}], interval => '100 milliseconds');
my $job_id = psql("SELECT job_id FROM mailer.jobs WHERE name = 't149'");

sub max_epoch
{
	return psql("SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $job_id");
}

# Each part read and committed by a checkpoint of its own: more than 8
# ingested files over the run.
my $read = 0;
for my $i (0 .. $nparts - 2)
{
	produce_events($topic, $part[$i]);
	$read += 2 * $size;
	wait_for_sql("t149 read $read records", "SELECT records_in FROM mailer.metrics WHERE name = 't149'", $read, 120);
	wait_until("part $i committed", sub { committed_records('t149') >= $read }, 120);
}
cmp_ok(max_epoch(), '>=', $nparts - 1, 'many checkpoints, each an ingested file');
cmp_ok(psql('SELECT count(*) FROM t149'), '>', 10, 'windows fired (their state deleted) before the kill');

# The worker held with the next checkpoint's file (of some of the last
# part) written, not ingested, then killed.
my $dir = job_state_dir('t149');
my $from = test_point_hold('rocksdb_after_sst_written');
produce_events($topic, $part[ $nparts - 1 ]);
$read += 2 * $size;
my $pid = test_point_wait_reached('rocksdb_after_sst_written', $from);
ok($pid, 'the worker is held after writing the SST file');
my @left = glob("$dir/ingest-*.sst");
is(scalar(@left), 1, "the checkpoint's SST file is there, not ingested (@left)");
my $launcher = launcher_pid();
is(kill('KILL', $pid), 1, 'SIGKILL sent to the held worker');
wait_server_ready(not_launcher => $launcher);
test_point_release();
wait_until('a new worker runs', sub { worker_pid('t149') > 0 }, 120);
wait_until('the leftover SST file removed at open', sub { !-e $left[0] }, 120);
wait_for_sql("t149 read $read records again", "SELECT records_in FROM mailer.metrics WHERE name = 't149' AND state = 'running'", $read, 120);
wait_until('the last part committed after the restart', sub { committed_records('t149') >= $read }, 120);
is(scalar(my @g = glob("$dir/ingest-*.sst")), 0, 'no SST file left beside live/ after ingests');

# End markers fire every window; stop_job's final checkpoint commits.
my $end = 100000;
produce_events($topic, [ map { { p => $_, k => 'end', t => $end } } 0 .. 1 ]);
wait_watermark('t149', ev_time($end - 5));
is(psql("SELECT mailer.stop_job('t149')"), 'stopped', 't149 stopped');
is(job_metric('t149', 'records_late'), '0', 'nothing late');
same_rows('SELECT k, window_start, window_end, n, total FROM t149', want_tumbling('ev149', '10 seconds'),
	'exact results after many ingests and a kill between writing and ingesting');
is(psql('SELECT sum(n) FROM t149'), scalar(@events), 'every event counted once');

# Restarted from the stopped job's state: still exact, nothing fires twice.
psql("SELECT mailer.start_job('t149')");
wait_until('restarted', sub { worker_pid('t149') > 0 }, 120);
produce_events($topic, [ map { { p => $_, k => 'end', t => $end + 100 } } 0 .. 1 ]);
wait_watermark('t149', ev_time($end + 95));
is(psql("SELECT mailer.stop_job('t149')"), 'stopped', 't149 stopped again');
same_rows('SELECT k, window_start, window_end, n, total FROM t149', want_tumbling('ev149', '10 seconds'),
	'still exact after a restart');

done_testing();
