# Poison input on a real broker: every kind of bad record becomes a dead
# letter that says where it came from and why, its neighbours are processed
# as if it were not there, the job keeps running, and every record read is
# accounted for in mailer.metrics.  The same input with on_error "skip"
# counts the bad records instead; with "fail" the first one stops the job
# in state failed, naming its position.  Event-time errors and late records
# are dead letters of their own stages.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables("t060");

# ---------------------------------------------------------------------------
# The input: good orders with bad records among them, on 3 partitions.
# ---------------------------------------------------------------------------

my $topic = unique_name('t060');
# The broker's limit on a record batch, set explicitly: the big message
# below is just under it.
my $max_message_bytes = 1048588;
kafka('create-topic', $topic, 3, '--config', "max.message.bytes=$max_message_bytes");

my @good;    # [key, json] in production order
for my $i (0 .. 89)
{
	my $c = 'c' . ($i % 5);
	my $amount = sprintf('%.2f', (($i * 37) % 100) / 4 + 0.5);
	my $json = qq({"customer_id": "$c", "amount": $amount);
	$json .= ', "qty": ' . ($i % 3 + 1) if $i % 4;    # some have no qty: it defaults to 1
	$json .= ', "skip": true' if $i % 10 == 9;       # filtered out
	$json .= '}';
	push @good, [ "g$i", $json ];
}

# key => [value bytes (undef: a tombstone), stage, error pattern]
my %poison = (
	'p-invalid-json' => [ '{"customer_id": "c1", "amount": ', 'decode',
		qr/invalid input syntax for type json/ ],
	'p-not-utf8' => [ "{\"customer_id\": \"c4\xff\xfe\", \"amount\": 1}", 'decode',
		qr/invalid byte sequence for encoding "UTF8"/ ],
	'p-tombstone' => [ undef, 'decode', qr/tombstone/ ],
	'p-nul-escape' => [ '{"customer_id": "c2", "amount": 1, "note": "\u0000"}', 'decode',
		qr/unsupported Unicode escape sequence/ ],
	'p-bad-filter' => [ '{"customer_id": "c1", "amount": 1, "skip": "maybe"}', 'filter',
		qr/invalid input syntax for type boolean: "maybe"/ ],
	'p-bad-cast' => [ '{"customer_id": "c1", "amount": "12,50", "qty": 1}', 'map',
		qr/invalid input syntax for type numeric: "12,50"/ ],
	'p-nested' => [ '{"customer_id": "c3", "amount": {"value": 5}, "qty": 1}', 'map',
		qr/invalid input syntax for type numeric: "\{"value": 5\}"/ ],
	'p-array' => [ '[1, 2, 3]', 'key_by', qr/key field "customer_id" is NULL/ ],
	'p-string' => [ '"just a string"', 'key_by', qr/key field "customer_id" is NULL/ ],
	'p-null' => [ 'null', 'key_by', qr/key field "customer_id" is NULL/ ],
	'p-no-key' => [ '{"amount": 5, "qty": 1}', 'key_by', qr/key field "customer_id" is NULL/ ],
	'p-div-zero' => [ '{"customer_id": "c2", "amount": 10, "qty": 0}', 'aggregate',
		qr/division by zero/ ],
);
my @poison_keys = sort keys %poison;

# Bad records sit between good ones, in the same partitions and batches.
my $data = '';
my $g = 0;
for my $k (@poison_keys)
{
	$data .= "$_->[0]\t$_->[1]\n" for @good[ $g .. $g + 6 ];
	$g += 7;
	$data .= "$k\t" . ($poison{$k}[0] // '') . "\n";
}
$data .= "$_->[0]\t$_->[1]\n" for @good[ $g .. $#good ];
kcat_produce_raw($topic, $data, null_empty => 1);

# A message near the broker's size limit: processed like any other.
my $pad = 'x' x ($max_message_bytes - 700);
my $big = qq({"customer_id": "big", "amount": 1.25, "qty": 1, "pad": "$pad"});
kcat_produce_raw($topic, "big\t$big\n", args => [ '-X', "message.max.bytes=$max_message_bytes" ]);
my $nmessages = @good + @poison_keys + 1;
my $at = topic_offsets_by_key($topic);
is(scalar(keys %$at), $nmessages, "the broker holds the $nmessages messages, the big one included");

# What the job must write: the good records, as SQL computes it.
psql("CREATE TABLE t060_input (v jsonb)");
psql("INSERT INTO t060_input VALUES " . join(', ', map { "('$_->[1]')" } @good) . ", (\$big\$$big\$big\$)");
my $expected_sql = "SELECT v->>'customer_id' AS customer_id, count(*) AS orders,
       sum((v->>'amount')::numeric) AS total, sum(coalesce((v->>'qty')::int, 1)) AS units,
       avg((v->>'amount')::numeric / coalesce((v->>'qty')::int, 1)) AS avg_unit_price
  FROM t060_input WHERE NOT coalesce((v->>'skip')::boolean, false) GROUP BY 1";
my $filtered = grep { $_->[1] =~ /"skip": true/ } @good;

# ---------------------------------------------------------------------------
# on_error dead_letter (the default)
# ---------------------------------------------------------------------------

sub spec
{
	my ($sink, $on_error) = @_;
	my $policy = $on_error ? qq(, "on_error": "$on_error") : '';
	return qq({
  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
  "steps": [
    {"filter": "NOT coalesce((value->>'skip')::boolean, false)"},
    {"map": {"amount": "(value->>'amount')::numeric", "qty": "coalesce((value->>'qty')::int, 1)"}},
    {"key_by": {"customer_id": "value->>'customer_id'"}},
    {"aggregate": {"orders": "count(*)", "total": "sum(amount)", "units": "sum(qty)",
                   "avg_unit_price": "avg(amount / qty)"}}
  ],
  "sink": {"type": "table", "table": "$sink"},
  "checkpoint": {"interval": "200 milliseconds"}$policy
});
}

for my $t (qw(t060_totals t060_totals_skip))
{
	psql("CREATE TABLE $t (customer_id text PRIMARY KEY, orders bigint, total numeric,
	      units bigint, avg_unit_price numeric)");
}

sub output_matches
{
	my ($table, $name) = @_;
	my $diff = psql("SELECT count(*) FROM (($expected_sql EXCEPT SELECT * FROM $table)
	                 UNION ALL (SELECT * FROM $table EXCEPT $expected_sql)) d");
	is($diff, '0', $name)
	  or diag("expected:\n" . psql("$expected_sql ORDER BY 1") . "\ngot:\n"
		  . psql("SELECT * FROM $table ORDER BY 1"));
}

psql("SELECT mailer.create_job('j060_dlq', \$spec\$" . spec('t060_totals') . "\$spec\$)");
is(wait_job('j060_dlq'), 'running', 'the job fed garbage commits all its input and keeps running');
my $info = job_info('j060_dlq');
is($info->{state}, 'running', 'state is running');
is($info->{restarts}, 0, 'the worker never restarted');
output_matches('t060_totals', 'the output is exactly that of the good records (the big one included)');
is(psql("SELECT orders FROM t060_totals WHERE customer_id = 'big'"), '1',
	'the message near the broker size limit was processed');

my $m = accounting_ok('j060_dlq');
is($m->{records_in}, $nmessages, 'records_in counts every message read');
is($m->{records_dead_lettered}, scalar(@poison_keys), 'records_dead_lettered counts the bad records');
is($m->{records_filtered}, $filtered, 'records_filtered counts the filtered ones');
is($m->{records_accepted}, @good + 1 - $filtered, 'records_accepted counts the good ones');
is($m->{records_skipped} + $m->{records_late}, 0, 'none skipped, none late');

my %dl;
for my $d (@{ dead_letters('j060_dlq') })
{
	push @{ $dl{ $d->{key} } }, $d;
}
is_deeply([ sort keys %dl ], \@poison_keys, 'a dead letter for each bad record, for nothing else');
for my $k (@poison_keys)
{
	my ($value, $stage, $error) = @{ $poison{$k} };
	my $rows = $dl{$k} // [];
	is(scalar(@$rows), 1, "$k: exactly one dead letter") or next;
	my $d = $rows->[0];
	is($d->{stage}, $stage, "$k: stage $stage");
	like($d->{error}, $error, "$k: PostgreSQL's error message");
	is_deeply([ $d->{topic}, $d->{partition}, $d->{offset} ], [ $topic, @{ $at->{$k} } ],
		"$k: its topic, partition and offset");
	is($d->{key_hex}, unpack('H*', $k), "$k: its raw key");
	is($d->{value_hex}, defined $value ? unpack('H*', $value) : undef,
		"$k: its raw value, byte for byte" . (defined $value ? '' : ' (NULL for a tombstone)'));
	ok($d->{epoch} > 0, "$k: written with checkpoint epoch $d->{epoch}");
}

# A user's view: SELECT * FROM mailer.dead_letters explains each rejected record.
is(psql("SELECT count(*) FROM mailer.dead_letters WHERE stage IS NULL OR error IS NULL OR error = ''"),
	'0', 'every dead letter has a stage and an error');

# More garbage later: still dead letters, still running, still exact.
my $more = "p-late-json\t{oops\n" . "g-more\t{\"customer_id\": \"c0\", \"amount\": 2}\n";
kcat_produce_raw($topic, $more, partition => 0);
psql(qq(INSERT INTO t060_input VALUES ('{"customer_id": "c0", "amount": 2}')));
wait_job('j060_dlq');
output_matches('t060_totals', 'later input: the output is still exactly that of the good records');
is(psql("SELECT stage FROM mailer.dead_letters WHERE key = 'p-late-json'"), 'decode',
	'a bad record arriving later is a dead letter too');
accounting_ok('j060_dlq', 'after more input');
is(job_info('j060_dlq')->{state}, 'running', 'and the job keeps running');

# ---------------------------------------------------------------------------
# on_error skip: the same input, the bad records only counted
# ---------------------------------------------------------------------------

psql("SELECT mailer.create_job('j060_skip', \$spec\$" . spec('t060_totals_skip', 'skip') . "\$spec\$)");
is(wait_job('j060_skip'), 'running', 'skip: the job commits all its input and keeps running');
output_matches('t060_totals_skip', 'skip: the output is exactly that of the good records');
$m = accounting_ok('j060_skip', 'skip');
is($m->{records_skipped}, scalar(@poison_keys) + 1, 'skip: records_skipped counts the bad records');
is($m->{records_dead_lettered}, 0, 'skip: nothing dead-lettered');
is(scalar(@{ dead_letters('j060_skip') }), 0, 'skip: no dead letter written');

# ---------------------------------------------------------------------------
# on_error fail: the first bad record stops the job, naming its position
# ---------------------------------------------------------------------------

my $ftopic = unique_name('t060f');
kafka('create-topic', $ftopic, 1);
kcat_produce_raw($ftopic, join('', map { "$_->[0]\t$_->[1]\n" }
	  [ 'f0', '{"amount": 1}' ], [ 'f1', '{"amount": 2}' ], [ 'f2', '{"amount": "abc"}' ],
	  [ 'f3', '{"amount": 4}' ]));
psql("CREATE TABLE t060_fail_rows (key text, amount numeric, \"offset\" bigint)");
psql(qq(SELECT mailer.create_job('j060_fail', \$\${
  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$ftopic"},
  "steps": [{"map": {"amount": "(value->>'amount')::numeric"}}],
  "sink": {"type": "table", "table": "t060_fail_rows"},
  "on_error": "fail"
}\$\$)));
$info = wait_job_state('j060_fail', qr/^failed$/);
like($info->{last_error},
	qr/record at \Q$ftopic\E partition 0 offset 2 failed at map: invalid input syntax for type numeric: "abc"/,
	'fail: state failed, last_error names the record (topic, partition, offset), the step and the error');
is(psql("SELECT count(*) FROM t060_fail_rows WHERE \"offset\" >= 2"), '0',
	'fail: nothing at or after the bad record was written');
my $pos = psql("SELECT coalesce(max((positions->'$ftopic'->>'0')::bigint), 0) FROM mailer.checkpoints
                 WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'j060_fail')");
ok($pos <= 2, "fail: no checkpoint moved past the bad record (position $pos)");
is(scalar(@{ dead_letters('j060_fail') }), 0, 'fail: no dead letter');
is($info->{restarts}, 0, 'fail: the launcher does not restart a failed job');

# start_job tries again and fails again on the same record.
my $first_at = $info->{last_error_at};
psql("SELECT mailer.start_job('j060_fail')");
$info = wait_job_state('j060_fail', qr/^failed$/);
wait_until('the second failure recorded',
	sub { $info = job_info('j060_fail'); $info->{state} eq 'failed' && $info->{last_error_at} ne $first_at });
like($info->{last_error}, qr/partition 0 offset 2 failed at map/, 'fail: start_job fails again on the same record');
is(psql("SELECT count(*) FROM t060_fail_rows WHERE \"offset\" >= 2"), '0', 'fail: still nothing after it');

# ---------------------------------------------------------------------------
# Event time and lateness: dead letters of stages event_time and late
# ---------------------------------------------------------------------------

my $wtopic = unique_name('t060w');
kafka('create-topic', $wtopic, 1);
psql("CREATE TABLE t060_windows (customer_id text, window_start timestamptz, window_end timestamptz,
      orders bigint, total numeric, PRIMARY KEY (customer_id, window_start))");
kcat_produce_raw($wtopic, join('', map { "$_->[0]\t$_->[1]\n" }
	  [ 'w1', '{"customer_id": "a", "ts": "2025-06-01 12:00:10+00", "amount": 1}' ],
	  [ 'w2', '{"customer_id": "a", "ts": "2025-06-01 12:00:30+00", "amount": 2}' ],
	  [ 'w-bad-ts', '{"customer_id": "a", "ts": "yesterday at noon", "amount": 50}' ],
	  [ 'w-no-ts', '{"customer_id": "a", "amount": 50}' ],
	  [ 'w3', '{"customer_id": "a", "ts": "2025-06-01 12:01:10+00", "amount": 4}' ],
	  [ 'w4', '{"customer_id": "b", "ts": "2025-06-01 12:02:10+00", "amount": 8}' ]));
psql(qq(SELECT mailer.create_job('j060_win', \$\${
  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$wtopic"},
  "event_time": "(value->>'ts')::timestamptz",
  "steps": [
    {"key_by": {"customer_id": "value->>'customer_id'"}},
    {"window": {"type": "tumbling", "size": "1 minute"}},
    {"aggregate": {"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}}
  ],
  "sink": {"type": "table", "table": "t060_windows"},
  "checkpoint": {"interval": "200 milliseconds"}
}\$\$)));
wait_job('j060_win');
my $windows = "SELECT customer_id, to_char(window_start AT TIME ZONE 'UTC', 'HH24:MI'), orders, total
                 FROM t060_windows ORDER BY 1, 2";
is(psql($windows), "a|12:00|2|3\na|12:01|1|4", 'windows: the windows the watermark passed, without the bad records');

# Now a record for the closed 12:00 window, then one that moves time on.
kcat_produce_raw($wtopic, "w-late\t{\"customer_id\": \"a\", \"ts\": \"2025-06-01 12:00:20+00\", \"amount\": 100}\n"
	  . "w5\t{\"customer_id\": \"b\", \"ts\": \"2025-06-01 12:03:30+00\", \"amount\": 16}\n");
wait_job('j060_win');
is(psql($windows), "a|12:00|2|3\na|12:01|1|4\nb|12:02|1|8",
	'windows: the late record changed nothing, time moved on');
my $wat = topic_offsets_by_key($wtopic);
my %wdl = map { $_->{key} => $_ } @{ dead_letters('j060_win') };
is_deeply([ sort keys %wdl ], [qw(w-bad-ts w-late w-no-ts)], 'windows: dead letters for exactly the 3 bad records');
is($wdl{'w-bad-ts'}{stage}, 'event_time', 'an unparsable event time: stage event_time');
like($wdl{'w-bad-ts'}{error}, qr/invalid input syntax for type timestamp with time zone: "yesterday at noon"/,
	'... with the cast error');
is($wdl{'w-no-ts'}{stage}, 'event_time', 'a missing event time: stage event_time');
like($wdl{'w-no-ts'}{error}, qr/event_time is NULL/, '... saying it is NULL');
is($wdl{'w-late'}{stage}, 'late', 'a record for a closed window: stage late');
like($wdl{'w-late'}{error}, qr/too late/, '... saying it is too late');
is($wdl{'w-late'}{offset}, $wat->{'w-late'}[1], '... at its offset');
$m = accounting_ok('j060_win', 'windows');
is_deeply([ @$m{qw(records_in records_accepted records_dead_lettered records_late)} ], [ 8, 5, 2, 1 ],
	'windows: 8 in, 5 accepted, 2 dead-lettered, 1 late');

# ---------------------------------------------------------------------------
# A record a flat_map makes into several fails as a whole
# ---------------------------------------------------------------------------

my $ftopic2 = unique_name('t060m');
kafka('create-topic', $ftopic2, 1);
psql("CREATE TABLE t060_skus (sku text PRIMARY KEY, lines bigint, per_unit bigint)");
kcat_produce_raw($ftopic2, join('', map { "$_->[0]\t$_->[1]\n" }
	  [ 'm1', '{"items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 0}]}' ],
	  [ 'm2', '{"items": [{"sku": "a", "qty": 2}, {"sku": "c", "qty": 4}]}' ],
	  [ 'm3', '{"items": "not an array"}' ]));
psql(qq(SELECT mailer.create_job('j060_flat', \$\${
  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$ftopic2"},
  "steps": [
    {"flat_map": "jsonb_array_elements(value->'items')"},
    {"key_by": {"sku": "value->>'sku'"}},
    {"aggregate": {"lines": "count(*)", "per_unit": "sum(100 / (value->>'qty')::int)"}}
  ],
  "sink": {"type": "table", "table": "t060_skus"}
}\$\$)));
wait_job('j060_flat');
is(psql("SELECT string_agg(sku || ':' || lines || ':' || per_unit, ',' ORDER BY sku) FROM t060_skus"), 'a:1:50,c:1:25',
	'flat_map: the record whose second item fails counts for none of its items');
my %fdl = map { $_->{key} => $_ } @{ dead_letters('j060_flat') };
is(join(',', map { "$_:$fdl{$_}{stage}" } sort keys %fdl), 'm1:aggregate,m3:flat_map',
	'flat_map: the failing records are dead letters of stages aggregate and flat_map');
like($fdl{m3}{error}, qr/cannot extract elements from a scalar/, '... with the error of jsonb_array_elements');
accounting_ok('j060_flat', 'flat_map');

is(psql("SELECT string_agg(name || ':' || state, ',' ORDER BY name) FROM mailer.jobs WHERE name <> 'j060_fail'"),
	'j060_dlq:running,j060_flat:running,j060_skip:running,j060_win:running', 'every job fed garbage is still running');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
done_testing();
