# The memory backend's packed undo rewinds every key exactly: the job's
# rows of mailer.memory_state at an epoch E are copied in the statement
# that reads E as the newest checkpoint; many epochs later the job is
# stopped and restored to E, and at its first checkpoint after the open
# (held there) its rows equal the copy: keys created after E gone, keys
# deleted (windows purged) after E back, values of any size (TOAST).
#
#   - sliding windows over 3,000 keys in one key group: keys come and go,
#     an epoch's undo of the group takes many rows;
#   - string_agg over 40 keys in 3 key groups: values grow past a page.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use Test::More;

fresh_extension();
test_point_release();
# Each checkpoint folds: the rows at an epoch are then the state at it (221 tests the replay).
setting_until_exit('mailer.memory_fold_checkpoints', 1);
psql(<<'SQL');
DROP TABLE IF EXISTS t195_win, t195_agg, t195_snap, t195_sql, t195_par;
CREATE TABLE t195_win (customer_id text, window_start timestamptz, window_end timestamptz,
	n bigint, total numeric, PRIMARY KEY (customer_id, window_start));
CREATE TABLE t195_sql (LIKE t195_win INCLUDING ALL);
CREATE TABLE t195_par (LIKE t195_win INCLUDING ALL);
CREATE TABLE t195_agg (customer_id text PRIMARY KEY, n bigint, amounts text);
CREATE TABLE t195_snap (job_id bigint, epoch bigint, key bytea, value bytea);
SQL

sub job
{
	my ($name, $events, $keys, $rate, $groups, $steps, $par) = @_;
	$par //= 1;
	psql(qq{SELECT mailer.create_job('$name', \$spec\${"source": {"type": "generator", "events": $events,
			"keys": $keys, "seed": 195, "start_time": "2030-01-01 00:00:00+00", "step": "10 milliseconds",
			"rate": $rate},
		"key_groups": $groups, "parallelism": $par,
		"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}}, $steps],
		"sink": {"type": "table", "table": "$name"}, "state": {"backend": "memory"},
		"checkpoint": {"interval": "100 milliseconds", "retain": 200}}\$spec\$)});
	return psql("SELECT job_id FROM mailer.job WHERE name = '$name'");
}

sub newest { "SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $_[0]" }

sub check
{
	my ($name, $job_id, $after, $stopped, $alter) = @_;
	wait_for_sql("$name: past epoch 5", "SELECT (" . newest($job_id) . ") >= 5", 't', 120);
	if ($stopped)
	{
		# stopped at its last checkpoint: its rows are that epoch's
		is(psql("SELECT mailer.stop_job('$name')"), 'stopped', "$name stopped at E");
	}
	# one statement: one snapshot of the checkpoint and the rows it committed
	psql("INSERT INTO t195_snap SELECT $job_id, (" . newest($job_id) . "), key, value "
		. "FROM mailer.memory_state WHERE job_id = $job_id");
	psql("SELECT mailer.start_job('$name')") if $stopped;
	my $e = psql("SELECT max(epoch) FROM t195_snap WHERE job_id = $job_id");
	my $target = $e + $after;
	wait_for_sql("$name: $after epochs after $e", "SELECT (" . newest($job_id) . ") >= $target", 't', 180);
	is(psql("SELECT mailer.stop_job('$name')"), 'stopped', "$name stopped");
	cmp_ok(psql("SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id AND epoch > $e"),
		'>', 0, "$name: undo after $e");
	diag(psql("SELECT count(*) || ' undo rows, ' || sum(cardinality(keys)) || ' entries, max per epoch and group ' || "
		. "(SELECT max(c) FROM (SELECT count(*) c FROM mailer.memory_undo WHERE job_id = $job_id GROUP BY epoch, key_group) g) "
		. "FROM mailer.memory_undo WHERE job_id = $job_id AND epoch > $e"));
	my $gone = psql("SELECT count(*) FROM (SELECT key FROM mailer.memory_state WHERE job_id = $job_id "
		. "EXCEPT SELECT key FROM t195_snap WHERE job_id = $job_id) x");
	my $back = psql("SELECT count(*) FROM (SELECT key FROM t195_snap WHERE job_id = $job_id "
		. "EXCEPT SELECT key FROM mailer.memory_state WHERE job_id = $job_id) x");
	diag("$name: $gone keys created after $e to vanish, $back deleted after it to return");
	psql("SELECT mailer.alter_job('$name', (SELECT spec || '{\"parallelism\": $alter}' FROM mailer.jobs WHERE name = '$name'))")
		if $alter;
	is(psql("SELECT mailer.restore_job('$name', $e)"), $e, "$name: restore_job to $e");
	my $from = test_point_hold('checkpoint_after_ext_check');
	psql("SELECT mailer.start_job('$name')");
	test_point_wait_reached('checkpoint_after_ext_check', $from, 60);
	my $subtasks = $alter // 1;
	wait_until("$subtasks subtasks at their first checkpoint", sub {
		my @pids = pg_log_since($from) =~ /\[(\d+)\] [^\n]*mailer test point checkpoint_after_ext_check reached/g;
		my %u = map { $_ => 1 } @pids;
		return scalar(keys %u) >= $subtasks;
	}, 60);
	same_rows("SELECT key, md5(value) FROM mailer.memory_state WHERE job_id = $job_id",
		"SELECT key, md5(value) FROM t195_snap WHERE job_id = $job_id",
		"$name: after the rewind to $e every key's value is the one at $e");
	is(psql("SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id AND epoch > $e"), '0',
		"$name: no undo after $e left");
	test_point_release();
	# no other job's worker may reach the next check's test point
	is(psql("SELECT mailer.stop_job('$name')"), 'stopped', "$name stopped after the check");
}

my $win_steps = q{{"window": {"type": "sliding", "size": "1 minute", "slide": "20 seconds"}},
	{"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}};
my $win = job('t195_win', 200_000, 3000, 10_000, 1, $win_steps);
check('t195_win', $win, 40);

my $agg_steps = q{{"aggregate": {"n": "count(*)", "amounts": "string_agg(value->>'amount', ',')"}}};
my $agg = job('t195_agg', 200_000, 40, 4000, 3, $agg_steps);
check('t195_agg', $agg, 40);

# Undo written by SQL (a trigger on the table: not a plain heap table).
psql(q{CREATE FUNCTION t195_noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
	CREATE TRIGGER t195_noop BEFORE INSERT ON mailer.memory_undo FOR EACH ROW EXECUTE FUNCTION t195_noop()});
psql("ALTER ROLE CURRENT_USER SET log_min_messages = 'debug1'");
my $log_from = pg_log_size();
my $sql = job('t195_sql', 200_000, 3000, 10_000, 2, $win_steps);
check('t195_sql', $sql, 30);
cmp_ok(memory_rows_written([$sql], $log_from)->{sql}, '>', 0, 't195_sql: its rows were written by SQL');
psql('ALTER ROLE CURRENT_USER RESET log_min_messages');
psql('DROP TRIGGER t195_noop ON mailer.memory_undo; DROP FUNCTION t195_noop()');

# Parallel subtasks, each writing the undo of its key groups; restored
# after a rescale from 2 to 3.
my $par = job('t195_par', 400_000, 3000, 10_000, 5, $win_steps, 2);
check('t195_par', $par, 30, 1, 3);

psql("SELECT mailer.drop_job(name) FROM mailer.job WHERE name LIKE 't195_%'");
psql('DROP TABLE t195_win, t195_agg, t195_snap, t195_sql, t195_par');
done_testing();
