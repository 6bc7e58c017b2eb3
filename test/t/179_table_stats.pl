# A running job's writes show in pg_stat_user_tables, as a session's do:
# autovacuum decides from those counts when to vacuum and analyze a table,
# and a job that never sent them left its sink table's dead upserted rows
# and the memory state's dead rows unvacuumed for as long as it ran (they
# were sent only when the worker exited).
#
# A tumbling job on the memory backend: each window's row is inserted into
# the sink when it fires, each window's state row inserted and then deleted
# in mailer.memory_state.  While the same worker runs, the counts must
# reach what the job wrote.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
# Each checkpoint folds: a window put and purged between two folds would write no row at all.
setting_until_exit('mailer.memory_fold_checkpoints', 1);

my $topic = unique_name('t179');
my $job = 'table_stats';
my $keys = 50;
my $waves = 5;
kafka('create-topic', $topic, 1);
window_tables($job);
psql('SELECT pg_stat_reset_single_table_counters(\'mailer.memory_state\'::regclass)');
create_window_job($job, $topic, table => $job, backend => 'memory', ooo => '0 seconds',
	window => '{"type": "tumbling", "size": "1 second"}');

for my $w (1 .. $waves)
{
	produce_events($topic, [ map { { p => 0, k => "k$_", t => 3000 + $w + 0.5 } } 1 .. $keys ]);
	wait_watermark($job, ev_time(3000 + $w + 0.5));
	is(wait_job($job), 'running', "wave $w committed");
}
my $fired = ($waves - 1) * $keys;
is(psql("SELECT count(*) FROM $job"), $fired, 'every window but the last fired');
my $pid = worker_pid($job);
cmp_ok($pid, '>', 0, 'the job has a worker');

# The statistics a worker sends reach the views at once; the worker sends
# them at most once a second, so this waits for that, never for an exit.
# Returns the query's last result.
sub settled
{
	my ($what, $sql, $ok) = @_;
	my $last;
	eval { wait_until($what, sub { $last = psql($sql); $ok->($last) }, 30) };
	return $last;
}

is(settled('the sink table\'s statistics',
		"SELECT n_tup_ins FROM pg_stat_user_tables WHERE relid = '$job'::regclass",
		sub { $_[0] >= $fired }),
	$fired, 'the sink table counts the rows the running job inserted');
cmp_ok(settled('the memory state\'s statistics',
		"SELECT n_tup_del FROM pg_stat_user_tables WHERE relid = 'mailer.memory_state'::regclass",
		sub { $_[0] >= $fired }),
	'>=', $fired, 'mailer.memory_state counts the rows of the fired windows the running job deleted');
is(worker_pid($job), $pid, 'the same worker runs: it sent them while running, not at exit');
is(psql('SELECT count(*) FROM mailer.dead_letters'), '0', 'no dead letters');

done_testing();
