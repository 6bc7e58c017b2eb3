# Any PostgreSQL aggregate in a keyed job without a window (issue 19):
# count(DISTINCT), bool_and, bit_or, string_agg, array_agg and jsonb_agg
# with ORDER BY, jsonb_object_agg, stddev, variance, corr, regr_slope, a
# schema-qualified bool_or and FILTER clauses (on count(*), and on sum,
# which takes the general path with it), beside the fast count(*), in one
# aggregate step.  Keys include one of a single record (stddev and corr
# NULL), one whose b is always true, one always false (bool_and both ways,
# a FILTER that keeps nothing: sum NULL, count 0), and NULL v's.  Each
# job's rows must equal PostgreSQL's GROUP BY of the same calls over the
# same records (floats to 9 decimals), on both backends, after the first
# half, and after a restart (the states read back from the backend: the
# cache is emptied at every checkpoint) and the second half.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerAggTest;
use Test::More;

my @BACKENDS = qw(rocksdb memory);
my $topic = fresh_topic('t161', 2);
state_cache_entries_until_exit(0);

my @aggs = (
	agg_builtins(),
	[ bx => "pg_catalog.bool_or((value->>'b')::boolean)" ],
	[ rs => "regr_slope((value->>'v')::float8, (value->>'x')::float8)", 'float' ],
);
my $n = 1200;
agg_records('t161_src', count => $n, keys => 12);

my %job = map { $_ => "t161_$_" } @BACKENDS;
for my $b (@BACKENDS)
{
	agg_sink($job{$b}, agg_want_keyed('t161_src', \@aggs), 'k');
	psql("SELECT mailer.create_job('$job{$b}', \$spec\$"
		  . agg_spec(\@aggs, topic => $topic, table => $job{$b}, backend => $b) . "\$spec\$)");
}

sub check
{
	my ($what, $upto) = @_;
	my $want = agg_want_keyed('t161_src', \@aggs, "seq <= $upto");
	for my $b (@BACKENDS)
	{
		is(wait_job($job{$b}, 60), 'running', "$what: $b caught up");
		agg_same($job{$b}, $want, \@aggs, "$what: $b equals SQL's GROUP BY");
	}
}

agg_produce($topic, 't161_src', 'seq <= ' . $n / 2);
check('first half', $n / 2);

for my $b (@BACKENDS)
{
	is(psql("SELECT mailer.stop_job('$job{$b}')"), 'stopped', "$b job stopped");
	psql("SELECT mailer.start_job('$job{$b}')");
}
agg_produce($topic, 't161_src', 'seq > ' . $n / 2);
check('after a restart, every record', $n);

# The edges the data was made for are in SQL's answer, so in the jobs'.
is(psql("SELECT concat_ws(',', cd, sd IS NULL, co IS NULL, cf, sf IS NULL) FROM $job{memory} WHERE k = 'solo'"),
	psql("SELECT concat_ws(',', 1, true, true, count(*) FILTER (WHERE (value->>'v')::int > 5), "
		  . "sum((value->>'v')::int) FILTER (WHERE value->>'b' = 'true') IS NULL) FROM t161_src WHERE k = 'solo'"),
	'the key of one record: one distinct value, stddev and corr NULL');
is(psql("SELECT string_agg(concat_ws(':', k, ba, bx, sf IS NULL), ' ' ORDER BY k) FROM $job{rocksdb} WHERE k IN ('k0', 'k1')"),
	'k0:t:t:f k1:f:f:t', 'bool_and true and false; a FILTER that keeps nothing gives a NULL sum');
cmp_ok(psql("SELECT count(*) FROM $job{rocksdb} WHERE aa::text LIKE '%NULL%'"), '>', 0, 'NULL inputs are in the arrays');
for my $b (@BACKENDS)
{
	accounting_ok($job{$b});
	is(job_metric($job{$b}, 'records_dead_lettered'), '0', "$b: no dead letters");
	psql("SELECT mailer.drop_job('$job{$b}')");
}
kafka('delete-topic', $topic);
done_testing();
