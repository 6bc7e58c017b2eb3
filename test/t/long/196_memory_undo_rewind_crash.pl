# A crash in the middle of the memory backend's rewind of packed undo
# (restore_job to an old retained epoch): the worker is killed (SIGKILL),
# then the server stopped immediately, held at the end of the rewind's
# statements (test point memory_state_rewound), before it commits.
# The rewind rolls back and the next open does it again: at the first
# checkpoint after it the job's rows equal those of the epoch restored,
# and no undo after it is left.  Before each start, memory_state's
# statistics say it is empty, as a vacuum leaves them after a restore's
# rewind deleted the rows: the rewind's join must not take that for a
# nested loop (a row per key, minutes), as it did.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use Test::More;

fresh_extension();
test_point_release();
psql(<<'SQL');
DROP TABLE IF EXISTS t196_win, t196_snap;
CREATE TABLE t196_win (customer_id text, window_start timestamptz, window_end timestamptz,
	n bigint, total numeric, PRIMARY KEY (customer_id, window_start));
CREATE TABLE t196_snap (key bytea, value bytea);
SQL

psql(q{SELECT mailer.create_job('t196_win', $spec${"source": {"type": "generator", "events": 2000000,
		"keys": 20000, "seed": 196, "start_time": "2030-01-01 00:00:00+00", "step": "10 milliseconds",
		"rate": 40000},
	"key_groups": 4,
	"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}},
		{"window": {"type": "sliding", "size": "1 minute", "slide": "20 seconds"}},
		{"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}],
	"sink": {"type": "table", "table": "t196_win"}, "state": {"backend": "memory"},
	"checkpoint": {"interval": "200 milliseconds", "retain": 500}}$spec$)});
my $job_id = psql("SELECT job_id FROM mailer.job WHERE name = 't196_win'");
my $newest = "SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $job_id";

wait_for_sql('past epoch 3', "SELECT ($newest) >= 3", 't', 120);
is(psql("SELECT mailer.stop_job('t196_win')"), 'stopped', 'stopped at E');
my $e = psql($newest);
psql("INSERT INTO t196_snap SELECT key, value FROM mailer.memory_state WHERE job_id = $job_id");
psql("SELECT mailer.start_job('t196_win')");
wait_for_sql('60 epochs after E', "SELECT ($newest) >= $e + 60", 't', 300);
is(psql("SELECT mailer.stop_job('t196_win')"), 'stopped', 'stopped');
diag(psql("SELECT count(*) || ' undo rows, ' || sum(cardinality(keys)) || ' entries' FROM mailer.memory_undo "
	. "WHERE job_id = $job_id AND epoch > $e"));
is(psql("SELECT mailer.restore_job('t196_win', $e)"), $e, "restore_job to $e");

# Kill during the rewind: the worker, then the whole server.
for my $how ('SIGKILL to the worker', 'immediate stop of the server')
{
	my $launcher = launcher_pid();
	psql("UPDATE pg_class SET reltuples = 0, "
		. "relpages = greatest(1, pg_relation_size(oid) / current_setting('block_size')::int) "
		. "WHERE oid = 'mailer.memory_state'::regclass");
	# held at the end of the rewind's statements, not committed
	my $from0 = test_point_hold('memory_state_rewound', 'checkpoint_after_ext_check');
	psql("SELECT mailer.start_job('t196_win')");
	my $pid = test_point_wait_reached('memory_state_rewound', $from0, 60);
	my $undo_left = psql("SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id AND epoch > $e");
	cmp_ok($undo_left, '>', 0, "$how: the rewind has not committed yet ($undo_left undo rows after $e)");
	# the next open rewinds again, then its first checkpoint is held
	my $from = pg_log_size();
	if ($how =~ /SIGKILL/) { is(kill('KILL', $pid), 1, $how); }
	else { pg_service('crash'); pass($how); }
	if ($how =~ /immediate/)
	{
		pg_service('start');
	}
	else
	{
		wait_server_ready(not_launcher => $launcher);
	}
	test_point_wait_reached('memory_state_rewound', $from, 120);
	test_point_release('checkpoint_after_ext_check');
	test_point_wait_reached('checkpoint_after_ext_check', $from, 120);
	same_rows("SELECT key, md5(value) FROM mailer.memory_state WHERE job_id = $job_id",
		"SELECT key, md5(value) FROM t196_snap", "after $how: every key's value is the one at $e");
	is(psql("SELECT count(*) FROM mailer.memory_undo WHERE job_id = $job_id AND epoch > $e"), '0',
		"after $how: no undo after $e left");
	test_point_release();
	last if $how =~ /immediate/;
	# run on again, stop, restore to $e again for the second crash
	wait_for_sql('30 more epochs', "SELECT ($newest) >= $e + 30", 't', 300);
	is(psql("SELECT mailer.stop_job('t196_win')"), 'stopped', 'stopped again');
	is(psql("SELECT mailer.restore_job('t196_win', $e)"), $e, "restore_job to $e again");
}

psql("SELECT mailer.drop_job('t196_win')");
psql('DROP TABLE t196_win, t196_snap');
done_testing();
