# A checkpoint's output rows go into the sink in slices of 4096 rows, each
# slice's memory freed before the next is emitted (operators/keyed.c,
# flush_out_rows).  One checkpoint here changes about 17,000 keys: five
# slices.  Three keys' rows fail their cast into the sink's column (a
# domain's CHECK), one in the first slice, one in a middle one and one in
# the last; with on_error dead_letter each of them is a dead letter, and
# every other key's row is in the table with the count and total the raw
# events give: nothing lost, nothing twice, on both state backends.  With
# on_error fail the job fails naming the row, and writes nothing of that
# checkpoint.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

psql(<<'SQL');
DROP TABLE IF EXISTS t218_raw, t218_rocksdb, t218_memory, t218_fail;
DROP DOMAIN IF EXISTS t218_key;
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

done_testing();
