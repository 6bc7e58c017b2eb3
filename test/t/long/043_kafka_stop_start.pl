# Stop and start between bursts: each stop takes a final checkpoint, each
# start resumes from it, and events produced while a job is stopped are
# read when it starts.  After every burst the tables are exactly the GROUP
# BY over the events so far.  Both state backends.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $BURSTS = 6;
my $BURST = 5_000;		# the checks hold for any volume: stops come once caught up
my $CUSTOMERS = 1_000;

my $topic = orders_topic('043', 8, $BURSTS * $BURST, $CUSTOMERS);
my %job = %{ backend_jobs($topic, 'totals_043') };

for my $burst (1 .. $BURSTS)
{
	# From the second burst on, the jobs are stopped while it is produced.
	orders_produce('orders_043', $topic, ($burst - 1) * $BURST + 1, $burst * $BURST);
	if ($burst > 1)
	{
		is(psql("SELECT mailer.start_job('$job{$_}')"), 'starting', "burst $burst: $_ starts") for @BACKENDS;
	}
	for my $b (@BACKENDS)
	{
		my $j = $job{$b};
		is(psql("SELECT mailer.wait_job('$j', '5 minutes')"), 'running', "burst $burst: $b caught up");
		totals_check('orders_043', $j, "burst $burst, $b", "order_id <= " . $burst * $BURST);
		is(job_metric($j, 'records_in'), $burst * $BURST, "burst $burst, $b: records_in");
		is(psql("SELECT mailer.stop_job('$j')"), 'stopped', "burst $burst: $b stopped");
		is(psql("SELECT state || ' ' || (pid IS NULL)::int FROM mailer.jobs WHERE name = '$j'"), 'stopped 1',
			"burst $burst, $b: mailer.jobs shows it stopped, without a worker");
		is(psql("SELECT final FROM mailer.checkpoints JOIN mailer.job USING (job_id) "
				  . "WHERE name = '$j' ORDER BY epoch DESC LIMIT 1"), 't',
			"burst $burst, $b: its last checkpoint is the final one of the stop");
	}
}

# Stop and start at once (two transactions, one session), then wait, with
# nothing new: each start runs the job, whether the launcher saw the
# worker exit before or after the stop committed.
psql("SELECT mailer.start_job('$job{$_}')") for @BACKENDS;
my %cycles_ok;
for my $cycle (1 .. 10)
{
	for my $b (@BACKENDS)
	{
		is(psql("SELECT mailer.wait_job('$job{$b}', '5 minutes')"), 'running', "cycle $cycle: $b running")
		  if $cycle == 1;
		psql("SELECT mailer.stop_job('$job{$b}'); SELECT mailer.start_job('$job{$b}');");
		my $state = eval { psql("SELECT mailer.wait_job('$job{$b}', '30 seconds')") } // 'timeout';
		$cycles_ok{$b}++ if $state eq 'running' && defined job_worker_pid($job{$b});
		diag("cycle $cycle, $b: $state; " . psql("SELECT state, pid FROM mailer.jobs WHERE name = '$job{$b}'"))
		  unless $state eq 'running';
	}
}
is($cycles_ok{$_} // 0, 10, "$_: 10 stop and start at once, then wait_job: each start ran the job") for @BACKENDS;
is(psql("SELECT restarts || ' ' || coalesce(last_error, 'no error') FROM mailer.jobs WHERE name = '$job{$_}'"),
	'0 no error', "$_: stops and starts are no restarts, and no error") for @BACKENDS;
psql("SELECT mailer.stop_job('$job{$_}')") for @BACKENDS;

# Started once more with nothing new: nothing changes.
psql("SELECT mailer.start_job('$job{$_}')") for @BACKENDS;
for my $b (@BACKENDS)
{
	is(psql("SELECT mailer.wait_job('$job{$b}', '5 minutes')"), 'running', "$b: running again");
	totals_check('orders_043', $job{$b}, "$b, restarted without new events");
	is(job_metric($job{$b}, 'records_in'), $BURSTS * $BURST, "$b: records_in unchanged");
	psql("SELECT mailer.drop_job('$job{$b}')");
}
kafka('delete-topic', $topic);
done_testing();
