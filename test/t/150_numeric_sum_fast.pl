# sum and avg over numeric keep a scaled int128 while the values fit
# (operators/numeric_sum.c) and fall back to numeric_add on what does not:
# NaN, Infinity, an overflow of int128, a scale over 32, a rescale that
# overflows.  Each key below holds one such edge; the job's rows must equal
# PostgreSQL's sum() and avg() over the same values, text for text and in
# their stored size (the same numeric bytes), for both backends, after a
# restart (the state read back) and after a kill -9 of the worker (the
# state restored from the checkpoint, the rest read again).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

my @BACKENDS = qw(rocksdb memory);

fresh_extension();
my $topic = unique_name('t150');
kafka('create-topic', $topic, 1);

# Per key, its values in order; each part is produced, then checked.
my %values = (
	int64   => [ '9223372036854775807', '9223372036854775807', '-9223372036854775808', '1' ],
	int128  => [ '99999999999999999999999999999999999999', '99999999999999999999999999999999999999', '-5', '0.5' ],
	near    => [ '170141183460469231731687303715884105727', '-1', '1', '1' ],
	scales  => [ '1', '1.5', '1.25000', '-0.001', '0.000', '7' ],
	digits  => [ '123456789012345678901234567890.123456789', '0.00000000000000000000000000000000001', '2', '-3.5' ],
	rescale => [ '100000000000000000000', '0.00000000000000000000000000000001', '1', '-100000000000000000000' ],
	deep    => [ '0.00000000000000000000000000000001', '0.00000000000000000000000000000009', '-0.0000000000000000000000000000001' ],
	zero    => [ '-1.50', '1.5', '0', '-0.00' ],
	neg     => [ '-12345678901234567.89', '-0.11', '-98765432109876543.2', '-1e-5' ],
	nan     => [ '1', 'NaN', '2.5' ],
	inf     => [ 'Infinity', '1.25', 'Infinity' ],
	ninf    => [ '1', '-Infinity', 'Infinity', '3' ],
	big     => [ '1e100', '2.5', '-1e100' ],
	small   => [ '12.34', '0.01', '99.99', '5' ],
);
my $parts = 4;

psql("DROP TABLE IF EXISTS src_150");
psql("CREATE TABLE src_150 (id serial, part int, k text, n numeric)");
for my $k (sort keys %values)
{
	my @v = @{ $values{$k} };
	for my $i (0 .. $#v)
	{
		my $part = $i % $parts;
		psql("INSERT INTO src_150 (part, k, n) VALUES ($part, '$k', '$v[$i]')");
	}
}

sub produce
{
	my ($part) = @_;
	# The numbers as JSON strings: text casts take NaN and Infinity, and no digit is lost on the way.
	kcat_produce($topic, psql("SELECT k || E'\\t' || json_build_object('k', k, 'n', n::text)::text "
			  . "FROM src_150 WHERE part = $part ORDER BY id") . "\n");
}

my %job = map { $_ => "sums_150_$_" } @BACKENDS;
for my $b (@BACKENDS)
{
	my $j = $job{$b};
	psql("DROP TABLE IF EXISTS $j");
	psql("CREATE TABLE $j (k text PRIMARY KEY, cnt bigint, s numeric, a numeric)");
	psql("SELECT mailer.create_job('$j', \$\$" . qq({
	  "source": {"type": "kafka", "brokers": "$MailerTest::BROKERS", "topic": "$topic"},
	  "steps": [{"key_by": {"k": "value->>'k'"}},
				{"aggregate": {"cnt": "count(*)", "s": "sum((value->>'n')::numeric)", "a": "avg((value->>'n')::numeric)"}}],
	  "sink": {"type": "table", "table": "$j"},
	  "state": {"backend": "$b"}
	}) . "\$\$)");
}

sub check
{
	my ($what, $part) = @_;
	psql("DROP TABLE IF EXISTS want_150");
	psql("CREATE TABLE want_150 AS SELECT k, count(*) AS cnt, sum(n) AS s, avg(n) AS a "
		  . "FROM src_150 WHERE part <= $part GROUP BY k");
	for my $b (@BACKENDS)
	{
		my $j = $job{$b};
		is(wait_job($j, 60), 'running', "$what: $b caught up");
		my $cmp = "FROM want_150 w FULL JOIN $j g USING (k) WHERE w::text IS DISTINCT FROM g::text "
		  . "OR pg_column_size(w.s) IS DISTINCT FROM pg_column_size(g.s) "
		  . "OR pg_column_size(w.a) IS DISTINCT FROM pg_column_size(g.a)";
		is(psql("SELECT count(*) $cmp") . ' differ of ' . psql("SELECT count(*) FROM $j"),
			'0 differ of ' . psql("SELECT count(*) FROM want_150"),
			"$what: $b equals sum() and avg() over numeric, value, scale and bytes");
		diag(psql("SELECT w::text || ' want, got ' || g::text $cmp LIMIT 5")) if psql("SELECT count(*) $cmp") ne '0';
	}
}

produce(0);
check('part 1', 0);
produce(1);
check('part 2', 1);

# A restart: the running sums are read back from the backend's bytes.
for my $b (@BACKENDS)
{
	psql("SELECT mailer.stop_job('$job{$b}')");
	psql("SELECT mailer.start_job('$job{$b}')");
}
produce(2);
check('part 3, after a restart', 2);

# A kill -9 mid-stream: state from the last checkpoint, the rest read again.
my $pid = worker_pid($job{rocksdb});
produce(3);
is(kill('KILL', $pid), 1, 'SIGKILL sent to the worker of the rocksdb job');
wait_until('the server restarted after the kill',
	sub { my $p = eval { worker_pid($job{rocksdb}) } // 0; $p > 0 && $p != $pid }, 120);
check('part 4, after a kill', 3);

psql("SELECT mailer.drop_job('$job{$_}')") for @BACKENDS;
psql("DROP TABLE want_150, src_150");
kafka('delete-topic', $topic);
done_testing();
