# The keyed aggregates give PostgreSQL's results: count(*), count(e) with
# NULLs, sum and avg over smallint, integer, bigint, numeric, real and
# double precision, min and max over those and text and timestamptz.  The
# sink table is made by CREATE TABLE AS from the same aggregates over the
# source table, so its columns have the types PostgreSQL gives; the plan
# (describe_job) must give the same types, and every row must equal,
# text for text, what PostgreSQL computes.  A record whose key is NULL is
# a dead letter of stage key_by.  Half the events are read, the jobs stop
# and start (state read back from the backend), then the other half.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $N = 4_000;
my @BACKENDS = qw(rocksdb memory);

fresh_extension();
my $topic = unique_name('t048');
kafka('create-topic', $topic, 4);

# Values with NULLs of their own in every column; floats are multiples of
# 1/4, so their sums are exact whatever the order of addition; numerics
# have 0 to 3 decimals; bigint sums pass the range of bigint.  Key k9 has
# only NULL values; keys NULL (every 250th event) are dead letters.
psql("DROP TABLE IF EXISTS agg_048");
psql(<<'SQL');
CREATE TABLE agg_048 AS
SELECT id,
	   CASE WHEN id % 250 = 0 THEN NULL ELSE 'k' || (id % 23) END AS k,
	   CASE WHEN id % 7 = 0 OR id % 23 = 9 THEN NULL ELSE ((id * 37) % 1000 - 500)::smallint END AS s,
	   CASE WHEN id % 7 = 1 OR id % 23 = 9 THEN NULL ELSE (id * 7919) % 2000000 - 1000000 END AS i,
	   CASE WHEN id % 11 = 0 OR id % 23 = 9 THEN NULL ELSE id::bigint * 2000000000000000 - 1000000000000000 END AS b,
	   CASE WHEN id % 5 = 0 OR id % 23 = 9 THEN NULL ELSE round(id * 1.37, id % 4) END AS n,
	   CASE WHEN id % 13 = 0 OR id % 23 = 9 THEN NULL ELSE ((id % 97) * 0.25 - 10)::real END AS r,
	   CASE WHEN id % 17 = 0 OR id % 23 = 9 THEN NULL ELSE (id % 89) * 0.25 - 11 END::float8 AS f,
	   CASE WHEN id % 3 = 0 OR id % 23 = 9 THEN NULL WHEN id % 4 = 0 THEN upper(md5(id::text)) ELSE md5(id::text) END AS t,
	   CASE WHEN id % 9 = 0 OR id % 23 = 9 THEN NULL
			ELSE timestamptz '2024-01-01 00:00:00+00' + id * interval '37 minutes 13.123456 seconds' END AS ts
  FROM generate_series(1, 4000) id
SQL

# The aggregates, over the job's record (value jsonb) and over agg_048.
my @aggs = (
	[ cnt    => 'count(*)',                             'count(*)' ],
	[ cnt_i  => "count((value->>'i')::int)",            'count(i)' ],
	[ cnt_t  => "count(value->>'t')",                   'count(t)' ],
	[ sum_s  => "sum((value->>'s')::smallint)",         'sum(s)' ],
	[ sum_i  => "sum((value->>'i')::int)",              'sum(i)' ],
	[ sum_b  => "sum((value->>'b')::bigint)",           'sum(b)' ],
	[ sum_n  => "sum((value->>'n')::numeric)",          'sum(n)' ],
	[ sum_r  => "sum((value->>'r')::real)",             'sum(r)' ],
	[ sum_f  => "sum((value->>'f')::float8)",           'sum(f)' ],
	[ avg_s  => "avg((value->>'s')::smallint)",         'avg(s)' ],
	[ avg_i  => "avg((value->>'i')::int)",              'avg(i)' ],
	[ avg_b  => "avg((value->>'b')::bigint)",           'avg(b)' ],
	[ avg_n  => "avg((value->>'n')::numeric)",          'avg(n)' ],
	[ avg_r  => "avg((value->>'r')::real)",             'avg(r)' ],
	[ avg_f  => "avg((value->>'f')::float8)",           'avg(f)' ],
	[ min_i  => "min((value->>'i')::int)",              'min(i)' ],
	[ max_i  => "max((value->>'i')::int)",              'max(i)' ],
	[ min_b  => "min((value->>'b')::bigint)",           'min(b)' ],
	[ max_b  => "max((value->>'b')::bigint)",           'max(b)' ],
	[ min_n  => "min((value->>'n')::numeric)",          'min(n)' ],
	[ max_n  => "max((value->>'n')::numeric)",          'max(n)' ],
	[ min_f  => "min((value->>'f')::float8)",           'min(f)' ],
	[ max_f  => "max((value->>'f')::float8)",           'max(f)' ],
	[ min_t  => "min(value->>'t')",                     'min(t)' ],
	[ max_t  => "max(value->>'t')",                     'max(t)' ],
	[ min_ts => "min((value->>'ts')::timestamptz)",     'min(ts)' ],
	[ max_ts => "max((value->>'ts')::timestamptz)",     'max(ts)' ],
);
my $expected = "SELECT k, " . join(', ', map { "$_->[2] AS $_->[0]" } @aggs)
  . " FROM agg_048 WHERE k IS NOT NULL GROUP BY k";
my $aggregate_json = join(",\n", map { qq("$_->[0]": "$_->[1]") } @aggs);

sub produce
{
	my ($from, $to) = @_;
	my $sql = "SELECT coalesce(k, 'none') || E'\\t' || json_build_object('k', k, 's', s, 'i', i, 'b', b, "
	  . "'n', n, 'r', r, 'f', f, 't', t, 'ts', ts)::text FROM agg_048 WHERE id BETWEEN $from AND $to ORDER BY id";
	kcat_produce($topic, psql($sql) . "\n");
}

my %job = map { $_ => "aggs_048_$_" } @BACKENDS;
for my $b (@BACKENDS)
{
	my $j = $job{$b};
	psql("DROP TABLE IF EXISTS $j");
	psql("CREATE TABLE $j AS $expected WITH NO DATA");
	psql("ALTER TABLE $j ADD PRIMARY KEY (k)");
	my $spec = qq({
	  "source": {"type": "kafka", "brokers": "$MailerTest::BROKERS", "topic": "$topic"},
	  "steps": [{"key_by": {"k": "value->>'k'"}}, {"aggregate": {$aggregate_json}}],
	  "sink": {"type": "table", "table": "$j"},
	  "state": {"backend": "$b"}
	});

	# The plan's result types are PostgreSQL's: those of the columns made by CREATE TABLE AS.
	my $plan = psql("SELECT mailer.describe_job(\$\$$spec\$\$)");
	my %plan_type = $plan =~ /^\s*aggregate (\w+) (.+?) := /mg;
	my %pg_type = split /[|\n]/, psql("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
		  . "WHERE attrelid = '$j'::regclass AND attnum > 0 AND attname <> 'k'");
	is(scalar(keys %plan_type), scalar(@aggs), "$b: describe_job lists the " . scalar(@aggs) . " aggregates");
	is_deeply(\%plan_type, \%pg_type, "$b: describe_job gives every aggregate PostgreSQL's result type");
	psql("SELECT mailer.create_job('$j', \$\$$spec\$\$)");
}

sub check
{
	my ($what, $upto) = @_;
	my $exp = $expected =~ s/WHERE k IS NOT NULL/WHERE k IS NOT NULL AND id <= $upto/r;
	for my $b (@BACKENDS)
	{
		my $j = $job{$b};
		is(psql("SELECT mailer.wait_job('$j', '5 minutes')"), 'running', "$what: $b caught up");
		my $r = psql("WITH e AS ($exp) SELECT count(*) FILTER (WHERE e::text IS DISTINCT FROM s::text), "
			  . "count(e.k), count(s.k) FROM e FULL JOIN $j s USING (k)");
		my ($bad, $want, $got) = split /\|/, $r;
		is("$bad rows differ, $got rows", "0 rows differ, 23 rows", "$what: $b equals PostgreSQL's aggregates, value for value");
		if ($bad)
		{
			diag(psql("WITH e AS ($exp) SELECT e::text || E'\\n' || s::text FROM e FULL JOIN $j s USING (k) "
				  . "WHERE e::text IS DISTINCT FROM s::text LIMIT 3"));
		}
		is(psql("SELECT count(*), min(stage), max(stage) FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) "
				  . "WHERE j.name = '$j'"), int($upto / 250) . "|key_by|key_by",
			"$what: $b dead-lettered the records whose key is NULL, at stage key_by");
	}
}

produce(1, $N / 2);
check('first half', $N / 2);
for my $b (@BACKENDS)
{
	psql("SELECT mailer.stop_job('$job{$b}')");
	psql("SELECT mailer.start_job('$job{$b}')");
}
produce($N / 2 + 1, $N);
check('after a restart, second half', $N);
is(psql("SELECT cnt_i || ',' || (sum_i IS NULL)::int || ',' || (avg_f IS NULL)::int || ',' || (min_t IS NULL)::int "
		  . "FROM $job{rocksdb} WHERE k = 'k9'"), psql("SELECT count(*) FILTER (WHERE k = 'k9') || ',1,1,1' FROM agg_048")
	  =~ s/^\d+/0/r, 'a key with only NULL values: count(e) 0, sum, avg and min NULL');

psql("SELECT mailer.drop_job('$job{$_}')") for @BACKENDS;
kafka('delete-topic', $topic);
done_testing();
