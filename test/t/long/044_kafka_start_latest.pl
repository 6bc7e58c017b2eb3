# "start": "latest": a job with no checkpoint begins at the end of every
# partition, so what the topic held before the job started is skipped;
# from then on it resumes from there like any job, and events produced
# while it was stopped, or while the server was down, are read.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerCluster;
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $BEFORE = 10_000;	# on the topic before the jobs start: skipped
my $AFTER = 20_000;		# produced while they run: counted
my $STOPPED = 5_000;	# produced while they are stopped: counted
my $CUSTOMERS = 1_000;

# The test crashes the server: on a server of its own.
mailer_node();
my $topic = orders_topic('044', 8, $BEFORE + $AFTER + 2 * $STOPPED, $CUSTOMERS);
orders_produce('orders_044', $topic, 1, $BEFORE);

my %job = %{ backend_jobs($topic, 'latest_044', start => 'latest') };
# Stopped before it reads anything.
my %idle = %{ backend_jobs($topic, 'idle_044', start => 'latest') };

# Running means positioned: every partition at its end offset.
for my $j (map { ($job{$_}, $idle{$_}) } @BACKENDS)
{
	wait_job_running($j);
	# Sum of positions = events on the topic: each partition is at its end.
	wait_until("$j to position its 8 partitions", sub {
		psql("SELECT count(*) = 8 AND sum(position) = $BEFORE "
			  . "FROM mailer.partition_metrics WHERE name = '$j'") eq 't';
	});
	pass("$j starts at the end of the 8 partitions");
	# An idle job learns the end offsets too: its lag is known, and nil.
	wait_until("$j to show the end offsets and no lag", sub {
		psql("SELECT count(*) = 8 AND bool_and(end_offset = position AND lag = 0) "
			  . "FROM mailer.partition_metrics WHERE name = '$j'") eq 't'
		  && job_metric($j, 'consumer_lag') eq '0';
	}, 30);
	pass("$j: partition_metrics show each end offset and lag 0 before any event");
}

# The idle jobs stop before any event: their final checkpoint pins where they are.
is(psql("SELECT mailer.stop_job('$idle{$_}')"), 'stopped', "$_: idle job stopped") for @BACKENDS;

orders_produce('orders_044', $topic, $BEFORE + 1, $BEFORE + $AFTER);
for my $b (@BACKENDS)
{
	my $j = $job{$b};
	is(psql("SELECT mailer.wait_job('$j', '5 minutes')"), 'running', "$b: caught up");
	totals_check('orders_044', $j, "$b, start latest", "order_id BETWEEN $BEFORE + 1 AND $BEFORE + $AFTER");
	is(job_metric($j, 'records_in'), $AFTER, "$b: only the $AFTER events produced after the start were read");
	psql("SELECT mailer.stop_job('$j')");
}

# Produced while stopped: read at the next start (latest is only for a first start).
my $from = $BEFORE + $AFTER + 1;
my $to = $from + $STOPPED - 1;
orders_produce('orders_044', $topic, $from, $to);
for my $b (@BACKENDS)
{
	psql("SELECT mailer.start_job('$job{$b}')");
	psql("SELECT mailer.start_job('$idle{$b}')");
	is(psql("SELECT mailer.wait_job('$job{$b}', '5 minutes')"), 'running', "$b: caught up after a restart");
	totals_check('orders_044', $job{$b}, "$b, restarted", "order_id BETWEEN $BEFORE + 1 AND $to");
	is(psql("SELECT mailer.wait_job('$idle{$b}', '5 minutes')"), 'running', "$b: idle job caught up");
	totals_check('orders_044', $idle{$b}, "$b, the job stopped before any event", "order_id BETWEEN $BEFORE + 1 AND $to");
	is(job_metric($idle{$b}, 'records_in'), $AFTER + $STOPPED, "$b: the idle job read everything after its start");
}

psql("SELECT mailer.drop_job('$_')") for values %job, values %idle;

# The server crashes after the jobs started at the latest offsets, before
# they committed any checkpoint; events arrive while it is down.  Started
# again, the jobs begin where they first began, not at the latest offsets
# of the moment they come back: those events are read.
my $on_topic = $to;
my ($cfrom, $cto) = ($to + 1, $to + $STOPPED);
my %crash = %{ backend_jobs($topic, 'crash_044', start => 'latest') };
for my $j (values %crash)
{
	wait_job_running($j);
	wait_until("$j to position its 8 partitions", sub {
		psql("SELECT count(*) = 8 AND sum(position) = $on_topic FROM mailer.partition_metrics WHERE name = '$j'") eq 't';
	});
}
# The events, made while the server is still up, produced while it is down.
my $lines = psql("SELECT customer_id || E'\\t' || json_build_object('order_id', order_id, 'customer_id', customer_id, "
	  . "'amount', amount, 'ts', ts)::text FROM orders_044 WHERE order_id BETWEEN $cfrom AND $cto ORDER BY order_id");
pg_service('crash');
kcat_produce($topic, "$lines\n");
pg_service('start');
wait_server_up();
for my $b (@BACKENDS)
{
	is(psql("SELECT mailer.wait_job('$crash{$b}', '5 minutes')"), 'running', "$b: caught up after the crash");
	totals_check('orders_044', $crash{$b}, "$b, crashed before its first checkpoint", "order_id BETWEEN $cfrom AND $cto");
	is(job_metric($crash{$b}, 'records_in'), $STOPPED, "$b: the $STOPPED events produced while the server was down were read");
	psql("SELECT mailer.drop_job('$crash{$b}')");
}
kafka('delete-topic', $topic);
done_testing();
