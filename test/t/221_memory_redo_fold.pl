# The memory backend writes each checkpoint's changed keys as redo, and
# folds the keys changed since the last fold into mailer.memory_state (with
# their undo) at one checkpoint in mailer.memory_fold_checkpoints (4 here;
# subtask k of P at the epochs where epoch + 4k/P is a multiple of 4), at a
# worker's first and at its final one; a fold writes a key with no row
# to its own redo instead (carries it), at up to two folds.  An open
# replays, per key group, the redo from the fold its old owner's
# checkpoint names on.  A parallel
# memory-backend job is killed in a checkpoint that wrote redo and in one
# that folded (neither committed), restored to an epoch where its two
# subtasks' folds differ and rescaled there to three; then it runs to the
# end of its input, and its sink table and its count of output rows must
# equal those of the same job on RocksDB with no fault at all.
#   - running totals: every key changes between folds (updates);
#   - tumbling windows of 2 seconds: keys come and go between folds (put,
#     then purged; a purge the replay missed would fire the window again),
#     many within one checkpoint;
#   - tumbling windows of a minute: a window lives about ten checkpoints,
#     so folds carry it (it has no row), and some get a row.
# The cleanup deletes the redo no retained epoch needs, and an open the
# redo and undo after the epoch it opens.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
test_point_release();
setting_until_exit('mailer.memory_fold_checkpoints', 4);

my $agg = q{{"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}};
my %jobs = (
	totals => { steps => $agg, columns => 'customer_id text PRIMARY KEY, n bigint, total numeric' },
	map {
		my ($kind, $size) = @$_;
		$kind => {
			steps => qq{{"window": {"type": "tumbling", "size": "$size"}}, $agg},
			columns => 'customer_id text, window_start timestamptz, window_end timestamptz, '
			  . 'n bigint, total numeric, PRIMARY KEY (customer_id, window_start)'
		  }
	} (['tumbling', '2 seconds'], ['carried', '1 minute']),
);
my $events = 120_000;
my $retain = 20;

sub job
{
	my ($name, $kind, $backend, $par, $rate) = @_;
	psql("DROP TABLE IF EXISTS $name; CREATE TABLE $name ($jobs{$kind}{columns})");
	psql(qq{SELECT mailer.create_job('$name', \$spec\${"source": {"type": "generator", "events": $events,
			"keys": 300, "seed": 221, "start_time": "2030-01-01 00:00:00+00", "step": "10 milliseconds",
			"rate": $rate},
		"key_groups": 8, "parallelism": $par,
		"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}}, $jobs{$kind}{steps}],
		"sink": {"type": "table", "table": "$name"}, "state": {"backend": "$backend"},
		"checkpoint": {"interval": "100 milliseconds", "retain": $retain}}\$spec\$)});
	return psql("SELECT job_id FROM mailer.job WHERE name = '$name'");
}

sub newest { "SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $_[0]" }

sub past
{
	my ($name, $id, $n) = @_;
	my $target = psql(newest($id)) + $n;
	wait_for_sql("$name: past epoch $target", "SELECT (" . newest($id) . ") >= $target", 't', 120);
}

# SIGKILL to a worker held at a test point of its checkpoint (its writes
# done, not committed); the server restarts it.
sub kill_at
{
	my ($name, $point) = @_;
	my $from = test_point_hold($point);
	kill_held(test_point_wait_reached($point, $from, 60), "$name: SIGKILL to a worker at $point");
}

for my $kind (sort keys %jobs)
{
	my $name = "t221_$kind";
	my $id = job($name, $kind, 'memory', 2, 6000);
	past($name, $id, 3);
	kill_at($name, 'memory_redo_written');
	past($name, $id, 3);
	kill_at($name, 'memory_fold_written');
	past($name, $id, $retain + 10);
	cmp_ok(psql("SELECT count(DISTINCT epoch) FROM mailer.memory_redo WHERE job_id = $id"), '>', 0,
		"$name: the checkpoints wrote redo");
	# A purged window's delete is redo too.
	cmp_ok(psql("SELECT count(*) FROM mailer.memory_redo r, unnest(r.new_values) v WHERE r.job_id = $id AND v IS NULL"),
		'>', 0, "$name: the redo holds the purged windows' deletes") if $kind ne 'totals';
	# A fold's own redo: the windows it carried, which have no row (the
	# redo of a fold's epoch in the other subtask's key groups is not).
	cmp_ok(psql("SELECT count(*) FROM mailer.memory_redo r JOIN mailer.checkpoints c "
		  . "ON c.job_id = r.job_id AND r.epoch = substring(c.state_ref FROM 'fold ([0-9]+)')::bigint "
		  . "AND r.key_group / 4 = c.subtask WHERE r.job_id = $id"), '>', 0,
		"$name: a fold carried keys with no row to its redo") if $kind eq 'carried';
	# Each worker folds at its first checkpoint, then one in 4: the redo up
	# to its newest fold at or before the oldest retained epoch goes.
	wait_for_sql("$name: no redo before the folds the retained epochs name",
		"SELECT count(*) FROM mailer.memory_redo WHERE job_id = $id AND epoch <= "
		  . "(SELECT min(epoch) FROM mailer.checkpoints WHERE job_id = $id) - 4", '0', 30);

	# Restored to the oldest retained epoch where the subtasks' rows are at
	# different folds (the redo the cleanup kept must be there), at another
	# parallelism.
	is(psql("SELECT mailer.stop_job('$name')"), 'stopped', "$name stopped");
	cmp_ok(psql("SELECT max((positions->>'next')::bigint) FROM mailer.checkpoints WHERE job_id = $id"),
		'<', $events / 2, "$name: stopped well before the end of its input");
	my ($fa, $fb) = map { "substring($_.state_ref FROM 'fold ([0-9]+)')::bigint" } ('a', 'b');
	my $between = psql("SELECT coalesce(min(a.epoch), 0) FROM mailer.checkpoints a JOIN mailer.checkpoints b "
		  . "USING (job_id, epoch) WHERE job_id = $id AND a.subtask = 0 AND b.subtask = 1 "
		  . "AND $fa <> $fb AND $fa < epoch AND $fb < epoch");
	cmp_ok($between, '>', 0, "$name: a retained epoch where the subtasks' folds differ ($between)");
	cmp_ok(psql("SELECT count(*) FROM mailer.memory_redo WHERE job_id = $id AND epoch > $between"), '>', 0,
		"$name: redo after $between");
	psql("SELECT mailer.alter_job('$name', (SELECT spec || '{\"parallelism\": 3}' FROM mailer.jobs WHERE name = '$name'))");
	is(psql("SELECT mailer.restore_job('$name', $between)"), $between, "$name: restore_job to $between");
	my $from = test_point_hold('checkpoint_after_ext_check');
	psql("SELECT mailer.start_job('$name')");
	wait_until("$name: 3 subtasks at their first checkpoint", sub {
		my %pids = map { $_ => 1 }
		  pg_log_since($from) =~ /\[(\d+)\] [^\n]*mailer test point checkpoint_after_ext_check reached/g;
		return scalar(keys %pids) >= 3;
	}, 60);
	is(psql("SELECT count(*) FROM mailer.memory_redo WHERE job_id = $id AND epoch > $between"), '0',
		"$name: the opens deleted the redo after $between");
	is(psql("SELECT count(*) FROM mailer.memory_undo WHERE job_id = $id AND epoch > $between"), '0',
		"$name: and its undo");
	test_point_release();
	is(wait_job_state($name, qr/^(finished|failed)$/, 180)->{state}, 'finished', "$name: finished its input");

	# The same job on RocksDB, with no fault.
	my $ref = "t221_${kind}_ref";
	job($ref, $kind, 'rocksdb', 1, 1_000_000);
	is(wait_job_state($ref, qr/^(finished|failed)$/, 180)->{state}, 'finished', "$ref: finished its input");
	cmp_ok(psql("SELECT count(*) FROM $ref"), '>', 0, "$ref: wrote rows");
	same_rows("SELECT * FROM $name", "SELECT * FROM $ref",
		"$name: the sink table equals the one written with no fault on RocksDB");
	# each window is emitted once (running totals: once a checkpoint that changed them)
	is(job_metric($name, 'records_out'), job_metric($ref, 'records_out'),
		"$name: as many output rows as on RocksDB (no window fired twice)") if $kind ne 'totals';
	psql("SELECT mailer.drop_job('$name'); SELECT mailer.drop_job('$ref')");
	is(psql("SELECT count(*) FROM mailer.memory_redo WHERE job_id = $id"), '0', "$name: drop_job deleted its redo");
	psql("DROP TABLE $name, $ref");
}

done_testing();
