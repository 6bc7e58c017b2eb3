# A checkpoint's output rows go into the sink in slices of 4096 rows, each
# slice's memory freed before the next is emitted (operators/keyed_cache.c,
# keyed_emit_slice).  One checkpoint here changes about 17,000 keys: five
# slices.  Three keys' rows fail their cast into the sink's column (a
# domain's CHECK), one in the first slice, one in a middle one and one in
# the last; with on_error dead_letter each of them is a dead letter, and
# every other key's row is in the table with the count and total the raw
# events give: nothing lost, nothing twice, on both state backends.  With
# on_error fail the job fails naming the row, and writes nothing of that
# checkpoint.  Sliding windows kept as panes, emit update: a checkpoint
# emits every window changed since (operators/window.c, window_emit_panes),
# 18,000 rows here, in slices the same way; and a SIGKILL between two
# slices loses and doubles nothing.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;
use JSON::PP;

fresh_extension();

psql(<<'SQL');
DROP TABLE IF EXISTS t218_raw, t218_rocksdb, t218_memory, t218_fail, t218_w_rocksdb, t218_w_memory, t218_w_kill, t218_ev;
DROP DOMAIN IF EXISTS t218_key, t218_wkey;
CREATE TABLE t218_raw (key text, value jsonb);
SQL

# 40,000 events over 20,000 keys: about 17,300 keys seen, each with its
# own row at the one checkpoint the bounded stream ends with.
my $gen = q{"source": {"type": "generator", "events": 40000, "keys": 20000, "seed": 218}};
my $steps = q{"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}},
	{"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}]};

psql(qq{SELECT mailer.create_job('t218_raw', \$spec\${$gen, "sink": {"type": "table", "table": "t218_raw"}}\$spec\$)});
is(wait_job('t218_raw'), 'finished', 'the raw job ends finished');
my $want = q{SELECT value->>'customer_id' AS customer_id, count(*) AS n, sum((value->>'amount')::numeric) AS total
	FROM t218_raw GROUP BY 1};
my $keys = psql("SELECT count(*) FROM ($want) w");
cmp_ok($keys, '>', 3 * 4096, "more keys than three slices hold ($keys)");

# The refused keys: the 100th, 9000th and last key to appear, so that they
# fall in the first, a middle and the last slice (a checkpoint emits the
# keys in the order they changed).
my @refused = split /,/, psql(q{SELECT string_agg(customer_id, ',' ORDER BY first) FROM (
	SELECT customer_id, first, row_number() OVER (ORDER BY first) AS nth, count(*) OVER () AS keys
	  FROM (SELECT value->>'customer_id' AS customer_id, min((value->>'order_id')::bigint) AS first
			  FROM t218_raw GROUP BY 1) f) k
	WHERE nth IN (100, 9000) OR nth = keys});
is(scalar(@refused), 3, "three keys to refuse: @refused");
my $refused_list = join(', ', map { "'$_'" } @refused);

psql(qq{CREATE DOMAIN t218_key AS text CHECK (VALUE NOT IN ($refused_list));
	CREATE TABLE t218_rocksdb (customer_id t218_key PRIMARY KEY, n bigint, total numeric);
	CREATE TABLE t218_memory (LIKE t218_rocksdb INCLUDING ALL);
	CREATE TABLE t218_fail (LIKE t218_rocksdb INCLUDING ALL);});
for my $backend (qw(rocksdb memory))
{
	psql(qq{SELECT mailer.create_job('t218_$backend', \$spec\${$gen, $steps,
		"sink": {"type": "table", "table": "t218_$backend"}, "on_error": "dead_letter",
		"checkpoint": {"interval": "1 hour"}, "state": {"backend": "$backend"}}\$spec\$)});
}

for my $backend (qw(rocksdb memory))
{
	my $job = "t218_$backend";

	is(wait_job($job), 'finished', "$backend: the job ends finished");
	is(job_metric($job, 'records_in'), '40000', "$backend: every event read");
	is(psql("SELECT count(*) FROM mailer.checkpoints c JOIN mailer.jobs j USING (job_id)
			 WHERE j.name = '$job' AND c.epoch > 0"), '1', "$backend: one checkpoint wrote the rows");
	same_rows("SELECT customer_id::text, n, total FROM $job",
			  "SELECT * FROM ($want) w WHERE customer_id NOT IN ($refused_list)",
			  "$backend: every other key's row, with the raw events' count and total");
	my $dead = dead_letters($job);
	is(scalar(@$dead), 3, "$backend: three dead letters");
	is(join(',', sort map { $_->{stage} } @$dead), 'sink,sink,sink', "$backend: each at the sink");
	my $rows = join(' ', map { $_->{value_hex} ? pack('H*', $_->{value_hex}) : '' } @$dead);
	like($rows, qr/"$_"/, "$backend: the row of $_ is a dead letter") for @refused;
	like($dead->[0]{error}, qr/t218_key/, "$backend: the error names the domain");
}

# on_error fail: the first refused row fails the job, and the checkpoint
# that would have written the rows before it commits nothing.
psql(qq{SELECT mailer.create_job('t218_fail', \$spec\${$gen, $steps,
	"sink": {"type": "table", "table": "t218_fail"}, "on_error": "fail",
	"checkpoint": {"interval": "1 hour"}}\$spec\$)});
wait_until('t218_fail to fail', sub { job_info('t218_fail')->{state} eq 'failed' });
like(job_info('t218_fail')->{last_error},
	qr/an output row could not be written.*t218_key/s, 'on_error fail: the error names the row\'s failure');
is(psql('SELECT count(*) FROM t218_fail'), '0', 'on_error fail: no row of the failed checkpoint written');

# Sliding windows in panes, emit update: 6,000 keys, two events each, all
# in one pane of 10 minutes, so each key changes its three windows of 30
# minutes and no window ends.  The stop's checkpoint emits the 18,000
# window rows, in the order the keys came, in five slices.  The refused
# keys: the first (the first slice), the 1366th (rows 4095 to 4097, across
# the first slice's end), the 3001st (the third slice) and the last (the
# last slice).  A numeric sum too large to be kept scaled in an integer
# puts each window's values in the memory a slice frees.
my $topic = unique_name('t218');
kafka('create-topic', $topic, 1);
my @ev = map { { p => 0, k => sprintf('k%05d', $_ % 6000), t => $_ * 0.003, a => $_ % 97 } } 0 .. 11999;
events_table('t218_ev', \@ev);
produce_events($topic, \@ev);
my @refused_w = ('k00000', 'k01365', 'k03000', 'k05999');
my $refused_w = join(', ', map { "'$_'" } @refused_w);
psql(qq{CREATE DOMAIN t218_wkey AS text CHECK (VALUE NOT IN ($refused_w));
	CREATE TABLE t218_w_rocksdb (k t218_wkey, window_start timestamptz, window_end timestamptz,
		n bigint, total numeric, big numeric, PRIMARY KEY (k, window_start));
	CREATE TABLE t218_w_memory (LIKE t218_w_rocksdb INCLUDING ALL);
	CREATE TABLE t218_w_kill (LIKE t218_w_rocksdb INCLUDING ALL);});
sub create_sliding
{
	my ($job, $backend) = @_;
	psql(qq{SELECT mailer.create_job('$job', \$spec\${"source": {"type": "kafka",
		"brokers": "$ENV{KAFKA_BROKERS}", "topic": "$topic", "start": "earliest"},
		"event_time": "(value->>'ts')::timestamptz", "watermark": {"max_out_of_orderness": "1 second"},
		"steps": [{"key_by": {"k": "value->>'k'"}},
			{"window": {"type": "sliding", "size": "30 minutes", "slide": "10 minutes", "emit": "update"}},
			{"aggregate": {"n": "count(*)", "total": "sum((value->>'a')::int8)",
						   "big": "sum((value->>'a')::numeric * 1e40)"}}],
		"sink": {"type": "table", "table": "$job"}, "on_error": "dead_letter",
		"checkpoint": {"interval": "1 hour"}, "state": {"backend": "$backend"}}\$spec\$)});
}
create_sliding("t218_w_$_", $_) for qw(rocksdb memory);
my $want_w = want_sliding('t218_ev', 1800, 600, undef, 'count(*) AS n, sum(a) AS total, sum(a) * 1e40 AS big');
is(psql("SELECT count(*) FROM ($want_w) w"), '18000', 'sliding: 18,000 windows changed, four slices and more');

# The table's rows and the dead letters of a sliding job: each refused
# key's three windows are dead letters, $times times each.
sub sliding_rows_ok
{
	my ($job, $what, $times) = @_;
	same_rows("SELECT k::text, window_start, window_end, n, total, big FROM $job",
			  "SELECT * FROM ($want_w) w WHERE k NOT IN ($refused_w)",
			  "$what: every other window's row, with the raw events' count and sums");
	my $dead = dead_letters($job);
	my %windows;
	for my $d (@$dead)
	{
		my $row = JSON::PP::decode_json(pack('H*', $d->{value_hex}));
		$windows{"$row->{k} $row->{window_start}"}++;
	}
	is(join(',', sort map { (split / /)[0] } keys %windows), join(',', map { ($_) x 3 } @refused_w),
		"$what: the dead letters are the refused keys' three windows each");
	is(join(',', grep { $windows{$_} != $times } sort keys %windows), '', "$what: each window dead-lettered $times") if $times;
}

for my $backend (qw(rocksdb memory))
{
	my $job = "t218_w_$backend";

	# The checkpoint is the stop's: the interval is an hour.
	wait_until("$job to read every event", sub { job_metric($job, 'records_in') eq '12000' });
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "sliding, $backend: stopped after every event read");
	is(psql("SELECT count(*) FROM mailer.checkpoints c JOIN mailer.jobs j USING (job_id)
			 WHERE j.name = '$job' AND c.epoch > 0"), '1', "sliding, $backend: one checkpoint wrote the rows");
	sliding_rows_ok($job, "sliding, $backend", 1);
}
# Panes indeed (the rows came from window_emit_panes): no window entries.
is(memory_state_kinds('t218_w_memory'), 'L', 'sliding: the state is panes alone');

# A SIGKILL of the worker held after a slice went into the sink buffer,
# with more to emit (test point keyed_slice_flushed; in a pane job only
# the panes' rows reach it): that checkpoint never commits, the job
# replays from its start, and the table and the dead letters come out as
# above.  mailer.max_buffered_rows 5000 makes the checkpoint early, after
# about 5000 keys' panes changed (15,000 window rows); later checkpoints may
# emit a refused key's windows again, each time a dead letter.
setting_until_exit('mailer.max_buffered_rows', 5000);
my $from = test_point_hold('keyed_slice_flushed');
create_sliding('t218_w_kill', 'rocksdb');
kill_held(test_point_wait_reached('keyed_slice_flushed', $from, 60),
	'kill: SIGKILL to the worker held between two slices');
setting_reset('mailer.max_buffered_rows');
wait_until('t218_w_kill to read every event again', sub { job_metric('t218_w_kill', 'records_in') eq '12000' });
is(psql("SELECT mailer.stop_job('t218_w_kill')"), 'stopped', 'kill: stopped after every event read');
sliding_rows_ok('t218_w_kill', 'kill', 0);

done_testing();
