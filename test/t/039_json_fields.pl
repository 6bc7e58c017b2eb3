# JSON fields read straight from the message text give what jsonb's ->> and
# -> give, and invalid JSON is still a decode error.  Three jobs read the
# same topic: one uses only value->>'k' / value->'k' (the direct path), one
# also stores the whole value (the lazy path: fields from the text, the
# value built for the records that use it), and one reads the fields of a
# copy of the value (so it builds jsonb from every message and uses the
# operators); their rows must be equal, and equal to what PostgreSQL
# computes from the same texts.  The lazy path's dead letters are the jsonb
# path's, error texts included, as both build the value.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;
use Encode qw(decode_utf8);

fresh_extension();
my $topic = unique_name('jsonf');
kafka('create-topic', $topic, 2);

my @docs = (
	'{"a": "plain", "n": 12.50, "o": {"y": [1, 2], "x": "z"}, "b": true}',
	'{"a": "esc \" \\\\ \/ \b \f \n \r \t", "n": -0, "b": false}',
	'{"a": "\u00e9t\u00e9 \ud83d\ude00", "n": 1e2, "o": null}',
	'{"a": 1, "a": "last wins", "n": -0.00, "o": {}}',
	'  {"n": 2.5E-3, "a": null}  ',
	'["an", "array"]',
	'"a string"',
	'null',
	'{"nested": {"a": "not top level"}, "n": 123456789012345678901234567890}',
	'{"o": {"b": 1, "a": [true, {"k": null}]}, "a": "é"}',
	'{}',
	'{"a": "bad escape \x"}',
	'{"a": 1,}',
	'{"a": "\u0000"}',
	'{"a": 01}',
	'{"a" 1}',
	'{"a": "unterminated',
	'{"a": 1} trailing',
	# nesting deeper than the scanner goes: read through jsonb_in instead
	'{"a": "deep", "o": ' . ('[' x 300) . (']' x 300) . '}',
	# a number jsonb_in refuses (numeric's range) in a field the job does not read
	'{"a": "big", "x": 1e131072}',
);
kcat_produce($topic, [ map { "k$_\t$docs[$_]" } 0 .. $#docs ]);

psql(<<SQL);
CREATE TABLE direct (key text, a text, n text, o jsonb, b text, nested text);
CREATE TABLE lazy (key text, a text, n text, o jsonb, b text, nested text, value jsonb);
CREATE TABLE built (key text, a text, n text, o jsonb, b text, nested text, value jsonb);
SQL
my $fields = q{"a": "value->>'a'", "n": "value->>'n'", "o": "value->'o'", "b": "value->>'b'", "nested": "value->>'nested'"};
my %steps = (
	direct => qq{[{"map": {$fields}}]},
	lazy => qq{[{"map": {$fields, "value": "value"}}]},
	built => q{[{"map": {"v": "value"}},
	            {"map": {"a": "v->>'a'", "n": "v->>'n'", "o": "v->'o'", "b": "v->>'b'", "nested": "v->>'nested'", "value": "v"}}]},
);
for my $name ('direct', 'lazy', 'built') {
	psql(qq{SELECT mailer.create_job('$name', \$\${
	  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	  "steps": $steps{$name},
	  "sink": {"type": "table", "table": "$name", "mode": "append"}}\$\$)});
}
like(psql("SELECT mailer.describe_job(spec) FROM mailer.jobs WHERE name = 'direct'"),
	qr/value fields read from the JSON text without building jsonb/, 'describe_job says the direct path is used');
like(psql("SELECT mailer.describe_job(spec) FROM mailer.jobs WHERE name = 'lazy'"),
	qr/the value built as jsonb only for a record that uses it whole/, 'describe_job says the lazy path is used');
unlike(psql("SELECT mailer.describe_job(spec) FROM mailer.jobs WHERE name = 'built'"),
	qr/value fields read from the JSON text/, 'a job reading fields of a copy of the value builds jsonb');
for my $j ('direct', 'lazy', 'built') {
	is(psql("SELECT mailer.wait_job('$j', '60 seconds')"), 'running', "$j job caught up");
}

my $valid = 12;
my @invalid = (11 .. 17, 19);
is(psql("SELECT count(*) FROM direct"), $valid, 'every valid document gave a row');
is(psql(q{SELECT count(*) FROM (SELECT key, a, n, o, b, nested FROM direct
	EXCEPT SELECT key, a, n, o, b, nested FROM built) d}), '0', 'same rows as with jsonb');
is(psql(q{SELECT count(*) FROM (
	(SELECT key, a, n, o, b, nested, value FROM lazy EXCEPT ALL SELECT key, a, n, o, b, nested, value FROM built)
	UNION ALL
	(SELECT key, a, n, o, b, nested, value FROM built EXCEPT ALL SELECT key, a, n, o, b, nested, value FROM lazy)) d}),
	'0', 'the lazy path: the same rows and values as with jsonb');
is(psql(q{SELECT count(*) FROM built
	WHERE (a, n, o, b, nested) IS DISTINCT FROM
	      (value->>'a', value->>'n', value->'o', value->>'b', value->>'nested')}), '0',
	'and equal to the jsonb operators over the same value');
is(psql("SELECT a FROM direct WHERE key = 'k3'"), 'last wins', 'a repeated key: the last one wins');
is(psql("SELECT n FROM direct WHERE key = 'k2'"), '100', 'numbers read as numeric prints them');
is(decode_utf8(psql("SELECT a FROM direct WHERE key = 'k2'")), "\x{e9}t\x{e9} \x{1F600}", 'unicode escapes and surrogate pairs');
is(psql("SELECT a || ' ' || jsonb_array_length(o) FROM direct WHERE key = 'k18'"), 'deep 1', 'deep nesting read through jsonb');

for my $j ('direct', 'lazy', 'built') {
	is(psql("SELECT string_agg(convert_from(key, 'UTF8'), ',' ORDER BY convert_from(key, 'UTF8')) FROM mailer.dead_letters d JOIN mailer.jobs j USING (job_id) WHERE j.name = '$j' AND stage = 'decode'"),
		join(',', sort map { "k$_" } @invalid), "$j: the invalid documents are the dead letters");
	is(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.jobs j USING (job_id) WHERE j.name = '$j' AND stage = 'decode'"),
		scalar(@docs) - $valid, "$j: each invalid document is a decode dead letter");
}
is(psql(q{SELECT count(*) FROM (SELECT "offset", partition FROM mailer.dead_letters WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'direct')
	EXCEPT SELECT "offset", partition FROM mailer.dead_letters WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'built')) x}), '0',
	'the same messages are dead letters on both paths');
is(psql(q{SELECT count(*) FROM (
	(SELECT "offset", partition, stage, error FROM mailer.dead_letters WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'lazy')
	 EXCEPT ALL SELECT "offset", partition, stage, error FROM mailer.dead_letters WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'built'))
	UNION ALL
	(SELECT "offset", partition, stage, error FROM mailer.dead_letters WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'built')
	 EXCEPT ALL SELECT "offset", partition, stage, error FROM mailer.dead_letters WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'lazy'))) x}), '0',
	'the lazy path: the same dead letters as with jsonb, error texts included');

psql("SELECT mailer.drop_job('direct'); SELECT mailer.drop_job('lazy'); SELECT mailer.drop_job('built'); DROP TABLE direct, lazy, built;");
done_testing();
