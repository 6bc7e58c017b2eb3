# Parallel jobs whose first batches are full: the topic holds all its orders
# before the jobs start, so each subtask reads batches of mailer.batch_size
# and routes half or more of every one to the others. Between its chunks of
# SHUFFLE_CHUNK messages a subtask sends what it routed and, while a queue
# is full, takes in what the others sent, resetting its batch context after
# each message taken in, in the middle of its own batch. The batch's run
# (pipeline.c) once lived in that context: freed and reused there, it sent
# the worker off into freed memory, a segfault about one time in three
# (`make demo` met it), else wrong work. Each job, in three rounds, must
# equal SQL's GROUP BY, with no restart and no worker crash in the log.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerParallelTest;
use Test::More;

my $N = 24_000;
my $PARTITIONS = 4;

fresh_extension();
my $topic = fresh_topic('t198', $PARTITIONS);
par_orders('t198_orders', 1, $N, create => 1, partitions => $PARTITIONS);
par_produce('t198_orders', $topic, 1, $N);
my $end = $N * 0.1 + 3600;
my $markers = par_markers($topic, $end, 0 .. $PARTITIONS - 1);
my $log_from = pg_log_size();

for my $round (1 .. 3)
{
	my @jobs = (
		{ name => "t198_tumbling_$round", kind => 'tumbling', p => par(2), backend => 'rocksdb' },
		{ name => "t198_totals_$round", kind => 'totals', p => par(3), backend => 'memory' },
	);
	par_job($_->{name}, topic => $topic, kind => $_->{kind}, parallelism => $_->{p}, backend => $_->{backend})
	  for @jobs;
	for my $j (@jobs)
	{
		my $name = $j->{name};
		wait_watermark($name, ev_time($end - 5), 120) if $j->{kind} ne 'totals';
		is(wait_job($name, 120), 'running', "round $round, $name (parallelism $j->{p}): wait_job returns");
		par_same($name, par_want($j->{kind}, 't198_orders'), "  $j->{kind} equals the GROUP BY over the orders");
		is(psql("SELECT restarts FROM mailer.jobs WHERE name = '$name'") . ' ' . job_metric($name, 'records_in'),
			'0 ' . ($N + $markers),
			'  no restart; every record read once');
	}
	psql("SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 't198%'");
}
my @crashes = pg_log_since($log_from) =~ /(background worker "mailer job" \(PID \d+\) was terminated by signal \d+[^\n]*)/g;
is(scalar(@crashes), 0, 'no job worker crashed' . (@crashes ? ": @crashes" : ''));

kafka('delete-topic', $topic);
done_testing();
