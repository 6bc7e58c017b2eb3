# Rescaling a stopped job keeps its state (issue 13): tumbling-window and
# unwindowed totals jobs, on RocksDB and on the memory backend, run at
# parallelism 2, then 4, then 1 (mailer.alter_job between a stop and a
# start), over bursts of orders on 8 partitions whose event time runs on
# from burst to burst.  When a job stops, the last minute or so of windows
# is still open, and every customer has its totals: that state must reach
# its new owners.  After each burst, the totals equal SQL's GROUP BY over
# the orders so far, the job's watermark is the smallest partition's
# largest event time minus 5 s, and the windows are exactly those that end
# by it; at the end, every window.
#
# Then restore_job returns every job to the epoch of the first burst,
# taken at parallelism 2: replayed at parallelism 1, every window and
# total is the same again.
#
# The memory-backend jobs have 30 key groups (where the build has them),
# which 4 subtasks cannot share equally.  No prepared transaction is left.
#
# alter_job refuses a running job, and any change but the parallelism,
# naming the JSON path of the change.
#
# MAILER_TEST_PARALLELISMS limits the parallelisms (MailerParallelTest).
# On a server of its own (MailerCluster), with a slot for every subtask.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerCluster;
use MailerTest;
use MailerKafkaTest qw(job_epoch);
use MailerParallelTest;
use Test::More;

# 825 s of event time a burst: the bursts end within a minute's window.
my $BURST = 8_250;
my @STEPS = map { par($_) } 2, 4, 1;
my $PARTITIONS = 8;

mailer_node('node', par_node_conf(32));
my $topic = fresh_topic('t122', $PARTITIONS);
my $parallel = parallel_build();
note('parallelisms: ' . join(' -> ', @STEPS));

# One event-time line through all the bursts: 0.1 s apart, up to 4 s late.
par_orders('t122_orders', 1, $BURST * @STEPS, create => 1, partitions => $PARTITIONS);

my @jobs;
for my $backend (qw(rocksdb memory))
{
	for my $kind (qw(tumbling totals))
	{
		my $name = sprintf('t122_%s_%s', $kind, substr($backend, 0, 1));
		par_job($name, topic => $topic, kind => $kind, backend => $backend, parallelism => $STEPS[0],
			key_groups => $parallel && $backend eq 'memory' ? 30 : undef, retain => 1000);
		push @jobs, { name => $name, kind => $kind };
	}
}

# ---------------------------------------------------------------------------
# alter_job's refusals, on a job made for them.
# ---------------------------------------------------------------------------
SKIP:
{
	skip 'no alter_job in this build (parallelism 1 only)', 10 unless $parallel;
	my $j = par_job('t122_refused', topic => $topic, kind => 'tumbling', parallelism => $STEPS[0]);
	is(psql("SELECT spec->>'key_groups' FROM mailer.jobs WHERE name = '$j'"), '128',
		'create_job pins the default key groups into the stored spec');
	wait_job_state($j, qr/^running$/);
	like(psql_fails("SELECT mailer.alter_job('$j', jsonb_set(spec, '{parallelism}', '1')) FROM mailer.jobs WHERE name = '$j'"),
		qr/stop/i, 'alter_job refuses a running job');
	is(psql("SELECT mailer.stop_job('$j')"), 'stopped', 'stopped');
	my $spec = psql("SELECT spec FROM mailer.jobs WHERE name = '$j'");
	par_sink('t122_elsewhere', 'tumbling');		# a valid spec, but another table
	for my $change (['{sink,table}', '"t122_elsewhere"', qr/sink\.table/, 'the sink table'],
		['{state,backend}', '"memory"', qr/state\.backend/, 'the state backend'],
		['{key_groups}', '64', qr/key_groups/, 'the key groups'],
		['{watermark,max_out_of_orderness}', '"6 seconds"', qr/watermark\.max_out_of_orderness/, 'the watermark'])
	{
		my ($path, $value, $re, $what) = @$change;
		my $err = psql_fails("SELECT mailer.alter_job('$j', jsonb_set(jsonb_set(spec, '$path', '$value'), '{parallelism}', '1'))
			FROM mailer.jobs WHERE name = '$j'");
		like($err, qr/0A000.*$re/s, "alter_job refuses a change of $what, naming its path");
	}
	like(psql_fails("SELECT mailer.alter_job('$j', jsonb_set(spec, '{parallelism}', '0')) FROM mailer.jobs WHERE name = '$j'"),
		qr/parallelism/, 'alter_job checks the new parallelism like create_job');
	like(psql_fails("SELECT mailer.alter_job('t122_nosuch', '{}')"), qr/t122_nosuch/, 'alter_job names a job that does not exist');
	is(psql("SELECT spec FROM mailer.jobs WHERE name = '$j'"), $spec, 'the refused changes left the stored spec as it was');
	psql("SELECT mailer.drop_job('$j')");
}

# ---------------------------------------------------------------------------
# Bursts, with a rescale between each two.
# ---------------------------------------------------------------------------

# The watermark every job must have once it read orders 1..$to: the
# smallest partition's largest event time, less max_out_of_orderness.
sub want_watermark
{
	my ($to) = @_;
	return psql("SELECT min(m) - interval '5 seconds' FROM "
		  . "(SELECT max(ts) AS m FROM t122_orders WHERE order_id <= $to GROUP BY p) x");
}

my $to = 0;
my %first_epoch;	# the epoch that covers exactly the first burst, by job
for my $step (0 .. $#STEPS)
{
	my $p = $STEPS[$step];
	my $what = "step $step (parallelism $p)";
	if ($step > 0)
	{
		for my $j (@jobs)
		{
			is(psql("SELECT mailer.stop_job('$j->{name}')"), 'stopped', "$what: $j->{name} stopped");
			is(alter_parallelism($j->{name}, $p, $parallel), $parallel ? $p : 'skipped',
				"$what: $j->{name} altered to parallelism $p");
			psql("SELECT mailer.start_job('$j->{name}')");
		}
	}
	my $from = $to + 1;
	$to += $BURST;
	par_produce('t122_orders', $topic, $from, $to);
	my $wm = want_watermark($to);
	cmp_ok(psql("SELECT count(*) FROM (" . par_want('tumbling', 't122_orders', "order_id <= $to")
		  . ") w WHERE window_end > '$wm'"), '>', 100, "$what: windows stay open for the next step")
	  if $step < $#STEPS;
	for my $j (@jobs)
	{
		my $name = $j->{name};
		is(wait_job($name, 180), 'running', "$what: $name caught up");
		par_subtasks_ok($name, $p, "$what: $name") if $parallel;
		is(job_metric($name, 'records_in'), $to, "$what: $name read each order once");
		$first_epoch{$name} //= job_epoch($name);
		if ($j->{kind} eq 'totals')
		{
			par_same($name, par_want('totals', 't122_orders', "order_id <= $to"),
				"$what: $name equals the GROUP BY over orders 1..$to");
		}
		else
		{
			is(psql("SELECT watermark = '$wm' FROM mailer.metrics WHERE name = '$name'"), 't',
				"$what: $name: the watermark is the smallest partition's largest event time - 5 s");
			par_same($name, "SELECT * FROM (" . par_want('tumbling', 't122_orders', "order_id <= $to")
				  . ") w WHERE window_end <= '$wm'",
				"$what: $name holds every window that ends by the watermark, and only those");
		}
	}
}

# The last windows fire once markers move the watermark past them.
my $end = $to * 0.1 + 3600;
my $markers = par_markers($topic, $end, 0 .. $PARTITIONS - 1);
for my $j (grep { $_->{kind} eq 'tumbling' } @jobs)
{
	wait_watermark($j->{name}, ev_time($end - 5));
	is(wait_job($j->{name}), 'running', "end: $j->{name} caught up");
	par_same($j->{name}, par_want('tumbling', 't122_orders'), "end: $j->{name} holds every window of every order");
	is(job_metric($j->{name}, 'records_late'), '0', "end: $j->{name}: no order was late");
}

# restore_job to the epoch of the first burst, taken at the first
# parallelism: the state comes back from its subtasks' checkpoints to the
# subtasks of the last, and the replay of every later order gives every
# window and total again.
for my $j (@jobs)
{
	my $name = $j->{name};
	my $e = $first_epoch{$name};
	is(psql("SELECT mailer.stop_job('$name')"), 'stopped', "restore: $name stopped");
	is(psql("SELECT mailer.restore_job('$name', $e)"), $e, "restore: $name restored to epoch $e, of parallelism $STEPS[0]");
	is(job_metric($name, 'records_in'), $BURST, "restore: $name shows the counters of epoch $e");
	psql("SELECT mailer.start_job('$name')");
}
for my $j (@jobs)
{
	my $name = $j->{name};
	wait_watermark($name, ev_time($end - 5)) if $j->{kind} eq 'tumbling';
	is(wait_job($name, 180), 'running', "restore: $name replayed");
	par_subtasks_ok($name, $STEPS[-1], "restore: $name") if $parallel;
	is(job_metric($name, 'records_in'), $to + $markers, "restore: $name read each record once");
	par_same($name, par_want($j->{kind}, 't122_orders'), "restore: $name equals the GROUP BY over every order");
}

is(psql("SELECT count(*) FROM pg_prepared_xacts"), '0', 'no prepared transaction is left behind');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 't122%'");
kafka('delete-topic', $topic);
done_testing();
