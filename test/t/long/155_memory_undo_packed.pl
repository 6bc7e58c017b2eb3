# The memory backend's undo packed into rows of about a page, one key
# group each (src/state/memory_undo.c).  Two jobs on the memory backend,
# each beside the same job on RocksDB, which nothing interrupts:
#
#   - sliding windows over 3,000 keys in 2 key groups, about 1,000 records
#     an epoch: an epoch's undo of a key group takes several rows.  The worker is killed after a
#     checkpoint wrote its rows and undo (not committed), then the job is
#     stopped and restored to its oldest retained epoch, after many epochs
#     of packed undo, and again to a later one;
#   - running string_agg over 4 keys: each value outgrows a row, so its
#     undo entry is a row of its own, stored by TOAST.  Stopped mid-run and
#     restored to its oldest retained epoch.
#
# Each memory job's rows equal the RocksDB job's, and no undo older than
# the retained epochs is left.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use Test::More;


fresh_extension();
test_point_release();
psql(<<'SQL');
DROP TABLE IF EXISTS t155_win_mem, t155_win_ref, t155_agg_mem, t155_agg_ref;
CREATE TABLE t155_win_mem (customer_id text, window_start timestamptz, window_end timestamptz,
	n bigint, total numeric, PRIMARY KEY (customer_id, window_start));
CREATE TABLE t155_win_ref (LIKE t155_win_mem INCLUDING ALL);
CREATE TABLE t155_agg_mem (customer_id text PRIMARY KEY, n bigint, amounts text);
CREATE TABLE t155_agg_ref (LIKE t155_agg_mem INCLUDING ALL);
SQL

sub job
{
	my ($name, $backend, $events, $keys, $rate, $steps) = @_;
	psql(qq{SELECT mailer.create_job('$name', \$spec\${"source": {"type": "generator", "events": $events,
			"keys": $keys, "seed": 155, "start_time": "2030-01-01 00:00:00+00", "step": "10 milliseconds",
			"rate": $rate},
		"key_groups": 2,
		"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}}, $steps],
		"sink": {"type": "table", "table": "$name"}, "state": {"backend": "$backend"},
		"checkpoint": {"interval": "100 milliseconds", "retain": 20}}\$spec\$)});
	return psql("SELECT job_id FROM mailer.job WHERE name = '$name'");
}

sub epochs
{
	my ($job_id) = @_;
	return "SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $job_id";
}

# Stop the job and restore it to the epoch (min + $plus of the retained
# ones); then start it again.
sub restore
{
	my ($name, $job_id, $events, $plus) = @_;
	is(psql("SELECT mailer.stop_job('$name')"), 'stopped', "$name stopped mid-run");
	cmp_ok(psql("SELECT max((positions->>'next')::bigint) FROM mailer.checkpoints WHERE job_id = $job_id"),
		'<', $events, "$name: stopped before the end");
	my $epoch = psql("SELECT min(epoch) + $plus FROM mailer.checkpoints WHERE job_id = $job_id");
	# an epoch writes redo, or folds: the rows' undo
	cmp_ok(psql("SELECT count(DISTINCT epoch) FROM mailer.memory_redo WHERE job_id = $job_id AND epoch > $epoch"),
		'>=', 5, "$name: the redo of several epochs after $epoch is there");
	cmp_ok(psql("SELECT count(DISTINCT epoch) FROM mailer.memory_undo WHERE job_id = $job_id AND epoch > $epoch"),
		'>=', 1, "$name: and the undo of a fold after it");
	is(psql("SELECT mailer.restore_job('$name', $epoch)"), $epoch, "$name: restore_job to epoch $epoch");
	psql("SELECT mailer.start_job('$name')");
	wait_for_sql("$name: the restored job checkpoints", "SELECT (" . epochs($job_id) . ") > $epoch", 't', 60);
}

sub finish
{
	my ($name, $cols) = @_;
	(my $ref = $name) =~ s/_mem$/_ref/;
	is(wait_job($_, 240), 'finished', "$_ ends finished") for ($ref, $name);
	same_rows("SELECT $cols FROM $name", "SELECT $cols FROM $ref",
		"every row of the killed and restored $name equals the RocksDB job's");
}

my $win_steps = q{{"window": {"type": "sliding", "size": "1 minute", "slide": "20 seconds"}},
	{"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}};
job('t155_win_ref', 'rocksdb', 100_000, 3000, 100_000, $win_steps);
my $win = job('t155_win_mem', 'memory', 100_000, 3000, 10_000, $win_steps);
wait_for_sql('t155_win_mem past its first retained epochs', "SELECT (" . epochs($win) . ") >= 22", 't', 120);
cmp_ok(psql("SELECT count(*) FROM (SELECT 1 FROM mailer.memory_undo WHERE job_id = $win "
		. "GROUP BY epoch, key_group HAVING count(*) > 1) g"), '>', 0,
	'an epoch\'s undo of a key group takes several rows');
is(psql("SELECT count(*) FROM mailer.memory_undo WHERE job_id = $win AND pg_column_size(keys) + "
		. "pg_column_size(old_values) > 8160"), '0', 'the packed rows are cut below a page');
is(psql("SELECT count(*) FROM (SELECT epoch, k FROM mailer.memory_undo, unnest(keys) AS k "
		. "WHERE job_id = $win GROUP BY 1, 2 HAVING count(*) > 1) d"), '0', 'a key is in an epoch\'s undo once');

# Killed after the checkpoint wrote its state rows and packed undo, before
# the commit: none of it is there after the restart.
{
	my $before = psql(epochs($win));
	my $from = test_point_hold('memory_checkpoint_written');
	my $pid = test_point_wait_reached('memory_checkpoint_written', $from, 60);
	ok($pid, 'the worker is held after its checkpoint\'s writes');
	kill_held($pid, 'SIGKILL to the worker');
	wait_for_sql('the job checkpoints again', "SELECT (" . epochs($win) . ") > $before + 2", 't', 120);
}
restore('t155_win_mem', $win, 100_000, 0);
my $target = psql(epochs($win)) + 25;
wait_for_sql('t155_win_mem past 25 more epochs', "SELECT (" . epochs($win) . ") >= $target", 't', 120);
restore('t155_win_mem', $win, 100_000, 3);
finish('t155_win_mem', 'customer_id, window_start, window_end, n, total');

my $agg_steps = q{{"aggregate": {"n": "count(*)", "amounts": "string_agg(value->>'amount', ',')"}}};
job('t155_agg_ref', 'rocksdb', 20_000, 4, 100_000, $agg_steps);
my $agg = job('t155_agg_mem', 'memory', 20_000, 4, 4000, $agg_steps);
wait_for_sql('t155_agg_mem: an undo entry outgrew a row',
	"SELECT count(*) > 0 FROM mailer.memory_undo WHERE job_id = $agg AND cardinality(keys) = 1 "
	. "AND octet_length(old_values[1]) > 8160", 't', 120);
$target = psql(epochs($agg)) + 10;
wait_for_sql('t155_agg_mem: 10 epochs after it', "SELECT (" . epochs($agg) . ") >= $target", 't', 120);
restore('t155_agg_mem', $agg, 20_000, 0);
finish('t155_agg_mem', 'customer_id, n, amounts');

for my $job_id ($win, $agg)
{
	wait_for_sql("job $job_id: no undo older than the retained epochs",
		"SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id AND epoch <= "
		. "(SELECT min(epoch) FROM mailer.checkpoints WHERE job_id = $job_id)", '0', 30);
}
psql("SELECT mailer.drop_job(name) FROM mailer.job WHERE name LIKE 't155_%'");
is(psql("SELECT count(*) FROM mailer.memory_undo"), '0', 'drop_job deletes the undo');
psql('DROP TABLE t155_win_mem, t155_win_ref, t155_agg_mem, t155_agg_ref');

done_testing();
