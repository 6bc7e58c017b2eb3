# The Pulsar reader's frame parser (src/connectors/pulsar_frame.c: a small
# JSON parser of its own, so that a frame is read without PostgreSQL) against
# PostgreSQL's jsonb on the same frames: edge cases written out, then seeded
# random frames and mutations of them. For every frame both must agree on
# accepted or refused and, when accepted, on the message id, key,
# properties and payload bytes. No broker: test/pulsar_tool parse reads the
# frames as the source will.
#
# Deliberate differences, checked apart: the parser refuses nesting deeper
# than 16 and more than 64 properties (a frame is flat; a bound keeps a
# hostile frame cheap), and base64 with white space in it or a digit after
# its padding (the broker's encoder writes neither), all of which jsonb and
# decode() accept.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MIME::Base64 qw(encode_base64);
use IPC::Run ();
use List::Util qw(shuffle);
use Test::More;

system('make', '-s', '-C', "$ROOT/test/pulsar_tool", "PG_CONFIG=" . ($ENV{PG_CONFIG} // 'pg_config')) == 0
  or die "could not build test/pulsar_tool\n";
my $TOOL = "$ROOT/test/pulsar_tool/pulsar_tool";

# The parser's answer per frame: "error", or ok<TAB>fields in hex, the
# properties sorted by name (jsonb keeps them in its own order).
sub parse_c
{
	my ($frames) = @_;
	my ($out, $err) = ('', '');
	my $in = join('', map { "$_\n" } @$frames);
	IPC::Run::run([ $TOOL, 'parse' ], '<', \$in, '>', \$out, '2>', \$err)
	  or die "pulsar_tool parse failed: $err\n";
	my @lines = split /\n/, $out, -1;
	pop @lines;
	return [ map { normalize($_) } @lines ];
}

sub normalize
{
	my ($line) = @_;
	return 'error' if $line =~ /^error/;
	my @f = split /\t/, $line, -1;
	$f[3] = join(';', sort split /;/, $f[3]);
	return join("\t", @f);
}

# jsonb's answer, in the same form: a frame is an object with string
# messageId and payload (base64), key a string or null, properties an
# object of strings or nulls (nulls dropped) or null.
sub parse_sql
{
	my ($frames) = @_;
	my $values = join(",\n", map { "($_, \$frame\$$frames->[$_]\$frame\$)" } 0 .. $#$frames);
	my $out = psql(<<"SQL");
CREATE TEMP TABLE frames (n int, t text);
INSERT INTO frames VALUES $values;
CREATE FUNCTION pg_temp.frame(t text) RETURNS text LANGUAGE plpgsql AS \$f\$
DECLARE
	j jsonb;
	props jsonb;
	payload bytea;
	hex_props text;
BEGIN
	BEGIN
		j := t::jsonb;
		props := CASE jsonb_typeof(j->'properties') WHEN 'object' THEN j->'properties' ELSE '{}' END;
		IF jsonb_typeof(j) <> 'object'
		   OR jsonb_typeof(j->'messageId') IS DISTINCT FROM 'string'
		   OR jsonb_typeof(j->'payload') IS DISTINCT FROM 'string'
		   OR coalesce(jsonb_typeof(j->'key'), 'null') NOT IN ('string', 'null')
		   OR coalesce(jsonb_typeof(j->'properties'), 'null') NOT IN ('object', 'null')
		   OR EXISTS (SELECT FROM jsonb_each(props) e WHERE jsonb_typeof(e.value) NOT IN ('string', 'null'))
		THEN
			RETURN 'error';
		END IF;
		payload := decode(j->>'payload', 'base64');
	EXCEPTION WHEN others THEN
		RETURN 'error';
	END;
	SELECT coalesce(string_agg(encode(convert_to(e.key, 'UTF8'), 'hex') || '='
		   || encode(convert_to(e.value #>> '{}', 'UTF8'), 'hex'), ';'), '')
	  INTO hex_props
	  FROM jsonb_each(props) e WHERE jsonb_typeof(e.value) = 'string';
	RETURN 'ok' || E'\\t' || encode(convert_to(j->>'messageId', 'UTF8'), 'hex')
		|| E'\\t' || coalesce(encode(convert_to(j->>'key', 'UTF8'), 'hex'), E'\\\\N')
		|| E'\\t' || hex_props || E'\\t' || encode(payload, 'hex');
END
\$f\$;
SELECT pg_temp.frame(t) FROM frames ORDER BY n;
SQL
	return [ map { normalize($_) } split /\n/, $out, -1 ];
}

# Compare both on @frames; one test, listing every disagreement.
sub agree
{
	my ($what, $frames) = @_;
	my $c = parse_c($frames);
	my $sql = parse_sql($frames);
	my @diff = grep { ($c->[$_] // '') ne ($sql->[$_] // '') } 0 .. $#$frames;
	ok(!@diff, "$what: the parser and jsonb agree on all " . scalar(@$frames))
	  or diag(join("\n", map { "frame: $frames->[$_]\n  parser: $c->[$_]\n  jsonb:  $sql->[$_]" } @diff[ 0 .. ($#diff < 9 ? $#diff : 9) ]));
	return $c;
}

my $ID = '"messageId":"CAsQABgAMAA="';
my @edge = (
	qq({$ID,"payload":"aGVsbG8=","properties":{},"publishTime":"2024-01-01T00:00:00.000Z","redeliveryCount":0,"key":"k"}),
	qq({$ID,"payload":"","key":"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t"}),
	qq({$ID,"payload":"","key":"\\u00e9\\u20ac\\ud83d\\ude00 é€😀 \\u007f\\u0001"}),
	qq({$ID,"payload":"","key":"\\ud83d"}),
	qq({$ID,"payload":"","key":"\\ude00"}),
	qq({$ID,"payload":"","key":"\\ud83d\\u0041"}),
	qq({$ID,"payload":"","key":"\\u0000"}),
	qq({$ID,"payload":"","key":"\\u12"}),
	qq({$ID,"payload":"","key":"\\x41"}),
	qq({$ID,"payload":"","key":"tab\there"}),
	qq({$ID,"payload":"","properties":{"a":"1","b":null,"":""}}),
	qq({$ID,"payload":"","properties":{"a":1}}),
	qq({$ID,"payload":"","properties":{"a":{}}}),
	qq({$ID,"payload":"","properties":null}),
	qq({$ID,"payload":"","properties":[]}),
	qq({$ID,"payload":"","properties":"a=b"}),
	qq({$ID,"payload":"","properties":{"a":"1","a":"2"}}),
	qq({$ID,"payload":"","properties":{"a":"1"},"properties":{"b":"2"}}),
	qq({$ID,"payload":"","key":7}),
	qq({$ID,"payload":""}),
	qq({$ID,"payload":"","key":null}),
	qq({$ID,"payload":"","key":""}),
	qq({$ID,"payload":"","key":"a","key":null}),
	qq({"payload":""}),
	qq({"messageId":1,"payload":""}),
	qq({"messageId":null,"payload":""}),
	qq({$ID}),
	qq({$ID,"payload":null}),
	qq({$ID,"payload":"YQ"}),
	qq({$ID,"payload":"YQ="}),
	qq({$ID,"payload":"YQ=="}),
	qq({$ID,"payload":"YWI="}),
	qq({$ID,"payload":"Y==="}),
	qq({$ID,"payload":"////"}),
	qq({$ID,"payload":"-_-_"}),
	qq({$ID,"payload":"AAAA","payload":"YWJj"}),
	qq({$ID,"payload":"","x":{"y":[1,2,{"z":[]}],"w":{}},"v":[],"u":[[[]]]}),
	qq({$ID,"payload":"","n":[0,-0,1.5,-1.5e10,1E+2,2e-3,true,false,null]}),
	qq({$ID,"payload":"","n":01}),
	qq({$ID,"payload":"","n":1.}),
	qq({$ID,"payload":"","n":.5}),
	qq({$ID,"payload":"","n":+1}),
	qq({$ID,"payload":"","n":-}),
	qq({$ID,"payload":"","n":1e}),
	qq({$ID,"payload":"","n":1x}),
	qq({$ID,"payload":"","n":tru}),
	qq({$ID,"payload":"","n":nulls}),
	qq({$ID,"payload":"","n":NaN}),
	qq({$ID,"payload":"","n":True}),
	qq( \t\r{ "messageId" : "x" ,\t"payload" : "YQ==" } \t\r),
	qq({$ID,"payload":""}x),
	qq({$ID,"payload":""}{}),
	qq({$ID,"payload":"",}),
	qq({$ID,"payload" ""}),
	qq({$ID,"payload":"),
	qq({$ID,"payload":""),
	qq({$ID,"payload":"","a":[1,]}),
	qq({$ID,"payload":"","a":[1 2]}),
	qq({$ID,"payload":"","a":{"b"}}),
	qq({$ID,"payload":"","a":{1:2}}),
	qq({'messageId':"x","payload":""}),
	'',
	'[]',
	'"s"',
	'null',
	'{}',
	qq({$ID,"payload":"","deep":) . ('[' x 15) . (']' x 15) . '}',
);
agree('edge cases', \@edge);

# The deliberate differences: refused here, accepted by jsonb.
my $deep = qq({$ID,"payload":"","deep":) . ('[' x 40) . (']' x 40) . '}';
my $props64 = qq({$ID,"payload":"","properties":{) . join(',', map { qq("p$_":"v") } 1 .. 64) . '}}';
my $props65 = qq({$ID,"payload":"","properties":{) . join(',', map { qq("p$_":"v") } 1 .. 65) . '}}';
my $spaced = qq({$ID,"payload":"YW Jj"});
my $after_pad = qq({$ID,"payload":"YQ=A"});
my $c = parse_c([ $deep, $props64, $props65, $spaced, $after_pad ]);
my $sql = parse_sql([ $deep, $props64, $props65, $spaced, $after_pad ]);
is_deeply($c, [ 'error', $sql->[1], 'error', 'error', 'error' ],
	'nesting deeper than 16, more than 64 properties, base64 with a space or a digit after "=": refused (64 properties: as jsonb)');
is_deeply([ map { $_ =~ /^ok/ ? 'ok' : 'error' } @$sql[ 0, 2, 3, 4 ] ], [ 'ok', 'ok', 'ok', 'ok' ],
	'... which jsonb and decode() accept');

# Seeded random frames: strings of escapes, surrogate pairs, multibyte
# characters and plain text, up to 5 properties, random payload bytes, the
# members in random order with unknown ones among them.
srand(181);
my @pieces = ('a', 'Z', '0', ' ', '\\"', '\\\\', '\\/', '\\b', '\\f', '\\n', '\\r', '\\t', 'é', '€', '😀', '\\u00e9',
	'\\u20AC', '\\ud83d\\ude00', '\\uD834\\uDD1E', '\\u0041', '\\uffff', '\\u0800', '=', ';', ':', '{', '[');
sub rand_string { return join('', map { $pieces[ int(rand(@pieces)) ] } 1 .. int(rand(12))); }
sub rand_value
{
	my $r = int(rand(6));
	return ('1', '-2.5e3', 'true', 'null', '[1,{"a":[]}]', qq("@{[rand_string()]}"))[$r];
}
my @random;
for (1 .. 300)
{
	my @members = (qq("messageId":"@{[rand_string()]}"),
		'"payload":"' . encode_base64(join('', map { chr(int(rand(256))) } 1 .. int(rand(20))), '') . '"');
	push @members, rand() < 0.7 ? qq("key":"@{[rand_string()]}") : '"key":null' if rand() < 0.8;
	push @members, '"properties":{' . join(',', map { qq("@{[rand_string()]}":) . (rand() < 0.9 ? qq("@{[rand_string()]}") : 'null') } 1 .. int(rand(6))) . '}'
	  if rand() < 0.8;
	push @members, qq("x@{[int(rand(100))]}":@{[rand_value()]}) for 1 .. int(rand(3));
	@members = shuffle(@members);
	push @random, '{' . join(',', @members) . '}';
}
my $answers = agree('300 random frames', \@random);
cmp_ok(scalar(grep { /^ok/ } @$answers), '>', 250, '... most of them accepted');

# Mutations: each random frame with one character deleted, or cut short.
my @mutated;
for my $f (@random)
{
	my $at = int(rand(length $f));
	push @mutated, substr($f, 0, $at) . substr($f, $at + 1);
	push @mutated, substr($f, 0, int(rand(length $f)));
}
# A cut may split a multibyte character; PostgreSQL refuses such text
# before jsonb sees it, so only whole characters are kept.
@mutated = grep { utf8::decode(my $copy = $_) } @mutated;
agree(scalar(@mutated) . ' mutated frames', \@mutated);

done_testing();
