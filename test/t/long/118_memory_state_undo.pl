# The memory backend's rows and undo (docs/ARCHITECTURE.md, "State
# layout"): one row per key updated in place, and the undo of each retained
# epoch.  A sliding-window job (puts and deletes) on the memory backend is
# killed at each step of a checkpoint and of the undo cleanup after it,
# then stopped and restored to its oldest retained epoch; at the end its
# windows equal those of the same job on RocksDB, which nothing
# interrupts.  Each key has one row and no undo older than the retained
# epochs is left; a running-totals job's rows are updated in place, HOT.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use Test::More;

my $N = 30_000;

fresh_extension();
test_point_release();
psql(<<'SQL');
DROP TABLE IF EXISTS t118_mem, t118_ref;
CREATE TABLE t118_mem (customer_id text, window_start timestamptz, window_end timestamptz,
	n bigint, total numeric, PRIMARY KEY (customer_id, window_start));
CREATE TABLE t118_ref (LIKE t118_mem INCLUDING ALL);
SQL

sub job
{
	my ($name, $backend, $rate) = @_;
	psql(qq{SELECT mailer.create_job('$name', \$spec\${"source": {"type": "generator", "events": $N,
			"keys": 300, "seed": 118, "start_time": "2030-01-01 00:00:00+00", "step": "50 milliseconds",
			"rate": $rate},
		"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}},
				  {"window": {"type": "sliding", "size": "1 minute", "slide": "20 seconds"}},
				  {"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}],
		"sink": {"type": "table", "table": "$name"}, "state": {"backend": "$backend"},
		"checkpoint": {"interval": "100 milliseconds", "retain": 20}}\$spec\$)});
	return psql("SELECT job_id FROM mailer.job WHERE name = '$name'");
}

job('t118_ref', 'rocksdb', 100_000);
my $job_id = job('t118_mem', 'memory', 1000);
my $max_epoch = "SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $job_id";
wait_for_sql('t118_mem past its first retained epochs', "SELECT ($max_epoch) >= 22", 't', 60);

# Kill the worker at each step: in the checkpoint before the state is
# written, after the state rows and undo are written (not committed),
# after the commit, and inside a slice of the undo cleanup.
for my $point (qw(checkpoint_after_ext_check memory_checkpoint_written checkpoint_after_commit memory_undo_cleanup))
{
	my $before = psql($max_epoch);
	my $from = test_point_hold($point);
	my $pid = test_point_wait_reached($point, $from, 60);
	ok($pid, "$point: the worker is held there");
	kill_held($pid, "$point: SIGKILL to the worker");
	wait_for_sql("$point: the job checkpoints again", "SELECT ($max_epoch) > $before + 2", 't', 120);
}

# Restore to the oldest retained epoch, every key updated in place many
# times since.
is(psql("SELECT mailer.stop_job('t118_mem')"), 'stopped', 'stop t118_mem mid-run');
cmp_ok(psql("SELECT max((positions->>'next')::bigint) FROM mailer.checkpoints WHERE job_id = $job_id"),
	'<', $N, 'stopped before the end');
my ($oldest, $newest) = split /\|/,
	psql("SELECT min(epoch), max(epoch) FROM mailer.checkpoints WHERE job_id = $job_id AND subtask = 0");
cmp_ok($newest - $oldest, '>=', 10, "epochs $oldest to $newest retained");
# an epoch writes redo, or folds (one checkpoint in
# mailer.memory_fold_checkpoints, and the first of each worker): the rows' undo
cmp_ok(psql("SELECT count(DISTINCT epoch) FROM mailer.memory_redo WHERE job_id = $job_id AND epoch > $oldest"),
	'>=', 10, 'the redo of the epochs after the oldest retained one is there');
cmp_ok(psql("SELECT count(DISTINCT epoch) FROM mailer.memory_undo WHERE job_id = $job_id AND epoch > $oldest"),
	'>=', 1, 'and the undo of the folds after it');
is(psql("SELECT mailer.restore_job('t118_mem', $oldest)"), $oldest, "restore_job to epoch $oldest");
psql("SELECT mailer.start_job('t118_mem')");
wait_for_sql('the restored job checkpoints', "SELECT ($max_epoch) > $oldest", 't', 60);

# A second restore, to an epoch after the first, on a worker just killed
# in the undo cleanup.
wait_for_sql('t118_mem past 25 more epochs', "SELECT ($max_epoch) >= $oldest + 25", 't', 120);
my $from = test_point_hold('memory_undo_cleanup');
# kill_held releases the point before the stop: the restarted worker's
# first cleanup slice may reach it again, and a worker held there cannot stop.
kill_held(test_point_wait_reached('memory_undo_cleanup', $from, 60), 'SIGKILL to the worker in the undo cleanup');
is(psql("SELECT mailer.stop_job('t118_mem')"), 'stopped', 'stopped after a kill in the cleanup');
my $middle = psql("SELECT min(epoch) + 3 FROM mailer.checkpoints WHERE job_id = $job_id AND subtask = 0");
is(psql("SELECT mailer.restore_job('t118_mem', $middle)"), $middle, "restore_job to epoch $middle");
psql("SELECT mailer.start_job('t118_mem')");

for my $job (qw(t118_ref t118_mem))
{
	is(wait_job($job, 240), 'finished', "$job ends finished");
}
same_rows('SELECT customer_id, window_start, window_end, n, total FROM t118_mem',
	'SELECT customer_id, window_start, window_end, n, total FROM t118_ref',
	'every window of the killed and restored memory job equals the RocksDB job\'s');
is(psql('SELECT sum(n) FROM t118_mem'), psql('SELECT sum(n) FROM t118_ref'), 'the same counts');

# The cleanup kept the undo to the retained epochs.
wait_for_sql('no undo older than the retained epochs',
	"SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id AND epoch <= "
	. "(SELECT min(epoch) FROM mailer.checkpoints WHERE job_id = $job_id)", '0', 30);

# The layout: a row is updated in place, HOT.  Not asked of the sliding
# job: a fold carries a new key to its redo at up to two folds before the
# key gets its row, and its panes take records for 4 checkpoints, so only
# the rows a worker's first fold makes are ever updated, when the next
# fold finds them changed, and its last run updated none in one CI run
# of three.  Running totals at a fold every checkpoint (no redo, no carry)
# update each key's row at every checkpoint.  The counts are those since
# the last kill, which resets them.
setting_until_exit('mailer.memory_fold_checkpoints', 1);
psql("CREATE TABLE t118_tot (customer_id text PRIMARY KEY, n bigint)");
psql(qq{SELECT mailer.create_job('t118_tot', \$spec\${"source": {"type": "generator", "events": 3000,
		"keys": 300, "seed": 118, "rate": 1000},
	"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}}, {"aggregate": {"n": "count(*)"}}],
	"sink": {"type": "table", "table": "t118_tot"}, "state": {"backend": "memory"},
	"checkpoint": {"interval": "100 milliseconds"}}\$spec\$)});
is(wait_job('t118_tot', 120), 'finished', 't118_tot ends finished');
is(psql('SELECT sum(n) FROM t118_tot'), '3000', 'its totals count every record');
wait_for_sql('the rows are updated in place (HOT)',
	"SELECT n_tup_hot_upd > 0 FROM pg_stat_user_tables WHERE relid = 'mailer.memory_state'::regclass", 't', 30);
pass('the rows are updated in place (HOT)');

psql("SELECT mailer.drop_job('t118_mem')");
psql("SELECT mailer.drop_job('t118_ref')");
psql("SELECT mailer.drop_job('t118_tot')");
is(psql("SELECT (SELECT count(*) FROM mailer.memory_state WHERE job_id = $job_id) + "
		. "(SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id)"), '0',
	'drop_job deletes the rows and the undo');
psql('DROP TABLE t118_mem, t118_ref, t118_tot');

done_testing();
