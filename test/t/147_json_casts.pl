# Casts of JSON fields, (value->>'k')::type, are computed from the message
# text at their first use in the record (json_scan.c) instead of through a
# text value and the executor's cast.  Two jobs read the same odd input:
# "fast" casts value->>'k' (the fields path); "general" casts v->>'k' for a
# copy v of the value, which builds jsonb from every message and runs the
# operators and the casts in the executor.  Their rows, dead letters (stage
# and error text) and counters must be equal: a bad number, a missing
# field, JSON null against a string "null", odd types (arrays, objects,
# booleans), escapes, \u0000, a huge string, deep nesting (which the
# scanner leaves to jsonb_in), malformed JSON, and a filter that drops a
# record before its bad cast would fail it.  A third job, "lazy", also
# stores the value whole (built only for the records that reach the sink)
# and must match "general" in everything, invalid JSON's errors included.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
my $topic = unique_name('jsonc');
kafka('create-topic', $topic, 1);

# Over the scanner's scratch buffer's keep size (json_scan.c): given back after use.
my $huge = 'x' x 100000;
my @docs = (
	'{"n": 12.50, "i": 7, "b": true, "t": "2025-06-01T00:00:00Z", "s": "plain"}',
	'{"n": "3.25", "i": "42", "b": "yes", "t": "2025-06-01 12:00:00+02", "s": 5}',
	'{"n": -0, "i": -0, "b": false, "s": null}',
	'{"n": 1e2, "i": 1, "b": "f", "s": "null"}',
	'{"n": 2.5E-3, "i": 2147483647, "b": "on"}',
	'{"n": null, "i": null, "b": null, "t": null}',
	'{}',
	'{"n": "abc"}',
	'{"i": 2147483648}',
	'{"i": 1.5}',
	'{"n": [1, 2]}',
	'{"n": {"a": 1}}',
	'{"b": 1}',
	'{"b": "maybe"}',
	'{"t": "not a time"}',
	'{"n": " 12 "}',
	'{"n": "\u0031\u0032"}',
	'{"n": "1\u0000"}',
	'{"s": "' . $huge . '", "n": 1}',
	'{"n": "' . $huge . '"}',
	'{"n": 3, "deep": ' . ('[' x 300) . (']' x 300) . '}',
	'{"n": "bad", "deep": ' . ('[' x 300) . (']' x 300) . '}',
	'{"n": 1,}',
	'{"n": tru}',
	'[1, 2]',
	'"a string"',
	'null',
	'{"skip": true, "n": "would fail"}',
	'{"n": "NaN", "i": "  3  "}',
	'{"n": "Infinity"}',
	'{"a": 1, "n": "first", "n": 4}',
	# numbers numeric_in's result is made for directly (up to 18 digits, no exponent)
	'{"n": 0.000}', '{"n": -0.0}', '{"n": 0}', '{"n": -12.3400}', '{"n": 10000}',
	'{"n": 0.0001}', '{"n": 99999.99999}', '{"n": 123456789012345678}',
	'{"n": -1234567890123456789}', '{"n": 0.123456789012345678}', '{"n": 1.5e0}',
	# integers made directly, or left to int4in for its range error
	'{"i": -2147483648}', '{"i": -2147483649}', '{"i": -0}', '{"i": 123456789012345678901}',
	'{"i": 1e0}', '{"i": 99, "m": 1}', '{"i": 100, "m": 0}', '{"i": 300, "m": "2"}',
	'{"h": 32767}', '{"h": -32768}', '{"h": 32768}', '{"h": "12"}', '{"h": 1.0}', '{"h": -0}',
);
# Many digits or a large scale: made directly only where
# int64_div_fast_to_numeric is exact on every 15.x (a scale not a multiple
# of 4, the value times 10^(4 - scale % 4) within int64), else numeric_in.
# Each must come out as its own text.
my @wide = qw(
	12345678.9012345678 -1234567.89012345678 99999999999999.9999 1.2345 -1.2345
	12345678.12345678 0.000000000000000001 0.00000000000000001 -0.00000000000000001
	9223372036854775807.5 922337203685477580.7 9223372036854775.8 9223372036854775
	922337203685477.5807 12345678901234.567 123456789012345.67 -0.000000001
	1234567890.1234567 12.3456789 0.1234567890123 123.456789012345
	1234567.8901234567 123456.78901234567 1.2345678901234567 0.12345678901234567
	1.23456789012345678 12.345678901234567 123.45678901234567 1234.5678901234567
	-999999999999999.999 99999999999999999.9 0.00000000000000000000001 -0.1 100.5
);
my $first_wide = @docs;
push @docs, map { qq({"n": $_}) } @wide;
kcat_produce($topic, [ map { "k$_\t$docs[$_]" } 0 .. $#docs ]);

psql(<<SQL);
DROP TABLE IF EXISTS fast, lazy, general;
CREATE TABLE fast (key text, n numeric, n2 numeric, i int, b boolean, t timestamptz, s text, m int, l bigint, h smallint, whole jsonb);
CREATE TABLE lazy (LIKE fast);
CREATE TABLE general (LIKE fast);
SQL
# n is cast twice (one value serves both); m is cast after a filter on i's cast.
my $casts = q{"n": "(V->>'n')::numeric", "n2": "(V->>'n')::numeric + 0", "i": "(V->>'i')::int",
	"b": "(V->>'b')::boolean", "t": "(V->>'t')::timestamptz", "s": "(V->>'s')::text",
	"l": "(V->>'i')::bigint", "h": "(V->>'h')::smallint"};
# lazy also stores the value whole: built only for the records that get there.
for my $name ('fast', 'lazy', 'general') {
	my $v = $name eq 'general' ? 'v' : 'value';
	(my $c = $casts) =~ s/V/$v/g;
	$c .= qq{, "whole": "$v"} unless $name eq 'fast';
	my $copy = $name eq 'general' ? '{"map": {"v": "value"}},' : '';
	psql(qq{SELECT mailer.create_job('$name', \$\${
	  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	  "steps": [$copy
	            {"filter": "($v->>'skip') IS NULL"},
	            {"map": {$c}},
	            {"filter": "coalesce(i, 0) < 100 OR (${v}->>'m')::int > 0"},
	            {"map": {"m": "($v->>'i')::int * 2"}}],
	  "sink": {"type": "table", "table": "$name", "mode": "append"}}\$\$)});
}
like(psql("SELECT mailer.describe_job(spec) FROM mailer.jobs WHERE name = 'fast'"),
	qr/value fields read from the JSON text without building jsonb/, 'the fast job reads fields from the text');
unlike(psql("SELECT mailer.describe_job(spec) FROM mailer.jobs WHERE name = 'general'"),
	qr/value fields read from the JSON text/, 'the general job builds jsonb');
like(psql("SELECT mailer.describe_job(spec) FROM mailer.jobs WHERE name = 'lazy'"),
	qr/the value built as jsonb only for a record that uses it whole/, 'the lazy job builds the value when used');
for my $j ('fast', 'lazy', 'general') {
	is(psql("SELECT mailer.wait_job('$j', '60 seconds')"), 'running', "$j job caught up");
}

sub differ
{
	my ($query, $job) = @_;
	(my $f = $query) =~ s/JOB/${\($job \/\/ 'fast')}/g;
	(my $g = $query) =~ s/JOB/general/g;
	return psql("SELECT count(*) FROM (($f EXCEPT ALL $g) UNION ALL ($g EXCEPT ALL $f)) d");
}
isnt(psql("SELECT count(*) FROM fast"), '0', 'some rows');
isnt(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.jobs j USING (job_id) WHERE j.name = 'fast'"), '0',
	'some dead letters');
is(differ("SELECT key, n, n2, i, b, t, s, m, l, h FROM JOB"), '0', 'the same rows');
is(psql("SELECT count(*) FROM fast WHERE whole IS NOT NULL"), '0', 'fast stores no value');
is(differ("SELECT n::text, s FROM JOB"), '0', 'numerics in the same scale, texts alike');
is(differ("SELECT key, numeric_send(n), numeric_send(n2) FROM JOB"), '0', 'numerics with the same bytes');
is(differ(q{SELECT convert_from(key, 'UTF8'), stage FROM mailer.dead_letters d JOIN mailer.jobs j USING (job_id) WHERE j.name = 'JOB'}),
	'0', 'the same dead letters, at the same stage');
# Invalid JSON has the scanner's error text on the fields path (test 039).
is(differ(q{SELECT convert_from(key, 'UTF8'), error FROM mailer.dead_letters d JOIN mailer.jobs j USING (job_id) WHERE j.name = 'JOB' AND stage <> 'decode'}),
	'0', 'with the same errors');
is(differ(q{SELECT records_in, records_out, records_filtered, records_dead_lettered FROM mailer.metrics WHERE name = 'JOB'}),
	'0', 'the same counters');
is(differ("SELECT key, n, n2, i, b, t, s, m, l, h, whole FROM JOB", 'lazy'), '0', 'lazy: the same rows, the value included');
is(differ("SELECT n::text, s FROM JOB", 'lazy'), '0', 'lazy: numerics in the same scale');
# Building the value, lazy fails invalid JSON with jsonb_in's error, as general.
is(differ(q{SELECT convert_from(key, 'UTF8'), stage, error FROM mailer.dead_letters d JOIN mailer.jobs j USING (job_id) WHERE j.name = 'JOB'}, 'lazy'),
	'0', 'lazy: the same dead letters, errors included');
is(differ(q{SELECT records_in, records_out, records_filtered, records_dead_lettered FROM mailer.metrics WHERE name = 'JOB'}, 'lazy'),
	'0', 'lazy: the same counters');
for my $i (0 .. $#wide) {
	my $k = 'k' . ($first_wide + $i);
	is(psql("SELECT n::text || ' ' || n2::text FROM fast WHERE key = '$k'"), "$wide[$i] $wide[$i]",
		"numeric $wide[$i] as numeric_in makes it");
}
is(psql("SELECT n FROM fast WHERE key = 'k30'"), '4', 'a repeated key: the last one is cast');
is(psql("SELECT count(*) FROM fast WHERE key = 'k27'"), '0', 'a filtered record is not cast');
is(psql(q{SELECT count(*) FROM mailer.dead_letters d JOIN mailer.jobs j USING (job_id) WHERE j.name = 'fast' AND convert_from(key, 'UTF8') = 'k27'}),
	'0', 'and is no dead letter');

# A flat_map's outputs are copies of the record, made with its lazy fields
# (the value used whole, a cast) computed or still pending: every output
# takes the record's, and the rows are those of the jsonb path.  (After the
# flat_map, "value" names its element: the whole value is used before.)
my $fm_topic = unique_name('jsonfm');
kafka('create-topic', $fm_topic, 1);
kcat_produce($fm_topic, ['f1	{"type": "o", "n": 12345678.9012345678, "items": [{"a": 1}, {"a": 2}, {"a": 3}]}',
	'f2	{"type": "x", "n": 1, "items": [{"a": 9}]}', 'f3	{"type": "o", "n": 0.5, "items": []}',
	'f4	{"type": "o", "n": -1.25, "items": [{"a": 4}, {"a": 5}]}']);
psql("DROP TABLE IF EXISTS fm_lazy, fm_general; CREATE TABLE fm_lazy (key text, value jsonb, whole jsonb, n numeric);"
	. " CREATE TABLE fm_general (LIKE fm_lazy)");
for my $name ('fm_lazy', 'fm_general') {
	my $v = $name eq 'fm_general' ? 'v' : 'value';
	my $copy = $name eq 'fm_general' ? '{"map": {"v": "value"}},' : '';
	psql(qq{SELECT mailer.create_job('$name', \$\${
	  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$fm_topic"},
	  "steps": [$copy {"filter": "$v->>'type' = 'o'"},
	            {"map": {"whole": "$v", "n": "($v->>'n')::numeric"}},
	            {"flat_map": "jsonb_array_elements($v->'items')"}],
	  "sink": {"type": "table", "table": "$name", "mode": "append"}}\$\$)});
}
like(psql("SELECT mailer.describe_job(spec) FROM mailer.jobs WHERE name = 'fm_lazy'"),
	qr/the value built as jsonb only for a record that uses it whole/, 'flat_map: the value is built when used');
for my $j ('fm_lazy', 'fm_general') {
	is(psql("SELECT mailer.wait_job('$j', '60 seconds')"), 'running', "$j job caught up");
}
is(psql("SELECT string_agg(key || ' ' || (value->>'a') || ' ' || n::text, ',' ORDER BY value->>'a') FROM fm_lazy"),
	'f1 1 12345678.9012345678,f1 2 12345678.9012345678,f1 3 12345678.9012345678,f4 4 -1.25,f4 5 -1.25',
	'flat_map: every output of a record');
is(psql("SELECT count(*) FROM fm_lazy WHERE whole->>'type' = 'o' AND whole->'items' @> jsonb_build_array(value)"), '5',
	'flat_map: every output has the whole value');
is(psql(q{SELECT count(*) FROM ((TABLE fm_lazy EXCEPT ALL TABLE fm_general) UNION ALL (TABLE fm_general EXCEPT ALL TABLE fm_lazy)) d}),
	'0', 'flat_map: the jsonb path\'s rows');

psql("SELECT mailer.drop_job('fast'); SELECT mailer.drop_job('lazy'); SELECT mailer.drop_job('general');"
	. " SELECT mailer.drop_job('fm_lazy'); SELECT mailer.drop_job('fm_general');"
	. " DROP TABLE fast, lazy, general, fm_lazy, fm_general;")
	unless $ENV{KEEP_JOBS};
done_testing();
