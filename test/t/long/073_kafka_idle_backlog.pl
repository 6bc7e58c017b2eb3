# A partition with records left to read is never idle, however long the
# broker keeps it silent.  Partition 1 has a backlog of 15 events (10 to
# 24 s) that the job fetches one record batch at a time; partition 0 has
# one event far ahead (500 s).  The job is held at the batch that reads
# it while the broker is killed: then both partitions are silent for longer than
# idle_timeout (1 s).  Partition 0, read to its end, goes idle; partition
# 1 must not, or the watermark would jump to partition 0's 500 s and every
# event of the backlog would be late once the broker is back.  The same
# when the job's worker starts again while the broker is away: partitions
# not assigned yet may hold anything, and are not idle either.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use Test::More;

# A test point left named would hold every later job.
END { eval { test_point_release() } }

fresh_extension();
my $topic = unique_name('t073');
kafka('create-topic', $topic, 2);
psql("DROP TABLE IF EXISTS out_073; CREATE TABLE out_073 (k text, window_start timestamptz, "
	  . "window_end timestamptz, n bigint, total numeric, PRIMARY KEY (k, window_start))");

# One record batch per fetch and at most one waiting per partition: the
# backlog stays on the broker until the job reads it.
my $job = 'backlog_073';
my $spec = <<"JSON";
{"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic", "start": "earliest",
            "options": {"queued.min.messages": "1", "queued.max.messages.kbytes": "1",
                        "fetch.message.max.bytes": "1", "fetch.max.bytes": "1000",
                        "message.max.bytes": "1000"}},
 "event_time": "(value->>'ts')::timestamptz",
 "watermark": {"max_out_of_orderness": "1 second", "idle_timeout": "1 second"},
 "steps": [{"key_by": {"k": "value->>'k'"}},
           {"window": {"type": "tumbling", "size": "10 seconds"}},
           {"aggregate": {"n": "count(*)", "total": "sum((value->>'a')::numeric)"}}],
 "sink": {"type": "table", "table": "out_073"},
 "checkpoint": {"interval": "200 milliseconds"},
 "state": {"backend": "memory"}}
JSON
psql("SELECT mailer.create_job('$job', \$spec\$$spec\$spec\$)");

# Each event its own record batch.
sub produce
{
	my ($p, $k, @t) = @_;
	kcat_produce_raw($topic, join("\n", map { sprintf("%s\t{\"k\": \"%s\", \"ts\": \"%s\", \"a\": 1}", $k, $k, ev_time($_)) } @t),
		partition => $p, args => [ '-X', 'batch.num.messages=1' ]);
}

sub partition_row
{
	my ($p) = @_;
	return psql("SELECT position || ' ' || coalesce(end_offset::text, '-') || ' ' || idle::int "
		  . "FROM mailer.partition_metrics WHERE name = '$job' AND partition = $p");
}

produce(0, 'a', 0 .. 4);
produce(1, 'b', 0 .. 4);
is(wait_job($job), 'running', 'both partitions read to 4 s');
is(psql("SELECT mailer.stop_job('$job')"), 'stopped', 'stopped');

produce(1, 'b', 10 .. 24);
produce(0, 'a', 500);
# Batch by batch (held at each), until partition 0's event is read.
my $from = test_point_hold('kafka_polled');
psql("SELECT mailer.start_job('$job')");
my $p0_read;
for my $batch (1 .. 20)
{
	test_point_wait_reached('kafka_polled', $from, 60);
	note("batch $batch: partition 0: " . partition_row(0) . '; partition 1: ' . partition_row(1));
	last if $p0_read = (split / /, partition_row(0))[0] == 6;
	test_point_release();
	$from = test_point_hold('kafka_polled');
}
ok($p0_read, 'partition 0 read to its end, partition 1 not');
kafka('kill');
test_point_release();

# Partition 0 has nothing left: idle after 1 s of silence.
wait_until('partition 0 to be idle', sub { (split / /, partition_row(0))[2] eq '1' }, 60);
# Partition 1 has been silent as long: give it the time it would take to go idle.
eval { wait_until('partition 1 to be idle', sub { (split / /, partition_row(1))[2] eq '1' }, 3) };
my ($pos, $end, $idle) = split / /, partition_row(1);
note("partition 1 with the broker away: position $pos, end offset $end");
ok($pos < $end, 'partition 1 has a backlog: its position is below its end offset');
is($idle, '0', 'partition 1, silent with a backlog, is not idle');
is(psql("SELECT watermark < '" . ev_time(10) . "' FROM mailer.metrics WHERE name = '$job'"), 't',
	'the watermark waits for the backlog');

# Its worker starts again while the broker is still away: the partitions
# of its checkpoint are not assigned, their ends unknown, and none is idle.
is(psql("SELECT mailer.stop_job('$job')"), 'stopped', 'stopped with the broker away');
psql("SELECT mailer.start_job('$job')");
wait_until('the job to wait for Kafka', sub {
	psql("SELECT state = 'waiting' AND pid IS NOT NULL FROM mailer.jobs WHERE name = '$job'") eq 't';
}, 60);
eval { wait_watermark($job, ev_time(10), 3) };
is(psql("SELECT watermark < '" . ev_time(10) . "' FROM mailer.metrics WHERE name = '$job'"), 't',
	'restarted without the broker, the watermark still waits for the backlog');

kafka('start');
is(wait_job($job), 'running', 'the job read the backlog once the broker was back');
my $m = job_metrics($job);
is($m->{records_late}, 0, 'no record late');
is($m->{records_in}, 26, 'records_in 26');
is(scalar(@{ dead_letters($job) }), 0, 'no dead letters');
wait_watermark($job, ev_time(499));
wait_for_sql('the backlog\'s windows', "SELECT coalesce(sum(n), 0) FROM out_073 WHERE k = 'b' AND window_start >= '" . ev_time(10) . "'", '15', 30);
is(psql("SELECT string_agg(n::text, ',' ORDER BY window_start) FROM out_073 WHERE k = 'b'"), '5,10,5',
	'partition 1: every window of the backlog complete');

psql("SELECT mailer.drop_job('$job')");
kafka('delete-topic', $topic);
done_testing();
