# The pipeline runs a batch in chunks of 64 messages, in two passes: the
# stateless steps, arguments and group keys of the whole chunk first, then
# the additions to the keyed state, with each record's cache slot and entry
# fetched ahead (runtime/pipeline.c, keyed_prefetch).  Edge input for it,
# each compared with SQL's GROUP BY over the records that must count:
#   - many keys in a chunk, and one key repeated many times in a chunk;
#   - records for windows that the watermark has passed, within the allowed
#     lateness (complete at once: fired mid-batch) and past it (late),
#     mixed with on-time records of the same keys in the same chunk;
#   - records that fail in the first pass (invalid JSON, a NULL key) and in
#     the second (a sum that overflows), between good ones: dead letters
#     with their own offset and stage, and nothing of them in the state;
#   - a flat_map of several outputs per record (a materialized set
#     function), one output overflowing: the record's other outputs undone;
#   - running totals (no window) over the same records;
#   - a kill -9 mid-stream: the same answer again.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
my $topic = unique_name('t151');
kafka('create-topic', $topic, 1);

psql("DROP TABLE IF EXISTS src_151, win_151, tot_151, flat_151");
psql("CREATE TABLE src_151 (id serial, part int, k text, ts timestamptz, a bigint, line text, counts bool)");
psql("CREATE TABLE win_151 (k text, window_start timestamptz, window_end timestamptz, n bigint, total numeric, m interval, "
	  . "PRIMARY KEY (k, window_start))");
psql("CREATE TABLE tot_151 (k text PRIMARY KEY, n bigint, total bigint, m interval)");
psql("CREATE TABLE flat_151 (k text PRIMARY KEY, n bigint, total bigint, m interval)");

my $seq = 0;
my @parts;

# One record: key, seconds of event time, amount; counts: whether SQL's
# answer holds it; line: the message as produced (the JSON built here,
# unless given).
sub rec
{
	my ($part, $k, $t, $a, %o) = @_;
	my $line = $o{line} // sprintf('%s	{"k": "%s", "ts": "%s", "a": %s, "items": [{"k": "%s-x", "a": 1}, {"k": "%s", "a": %s}]}',
		$k, $k, ev_time($t), $a, $k, $k, $a);
	push @{ $parts[$part] }, { k => $k, t => $t, a => $a, line => $line, counts => $o{counts} // 1 };
}

# Part 0: 3000 records over 400 keys, event time 0 to 60 s in 10 s windows;
# every third record is key hot (a key repeated within every chunk);
# invalid JSON and a NULL key every 97 and 131 records.
for my $i (0 .. 2999)
{
	my $t = $i * 0.02;
	if ($i % 97 == 50)
	{
		rec(0, "bad$i", $t, 1, line => "bad$i\t{\"k\": \"bad$i\", \"ts\": ", counts => 0);
		next;
	}
	if ($i % 131 == 70)
	{
		rec(0, "nul$i", $t, 1, counts => 0,
			line => sprintf("nul%d\t{\"k\": null, \"ts\": \"%s\", \"a\": 1, \"items\": [{\"k\": null, \"a\": 1}]}", $i, ev_time($t)));
		next;
	}
	rec(0, $i % 3 == 0 ? 'hot' : 'k' . ($i * 7919 % 400), $t, $i % 50 + 1);
}
# Key ovf: 2e9 months; its next addition overflows an interval's months.
rec(0, 'ovf', 55, 2000000000);

# Part 1, after the watermark has passed 50 s (60 s minus 5 s of disorder):
# within the lateness of 30 s, the windows of 0 and 10 s are late (past
# purge), those of 20 to 40 s fired and take records at once, those of 50
# s and later are open.  Mixed record by record, same keys as part 0.
for my $i (0 .. 599)
{
	my $k = $i % 2 == 0 ? 'hot' : 'k' . ($i * 13 % 400);
	my $t = (5, 15, 25, 35, 45, 52, 58, 61)[ $i % 8 ] + ($i % 10) * 0.1;
	# Past allowed lateness: the window ended 30 s or more before the watermark.
	my $late = $t < 20;
	rec(1, $k, $t, $i % 7 + 1, counts => $late ? 0 : 1);
	# The overflow, mid-chunk, at the second pass.
	rec(1, 'ovf', 56, 200000000, counts => 0) if $i == 300;
}

sub produce
{
	my ($part) = @_;
	kcat_produce($topic, [ map { $_->{line} } @{ $parts[$part] } ]);
	my @rows = map { sprintf("(%d, '%s', '%s', %s, %s)", $part, $_->{k}, ev_time($_->{t}), $_->{a}, $_->{counts} ? 'true' : 'false') }
	  @{ $parts[$part] };
	psql("INSERT INTO src_151 (part, k, ts, a, counts) VALUES " . join(",\n", @rows));
}

my $wm = '"watermark": {"max_out_of_orderness": "5 seconds"}, "event_time": "(value->>\'ts\')::timestamptz"';
my $src = qq("source": {"type": "kafka", "brokers": "$MailerTest::BROKERS", "topic": "$topic", "start": "earliest"});
psql("SELECT mailer.create_job('win_151', \$\${$src, $wm,
  \"steps\": [{\"key_by\": {\"k\": \"value->>'k'\"}},
			{\"window\": {\"type\": \"tumbling\", \"size\": \"10 seconds\", \"allowed_lateness\": \"30 seconds\", \"emit\": \"update\"}},
			{\"aggregate\": {\"n\": \"count(*)\", \"total\": \"sum((value->>'a')::bigint)\",
						   \"m\": \"sum(make_interval(months => (value->>'a')::int))\"}}],
  \"sink\": {\"type\": \"table\", \"table\": \"win_151\"},
  \"checkpoint\": {\"interval\": \"200 milliseconds\"}}\$\$)");
psql("SELECT mailer.create_job('tot_151', \$\${$src,
  \"steps\": [{\"key_by\": {\"k\": \"value->>'k'\"}},
			{\"aggregate\": {\"n\": \"count(*)\", \"total\": \"sum((value->>'a')::bigint)\",
						   \"m\": \"sum(make_interval(months => (value->>'a')::int))\"}}],
  \"sink\": {\"type\": \"table\", \"table\": \"tot_151\"},
  \"checkpoint\": {\"interval\": \"200 milliseconds\"}}\$\$)");
psql("SELECT mailer.create_job('flat_151', \$\${$src,
  \"steps\": [{\"flat_map\": \"jsonb_array_elements(value->'items')\"},
			{\"key_by\": {\"k\": \"value->>'k'\"}},
			{\"aggregate\": {\"n\": \"count(*)\", \"total\": \"sum((value->>'a')::bigint)\",
						   \"m\": \"sum(make_interval(months => (value->>'a')::int))\"}}],
  \"sink\": {\"type\": \"table\", \"table\": \"flat_151\"},
  \"checkpoint\": {\"interval\": \"200 milliseconds\"}}\$\$)");
my @jobs = qw(win_151 tot_151 flat_151);

# What each job must hold: the windowed job counts what is in time; the
# others every good record (late is a window's notion), but the overflow.
sub check
{
	my ($what, $through) = @_;
	is(wait_job($_), 'running', "$what: $_ caught up") for @jobs;
	my $months = 'sum(make_interval(months => a::int))';
	my $good = "FROM src_151 WHERE part <= $through AND k NOT LIKE 'bad%' AND k NOT LIKE 'nul%' "
	  . "AND NOT (k = 'ovf' AND a = 200000000)";
	same_rows('SELECT k, window_start, window_end, n, total, m FROM win_151',
		"SELECT k, date_bin('10 seconds', ts, '1970-01-01 00:00:00+00'), "
		  . "date_bin('10 seconds', ts, '1970-01-01 00:00:00+00') + interval '10 seconds', count(*), sum(a), $months "
		  . "FROM src_151 WHERE part <= $through AND counts GROUP BY 1, 2, 3",
		"$what: tumbling windows equal GROUP BY (lateness, fired windows, repeated keys)");
	same_rows('SELECT k, n, total, m FROM tot_151', "SELECT k, count(*), sum(a), $months $good GROUP BY k",
		"$what: running totals equal GROUP BY");
	same_rows('SELECT k, n, total, m FROM flat_151',
		"SELECT k, sum(n)::bigint, sum(s)::bigint, sum(m) FROM (SELECT k || '-x' AS k, count(*) AS n, count(*) AS s, "
		  . "make_interval(months => count(*)::int) AS m $good GROUP BY 1 "
		  . "UNION ALL SELECT k, count(*), sum(a), $months $good GROUP BY 1) u GROUP BY k",
		"$what: a flat_map's outputs equal GROUP BY, a failing record's other output undone");
}

produce(0);
check('part 0', 0);
wait_watermark('win_151', ev_time(50));
produce(1);
check('part 1', 1);

# Dead letters: each bad record once, at its own offset and stage, in every job.
my $nbad = grep { $_->{k} =~ /^bad/ } @{ $parts[0] };
my $nnul = grep { $_->{k} =~ /^nul/ } @{ $parts[0] };
for my $j (@jobs)
{
	my @dl = @{ dead_letters($j) };
	my %by = map { $_->{key} => $_->{stage} } @dl;
	my @bad = grep { /^bad/ } keys %by;
	my @nul = grep { /^nul/ } keys %by;
	is(scalar(@bad) . ' at ' . join(',', sort keys %{ { map { $by{$_} => 1 } @bad } }), "$nbad at decode",
		"$j: every invalid JSON record dead-lettered at decode");
	is(scalar(@nul) . ' at ' . join(',', sort keys %{ { map { $by{$_} => 1 } @nul } }), "$nnul at key_by",
		"$j: every NULL key dead-lettered at key_by");
	is($by{ovf}, 'aggregate', "$j: the overflow dead-lettered at aggregate");
	my @offsets = map { $_->{offset} } grep { $_->{stage} ne 'late' } @dl;
	is(scalar(@offsets), $nbad + $nnul + 1, "$j: one dead letter per failed record");
	accounting_ok($j);
}
my $late = psql("SELECT count(*) FROM src_151 WHERE part = 1 AND NOT counts AND k <> 'ovf'");
is(job_metric('win_151', 'records_late'), $late, 'win_151: the records past lateness counted late');

# A kill -9 mid-stream, with the same input again: the same answers.
my $pid = worker_pid('win_151');
my $pid2 = worker_pid('tot_151');
for my $i (0 .. 1999)
{
	rec(2, 'k' . ($i % 300), 61 + $i * 0.001, 3);
}
produce(2);
is(kill('KILL', $pid), 1, 'SIGKILL sent to the worker of win_151');
wait_until('the server restarted after the kill',
	sub { my $p = eval { worker_pid('win_151') } // 0; $p > 0 && $p != $pid }, 120);
check('part 2, after a kill', 2);

done_testing();
