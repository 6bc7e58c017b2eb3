# Bad input keeps its meaning at any parallelism (issue 13).  Among 3,000
# orders on 8 partitions: malformed JSON (dead at decode, in the subtask
# that reads it), a filter that fails on a record (dead at filter), a
# division by zero in an aggregate's argument and a float sum that
# overflows on a customer's second and third big orders (dead at
# aggregate, in the subtask that owns the customer, whichever read it).
# At parallelism 1 and 4, on RocksDB, and at 4 on the memory backend, with
# a stop and a start half way: the dead letters are the same, each once,
# at the (topic, partition, offset, stage) of its record; the totals equal
# SQL's GROUP BY over the accepted records; and mailer.metrics accounts
# for every record: records_in = accepted + filtered + dead_lettered +
# skipped + late.
#
# MAILER_TEST_PARALLELISMS limits the parallelisms (MailerParallelTest).
# On a server of its own (MailerCluster), with a slot for every subtask.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use MailerParallelTest;
use Test::More;

my $N = 3_000;
my $PARTITIONS = 8;

mailer_node('node', par_node_conf(24));
my $topic = fresh_topic('t124', $PARTITIONS);
my $parallel = parallel_build();

par_orders('t124_orders', 1, $N, create => 1, partitions => $PARTITIONS);

# The records that are not plain orders: key => [partition, value, stage
# of its dead letter or undef (accepted: into t124_extra) or 'filtered'].
my @special = (
	[ 'bad-json', 1, '{"customer_id": "c1", "amount": ', 'decode' ],
	[ 'bad-filter', 2, '{"customer_id": "c2", "amount": 1, "skip": "maybe"}', 'filter' ],
	[ 'skipped-1', 3, '{"customer_id": "c3", "amount": 7, "skip": true}', 'filtered' ],
	[ 'div-zero', 3, '{"customer_id": "c3", "amount": 5, "qty": 0}', 'aggregate' ],
	[ 'big-1', 5, '{"customer_id": "big", "amount": 1, "big": 1e308}', undef ],
	[ 'big-2', 5, '{"customer_id": "big", "amount": 2, "big": 1e308}', 'aggregate' ],
	[ 'halved', 6, '{"customer_id": "c6", "amount": 9, "qty": 2}', undef ],
	[ 'bad-json-2', 7, '{"customer_id": "c7" "amount": 1}', 'decode' ],
	[ 'big-3', 5, '{"customer_id": "big", "amount": 3, "big": 1e308}', 'aggregate' ],
	[ 'skipped-2', 0, '{"customer_id": "c0", "amount": 7, "skip": true}', 'filtered' ],
);
psql("DROP TABLE IF EXISTS t124_extra; CREATE TABLE t124_extra (customer_id text, amount numeric, qty int, big float8)");
for my $s (grep { !defined $_->[3] } @special)
{
	psql("INSERT INTO t124_extra SELECT v->>'customer_id', (v->>'amount')::numeric, coalesce((v->>'qty')::int, 1), "
		  . "coalesce((v->>'big')::float8, 0) FROM (SELECT '$s->[2]'::jsonb AS v) x");
}
my $want = "SELECT customer_id, count(*) AS orders, sum(amount / qty) AS total, sum(big) AS big FROM "
  . "(SELECT customer_id, amount, 1 AS qty, 0::float8 AS big FROM t124_orders "
  . "UNION ALL SELECT * FROM t124_extra) a GROUP BY 1";

my @jobs;
my (%seen, %p);
for my $j ([ 1, 'rocksdb' ], [ 4, 'rocksdb' ], [ 4, 'memory' ])
{
	my $p = par($j->[0]);
	my $name = sprintf('t124_p%d_%s', $p, substr($j->[1], 0, 1));
	next if $seen{$name}++;
	par_sink($name, 'totals', [ 'orders bigint', 'total numeric', 'big float8' ]);
	psql("SELECT mailer.create_job('$name', \$spec\$" . par_spec(topic => $topic, table => $name,
		parallelism => $p, backend => $j->[1], interval => '500 milliseconds',
		extra_steps => q[{"filter": "NOT coalesce((value->>'skip')::boolean, false)"}],
		aggregate => q[{"orders": "count(*)",
			"total": "sum((value->>'amount')::numeric / coalesce((value->>'qty')::int, 1))",
			"big": "sum(coalesce((value->>'big')::float8, 0))"}]) . "\$spec\$)");
	push @jobs, $name;
	$p{$name} = $p;
}
note('jobs: ' . join(', ', @jobs));

# The special records go between chunks of orders, in their partitions;
# the jobs stop and start half way.
my $chunk = $N / 4;
for my $c (0 .. 3)
{
	par_produce('t124_orders', $topic, $c * $chunk + 1, ($c + 1) * $chunk);
	for my $s (@special[ $c * 3 .. ($c == 3 ? $#special : $c * 3 + 2) ])
	{
		kcat_produce_raw($topic, "$s->[0]\t$s->[2]\n", partition => $s->[1]);
	}
	if ($c == 1)
	{
		for my $job (@jobs)
		{
			is(wait_job($job), 'running', "$job: half way, caught up");
			is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job: stopped half way");
			psql("SELECT mailer.start_job('$job')");
		}
	}
}
my $total = $N + @special;

# Where each special record is: its expected dead letter, if any.
my $at = topic_offsets_by_key($topic);
my $want_dead = join("\n", sort map { "$topic:$at->{$_->[0]}[0]:$at->{$_->[0]}[1]:$_->[3]" }
	  grep { defined $_->[3] && $_->[3] ne 'filtered' } @special);
my $dead_count = () = $want_dead =~ /\n/g;
$dead_count++;
is(join(',', map { $at->{ $_->[0] }[0] } @special), join(',', map { $_->[1] } @special),
	'each special record is in its partition');

my %got;
for my $job (@jobs)
{
	is(wait_job($job), 'running', "$job: wait_job returns, the job running");
	par_subtasks_ok($job, $p{$job}) if $parallel;
	par_same($job, $want, "$job: the totals equal the GROUP BY over the accepted records");
	my $dead = dead_letters($job);
	$got{$job} = join("\n", sort map { "$_->{topic}:$_->{partition}:$_->{offset}:$_->{stage}" } @$dead);
	is($got{$job}, $want_dead, "$job: one dead letter for each bad record, at its topic, partition, offset and stage");
	is(scalar(@$dead), $dead_count, "$job: $dead_count dead letters, none twice");
	my $m = accounting_ok($job);
	is("$m->{records_in} $m->{records_dead_lettered} $m->{records_filtered}", "$total $dead_count 2",
		"$job: records_in counts every record once, dead letters and the 2 filtered among them");
	like(psql("SELECT string_agg(DISTINCT error, ' | ') FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) "
			  . "WHERE j.name = '$job' AND stage = 'aggregate'"), qr/division by zero.*out of range|out of range.*division by zero/,
		"$job: the aggregate's dead letters say why");
}
is(scalar(keys %{ { map { $_ => 1 } values %got } }), 1, 'the same dead letters at every parallelism');

psql("SELECT mailer.stop_job(name) FROM mailer.jobs WHERE name LIKE 't124%'");
psql("SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 't124%'");
kafka('delete-topic', $topic);
done_testing();
