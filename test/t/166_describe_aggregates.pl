# describe_job shows, for each general aggregate (issue 19), its
# transition, combine and final functions and how its state is stored:
# an extension's aggregate with an internal state and serialize functions
# (hll_add_agg), a built-in one with a float8[] state (stddev), one whose
# inputs are kept (array_agg: internal without serialize functions; and any
# DISTINCT), a user-defined one in SQL with a combine and a final function,
# and one in PL/pgSQL with neither.  The fast count(*) is shown as before.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerAggTest;
use Test::More;
use JSON::PP ();

fresh_extension();
drop_tables('t166');
psql("SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS hll");
psql(agg_uda_sql('t166', psql('SELECT current_user')));
my @aggs = (
	[ n  => 'count(*)' ],
	[ hl => "hll_add_agg(hll_hash_text(value->>'customer_id'))" ],
	[ sd => "stddev((value->>'amount')::float8)" ],
	[ aa => "array_agg((value->>'amount')::numeric)" ],
	[ cd => "count(DISTINCT value->>'customer_id')" ],
	[ st => "t166_stats((value->>'amount')::int)" ],
	[ sq => "t166_squares((value->>'amount')::int)" ],
);
psql("CREATE TABLE t166 (k text PRIMARY KEY, n bigint, hl hll, sd float8, aa numeric[], cd bigint, st text, sq bigint)");
my $json = JSON::PP->new->canonical;
my $agg = join(', ', map { $json->encode($_->[0]) . ': ' . $json->encode($_->[1]) } @aggs);
my $plan = psql(qq[SELECT mailer.describe_job(\$spec\${"source": {"type": "generator"},
	"steps": [{"key_by": {"k": "value->>'customer_id'"}}, {"aggregate": {$agg}}],
	"sink": {"type": "table", "table": "t166"}}\$spec\$)]);

# The plan's lines about one aggregate: from its "aggregate <name>" line to the next aggregate's.
sub about
{
	my ($name) = @_;
	my ($text) = $plan =~ /^(\s*aggregate $name\b.*?)(?=^\s*aggregate |^\S|\z)/ms;
	diag("no aggregate $name in:\n$plan") unless defined $text;
	return $text // '';
}

like(about('n'), qr/aggregate n bigint := count\(\*\)\n?$/, 'count(*) as before, on its fast path');
like(about('hl'), qr/transition hll_add_trans0\(internal,hll_hashval\), combine hll_union_internal\(internal,internal\), final hll_pack\(internal\); state: internal, stored through hll_serialize\(internal\) and hll_deserialize\(bytea,internal\)/,
	'hll_add_agg: its functions, and its internal state kept through its serialize functions');
like(about('sd'), qr/transition float8_accum\(double precision\[\],double precision\), combine float8_combine\(double precision\[\],double precision\[\]\), final float8_stddev_samp\(double precision\[\]\); state: double precision\[\], stored through its send and receive functions/,
	'stddev: its functions, and its float8[] state kept through the type\'s send and receive');
like(about('aa'), qr/transition array_agg_transfn\(internal,anynonarray\), combine none, final array_agg_finalfn\(internal,anynonarray\); state: the key's inputs \(its internal state has no serialization\), replayed through the transition function, at most mailer.aggregate_state_limit per key/,
	'array_agg: its functions, and its inputs kept within the limit');
like(about('cd'), qr/transition int8inc_any\(bigint,"any"\), combine int8pl\(bigint,bigint\), final none; state: the key's distinct inputs \(DISTINCT\), replayed through the transition function, at most mailer.aggregate_state_limit per key/,
	'count(DISTINCT): its functions, and its distinct inputs kept within the limit');
like(about('st'), qr/transition t166_stats_step\(bigint\[\],integer\), combine t166_stats_combine\(bigint\[\],bigint\[\]\), final t166_stats_final\(bigint\[\]\); state: bigint\[\], stored through its send and receive functions/,
	'the SQL aggregate: its functions, and its bigint[] state kept through send and receive');
like(about('sq'), qr/transition t166_squares_step\(bigint,integer\), combine none, final none; state: bigint, stored through its send and receive functions/,
	'the PL/pgSQL aggregate: no combine or final function');

# A state whose type has send and receive, but holds a type that has not
# (hll_hashval[]: an array's I/O calls its element's), keeps the inputs;
# kept as a value, every checkpoint would fail.
psql("DROP AGGREGATE IF EXISTS t166_hashes(hll_hashval);
	CREATE OR REPLACE FUNCTION t166_nhashes(hll_hashval[]) RETURNS int LANGUAGE sql AS 'SELECT coalesce(array_length(\$1, 1), 0)';
	CREATE AGGREGATE t166_hashes(hll_hashval) (sfunc = array_append, stype = hll_hashval[], finalfunc = t166_nhashes, initcond = '{}');
	CREATE TABLE t166_hashes (k text PRIMARY KEY, n int, s text, f float8[])");
$plan = psql(qq[SELECT mailer.describe_job(\$spec\${"source": {"type": "generator"},
	"steps": [{"key_by": {"k": "value->>'customer_id'"}},
	          {"aggregate": {"n": "t166_hashes(hll_hash_text(value->>'order_id'))"}}],
	"sink": {"type": "table", "table": "t166_hashes"}}\$spec\$)]);
like(about('n'), qr/state: the key's inputs \(its state type has no binary send and receive\)/,
	'a state of hll_hashval[] keeps the inputs');

# The same job runs: its results, a COLLATE in an ORDER BY, and a float8[]
# column (passed to the sink as text) with every digit whatever the owner's
# extra_float_digits.
psql("ALTER ROLE CURRENT_USER SET extra_float_digits = 0");
psql(qq[SELECT mailer.create_job('j166', \$spec\${"source": {"type": "generator", "events": 300},
	"steps": [{"key_by": {"k": "value->>'customer_id'"}},
	          {"aggregate": {"n": "t166_hashes(hll_hash_text(value->>'order_id'))",
	                         "s": "string_agg(value->>'order_id', ',' ORDER BY value->>'order_id' COLLATE \\"C\\")",
	                         "f": "array_agg(1.0000000000000002::float8)"}}],
	"sink": {"type": "table", "table": "t166_hashes"}}\$spec\$)]);
is(wait_job('j166', 60), 'finished', 'the job with a hll_hashval[] state runs to its end');
is(psql("SELECT sum(n) || ' ' || bool_and(s = (SELECT string_agg(x, ',' ORDER BY x COLLATE \"C\") FROM unnest(string_to_array(s, ',')) x))
	|| ' ' || bool_and(f[1] = 1.0000000000000002::float8) FROM t166_hashes"), '300 true true',
	'every record counted once, the COLLATE order kept, every float digit kept');
psql("ALTER ROLE CURRENT_USER RESET extra_float_digits");

done_testing();
