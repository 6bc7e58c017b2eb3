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
diag($plan);

# The plan's lines about one aggregate: from its "aggregate <name>" line to the next aggregate's.
sub about
{
	my ($name) = @_;
	my ($text) = $plan =~ /^(\s*aggregate $name\b.*?)(?=^\s*aggregate |^\S|\z)/ms;
	return $text // '';
}

like(about('n'), qr/aggregate n bigint := count\(\*\)/, 'count(*) as before');
like(about('hl'), qr/hll_add_trans0.*hll_union_internal.*hll_pack/s, 'hll_add_agg: transition, combine and final functions');
like(about('sd'), qr/float8_accum.*float8_combine.*float8_stddev_samp/s, 'stddev: transition, combine and final functions');
like(about('aa'), qr/array_agg_transfn/, 'array_agg: its transition function');
like(about('st'), qr/t166_stats_step.*t166_stats_combine.*t166_stats_final/s,
	'the SQL aggregate: transition, combine and final functions');
like(about('sq'), qr/t166_squares_step/, 'the PL/pgSQL aggregate: its transition function');
unlike(about('sq'), qr/combine[^\n]*t166/, '... and no combine function');

# TODO(issue 19): the wording of how a state is stored is the core's
# (src/plan/describe.c); until then, loosely: hll through its serialize
# function, bigint[] through the type's send/receive, array_agg and
# DISTINCT as the inputs kept (with the limit).
like(about('hl'), qr/hll_serialize/, 'hll_add_agg: stored through its serialize function');
like(about('st'), qr/array_send|send/, 'the SQL aggregate: stored through its type\'s send function');
like(about('aa'), qr/input/i, 'array_agg: its inputs are kept');
like(about('cd'), qr/input/i, 'count(DISTINCT): its inputs are kept');

done_testing();
