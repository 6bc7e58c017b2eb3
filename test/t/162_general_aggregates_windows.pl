# Any PostgreSQL aggregate per window (issue 19): tumbling, session and
# sliding windows (emit final) on both backends, with count(DISTINCT),
# bool_and, bit_or, string_agg, array_agg and jsonb_agg with ORDER BY,
# jsonb_object_agg, stddev, variance, corr, FILTER, and the hll extension's
# hll_add_agg (an internal state with serialize and combine functions) into
# a column of type hll.  Sessions merge (records arrive up to 4 s out of
# order, bridging sessions of a 2 s gap) and sliding windows combine their
# panes: both through the aggregates' combine functions, or the inputs kept
# for DISTINCT and ORDER BY.  Every window's row must equal SQL's GROUP BY
# of the same calls over the window's records (floats to 9 decimals), the
# hll value itself and its cardinality included.  The cache is set to 2
# entries (mailer.state_cache_entries): at a checkpoint where it holds more
# than 2 beyond what it last kept, or more than 2 were deleted since, it is
# rebuilt with 2 windows copied through their stored form, the others are
# read back from the backend.  The jobs restart midway: the states are
# read back.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerAggTest;
use Test::More;

my $topic = fresh_topic('t162', 1);
psql("SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS hll");
state_cache_entries_until_exit(2);

my @aggs = (agg_builtins(), [ hl => "hll_add_agg(hll_hash_text(value->>'u'))" ]);
my $n = 720;
# Each key every 1.5 s, and 10 s more after each 60 records.
agg_records('t162_src', count => $n, keys => 6, step => 0.25, burst => 60, pause => 10);
my $select = agg_select(\@aggs);
my %window = (
	tumbling => [ '{"type": "tumbling", "size": "10 seconds"}', want_tumbling('t162_src', '10 seconds', $select) ],
	session  => [ '{"type": "session", "gap": "2 seconds"}', want_sessions('t162_src', '2 seconds', $select) ],
	sliding  => [ '{"type": "sliding", "size": "20 seconds", "slide": "5 seconds"}',
		want_sliding('t162_src', 20, 5, undef, $select) ],
);
my @jobs;
for my $w (sort keys %window)
{
	for my $b (qw(rocksdb memory))
	{
		my $j = "t162_${w}_$b";
		push @jobs, [ $j, $w ];
		agg_sink($j, $window{$w}[1], 'k, window_start');
		psql("SELECT mailer.create_job('$j', \$spec\$"
			  . agg_spec(\@aggs, topic => $topic, table => $j, backend => $b, window => $window{$w}[0]) . "\$spec\$)");
	}
}

agg_produce($topic, 't162_src', 'seq <= ' . $n / 2);
for my $job (@jobs)
{
	is(wait_job($job->[0], 60), 'running', "$job->[0] read the first half");
	is(psql("SELECT mailer.stop_job('$job->[0]')"), 'stopped', "$job->[0] stopped");
	psql("SELECT mailer.start_job('$job->[0]')");
}
agg_produce($topic, 't162_src', 'seq > ' . $n / 2);
# A record an hour later closes every window.
kcat_produce($topic, "flush\t" . '{"k": "flush", "seq": 0, "w": "flush", "ts": "2030-01-01T01:00:00Z"}' . "\n");

for my $job (@jobs)
{
	my ($j, $w) = @$job;
	is(wait_job($j, 60), 'running', "$j read every record");
	agg_same($j, $window{$w}[1], \@aggs, "$j: every window equals SQL's GROUP BY",
		group => 'k, window_start, window_end', where => "k <> 'flush'");
	is(psql("SELECT sum(hll_cardinality(hl)) FROM $j WHERE k <> 'flush'"),
		psql("SELECT sum(hll_cardinality(hl)) FROM ($window{$w}[1]) w"), "$j: hll_cardinality of every window as SQL's");
	is(job_metric($j, 'records_late') . ',' . job_metric($j, 'records_dead_lettered'), '0,0', "$j: nothing late or dead");
}
# The data makes the windows the test is about: sessions of several
# records, and records that arrive after two of their key's records more
# than the gap apart and fall between them (the sessions merge).
cmp_ok(psql("SELECT count(*) FROM ($window{session}[1]) s"), '<', $n / 3, 'sessions hold several records');
cmp_ok(psql(q{SELECT count(*) FROM t162_src b WHERE EXISTS (
	SELECT FROM t162_src a, t162_src c
	 WHERE a.k = b.k AND c.k = b.k AND a.seq < b.seq AND c.seq < b.seq AND a.ts < b.ts AND c.ts > b.ts
	   AND c.ts - a.ts >= interval '2 seconds'
	   AND NOT EXISTS (SELECT FROM t162_src m WHERE m.k = b.k AND m.seq < b.seq AND m.ts > a.ts AND m.ts < c.ts))}),
	'>', 50, 'records bridge sessions');
cmp_ok(psql("SELECT count(DISTINCT cd) FROM t162_tumbling_memory"), '>', 2, 'count(DISTINCT) differs between windows');

psql("SELECT mailer.drop_job('$_->[0]')") for @jobs;
kafka('delete-topic', $topic);
done_testing();
