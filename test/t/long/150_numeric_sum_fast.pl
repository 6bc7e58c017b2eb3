# sum and avg over numeric keep a scaled int128 while the values fit
# (operators/numeric_sum.c) and fall back to numeric_add on what does not:
# NaN, Infinity, an overflow of int128, a scale over 32, a rescale that
# overflows.  Each key below holds one such edge; the job's rows must equal
# PostgreSQL's sum() and avg() over the same values, text for text and in
# their stored size (the same numeric bytes), for both backends, after a
# restart (the state read back) and after a kill -9 of the worker (the
# state restored from the checkpoint, the rest read again).  Then the same
# for a sliding window job (panes) and a session job whose windows mix
# scaled sums and numeric datums.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
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

# Windows: a sliding window's panes are merged into each window, and
# sessions merge, with some sums scaled and some numeric datums.  Per key,
# (first second, step, values in turn, value at given seconds).  'nan' turns
# NaN at 40 s: only the windows that hold it are NaN, the later ones are
# scaled again.  'big' holds 1e40 and then -1e40 (a window holding both
# comes back to int128), later a sum one past 2^127 - 1 and back.  'wide'
# has one value of scale 33.  'edge' holds 39-digit values that fit at
# scales 21 and 30, and their sums past int128.  No event in 60..74 s: each
# key's sessions split there.
my %series = (
	small => [ 0, 2, [ '12.34', '0.01', '-5', '0.0001', '7.5', '-12.35', '0.000' ], {} ],
	nan   => [ 1, 3, [ '1.5', '0.25', '-3' ], { 40 => 'NaN' } ],
	big   => [ 2, 4, [ '0.5' ], { 22 => '1e40', 46 => '-1e40', 90 => '170141183460469231731687303715884105727',
							  94 => '1', 98 => '-2' } ],
	wide  => [ 3, 6, [ '2.25' ], { 33 => '0.000000000000000000000000000000001' } ],
	edge  => [ 5, 8, [ '100000000.000000000000000000000000000001', '170141183460469231.731687303715884105727',
					   '0.000000000000000000001', '-1', '-0.00', '0.00000001', '-100000000' ], {} ],
	zero  => [ 0, 5, [ '1.50', '-1.5', '0.000', '-0.00' ], {} ],
);
my $wtopic = unique_name('t150w');
kafka('create-topic', $wtopic, 1);
psql("DROP TABLE IF EXISTS ev_150");
psql("CREATE TABLE ev_150 (k text, ts timestamptz, a numeric)");
for my $k (sort keys %series)
{
	my ($t, $step, $cycle, $at) = @{ $series{$k} };
	my @rows;
	for (my $i = 0; $t < 120; $t += $step, $i++)
	{
		next if $t >= 60 && $t < 75;
		push @rows, sprintf("('%s', '2030-01-01 00:00:00+00'::timestamptz + interval '%d s', '%s')",
			$k, $t, $at->{$t} // $cycle->[ $i % @$cycle ]);
	}
	psql("INSERT INTO ev_150 VALUES " . join(', ', @rows));
}

sub produce_window
{
	my ($where) = @_;
	kcat_produce($wtopic, psql("SELECT k || E'\\t' || json_build_object('k', k, 'ts', ts, 'a', a::text)::text "
			  . "FROM ev_150 WHERE $where ORDER BY ts, k") . "\n");
}

my %wjob = (
	slide_150   => [ '"type": "sliding", "size": "30 seconds", "slide": "10 seconds"', 'rocksdb' ],
	session_150 => [ '"type": "session", "gap": "10 seconds"', 'memory' ],
);
# A tiny cache: entries are let go after each checkpoint and read back.
psql("ALTER SYSTEM SET mailer.state_cache_entries = 1");
psql("SELECT pg_reload_conf()");
for my $j (sort keys %wjob)
{
	my ($window, $backend) = @{ $wjob{$j} };
	psql("DROP TABLE IF EXISTS $j");
	psql("CREATE TABLE $j (k text, window_start timestamptz, window_end timestamptz, n bigint, s numeric, av numeric, "
		  . "PRIMARY KEY (k, window_start))");
	psql("SELECT mailer.create_job('$j', \$spec\$" . qq({
	  "source": {"type": "kafka", "brokers": "$MailerTest::BROKERS", "topic": "$wtopic", "start": "earliest"},
	  "event_time": "(value->>'ts')::timestamptz",
	  "watermark": {"max_out_of_orderness": "1 second"},
	  "steps": [{"key_by": {"k": "value->>'k'"}}, {"window": {$window}},
				{"aggregate": {"n": "count(*)", "s": "sum((value->>'a')::numeric)", "av": "avg((value->>'a')::numeric)"}}],
	  "sink": {"type": "table", "table": "$j"},
	  "checkpoint": {"interval": "200 milliseconds"},
	  "state": {"backend": "$backend"}
	}) . "\$spec\$)");
}

# SQL's windows over the same records: each record in the three sliding
# windows that hold it, and sessions split where a key's gap is 10 s or more.
psql("DROP TABLE IF EXISTS want_slide_150, want_session_150");
psql("CREATE TABLE want_slide_150 AS SELECT k, w AS window_start, w + interval '30 s' AS window_end, "
	  . "count(*) AS n, sum(a) AS s, avg(a) AS av FROM ev_150, "
	  . "LATERAL (SELECT date_bin('10 s', ts, '2030-01-01 00:00:00+00') - o * interval '10 s' AS w "
	  . "FROM generate_series(0, 2) o) ws GROUP BY k, w");
psql("CREATE TABLE want_session_150 AS WITH marked AS (SELECT k, ts, a, CASE WHEN ts - lag(ts) OVER (PARTITION BY k ORDER BY ts) "
	  . "< interval '10 s' THEN 0 ELSE 1 END AS starts FROM ev_150), "
	  . "numbered AS (SELECT *, sum(starts) OVER (PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING) AS session FROM marked) "
	  . "SELECT k, min(ts) AS window_start, max(ts) + interval '10 s' AS window_end, count(*) AS n, sum(a) AS s, avg(a) AS av "
	  . "FROM numbered GROUP BY k, session");

# A row as text with its sum's and avg's display scale and their bytes as
# numeric_send gives them (weight, sign, scale, digits, so a trailing zero
# digit shows) and their stored size (the short or long header).  This
# cannot tell whether the scaled sums were taken at all: there is no cheap
# observable of it, the bytes are meant to be numeric_add's.  What it holds
# to those bytes are the sums only the rebuild makes when they are scaled
# (numeric_sum_bytes): 0.000 and 0.00 (no digit, weight 0, positive), sums
# below 1 (negative weights), 39 digits at scales 21 and 30, a NaN or
# past-int128 window next to scaled ones.
my $cols = "k, window_start, window_end, n, s::text AS s, av::text AS av, scale(s) AS ss, scale(av) AS sa, "
  . "numeric_send(s) AS bs, numeric_send(av) AS ba, pg_column_size(s) AS zs, pg_column_size(av) AS za";

sub check_windows
{
	my ($what, $all) = @_;
	for my $j (sort keys %wjob)
	{
		is(wait_job($j, 60), 'running', "$what: $j caught up");
		my $got = "SELECT $cols FROM $j WHERE k <> 'flush'";
		my $want = "SELECT $cols FROM want_$j";
		my $extra = psql("SELECT count(*) FROM ($got EXCEPT ALL $want) d");
		my $missing = $all ? psql("SELECT count(*) FROM ($want EXCEPT ALL $got) d") : 0;
		is("$extra differ, $missing missing", '0 differ, 0 missing',
			"$what: $j rows equal SQL's sum() and avg() over the window, text, scale and bytes");
		diag(psql("SELECT d::text FROM ($got EXCEPT ALL $want) d LIMIT 5")) if $extra ne '0';
		ok(psql("SELECT count(*) FROM $j WHERE s IS NOT NULL AND s::text <> 'NaN' AND k <> 'flush'") > 0
			&& psql("SELECT count(*) FROM $j WHERE s::text = 'NaN' OR abs(s) > 1e38") > 0,
			"$what: $j has rows of both forms") if $all;
	}
}

produce_window("ts < '2030-01-01 00:01:00+00'");
check_windows('windows, first part', 0);
# The rest, and a kill -9 mid-stream: panes and sessions from the last
# checkpoint, the rest read again.
produce_window("ts >= '2030-01-01 00:01:00+00'");
$pid = worker_pid('slide_150');
is(kill('KILL', $pid), 1, 'SIGKILL sent to the worker of the sliding window job');
wait_until('the server restarted after the kill',
	sub { my $p = eval { worker_pid('slide_150') } // 0; $p > 0 && $p != $pid }, 120);
# A record far later closes every window.
kcat_produce($wtopic, "flush\t" . '{"k": "flush", "ts": "2030-01-01T01:00:00Z", "a": "0"}' . "\n");
check_windows('windows, after a kill', 1);

psql("ALTER SYSTEM RESET mailer.state_cache_entries");
psql("SELECT pg_reload_conf()");
psql("SELECT mailer.drop_job('$_')") for sort keys %wjob;
psql("DROP TABLE ev_150, want_slide_150, want_session_150, slide_150, session_150");
kafka('delete-topic', $wtopic);
done_testing();
