# MailerAggTest: what the tests of general aggregates (issue 19, test/t/16x)
# share, on top of MailerTest.
#
# The records are made in SQL into a source table (seq, k, ts, value jsonb)
# and produced to a topic as they are, key k and value the jsonb.  SQL's
# answer is then PostgreSQL's own GROUP BY of the job's very aggregate
# calls over the very values the job read: one list of [column, call]
# pairs gives both the job's aggregate step and the SQL.  A sink table is
# made from that SQL (CREATE TABLE AS ... WITH NO DATA), so each column has
# the aggregate's own result type (bigint, int[], jsonb, hll...).
package MailerAggTest;

use strict;
use warnings;
use Exporter 'import';
use JSON::PP ();
use Test::More ();
use MailerTest;

our @EXPORT = qw(agg_records agg_produce agg_select agg_spec agg_sink agg_same
  agg_want_keyed agg_uda_sql agg_builtins);

# A source table of $o{count} records, made anew: record i (seq i) has key
# k = 'k' || (i * 7 mod $o{keys}), except the last, the only record of key
# 'solo'; in the value:
#   u  a text, one of 5 + j for key kj (count(DISTINCT), hll)
#   b  a boolean, always true for k0, always false for k1
#   v  an integer from 0 to 22, from -25 to -21 for every 31st record,
#      missing (NULL) for every 19th
#   w  a text unique to the record ('w00042')
#   x  a number with decimals
#   ts the event time: $o{step} seconds apart (0.5 by default) from
#      2030-01-01, and $o{pause} seconds more after each $o{burst} records
#      (none by default), up to 4 s early, so $o{ooo} of 5 s holds every
#      record
sub agg_records
{
	my ($table, %o) = @_;
	my $n = $o{count};
	my $keys = $o{keys};
	my $step = $o{step} // 0.5;
	my $pause = $o{pause} ? "+ (i / $o{burst}) * $o{pause}" : '';
	psql(qq{DROP TABLE IF EXISTS $table;
	CREATE TABLE $table (seq int PRIMARY KEY, k text, ts timestamptz, value jsonb);
	INSERT INTO $table
	SELECT i, k, ts, jsonb_strip_nulls(jsonb_build_object('k', k, 'seq', i, 'ts', ts,
		'u', 'u' || (i * 31 % (5 + i * 7 % $keys)),
		'b', CASE k WHEN 'k0' THEN true WHEN 'k1' THEN false ELSE i / 2 % 5 <> 0 END,
		'v', CASE WHEN i % 19 = 0 THEN NULL WHEN i % 31 = 0 THEN i % 5 - 25 ELSE i * 37 % 23 END,
		'w', 'w' || lpad(i::text, 5, '0'),
		'x', round((i * 53 % 101) / 7.0, 4)))
	  FROM (SELECT i, CASE WHEN i = $n THEN 'solo' ELSE 'k' || (i * 7 % $keys) END AS k,
				   timestamptz '2030-01-01 00:00:00+00' + (i * $step $pause - (i * 13 % 9) * 0.5) * interval '1 second' AS ts
			  FROM generate_series(1, $n) i) r});
}

# The built-in aggregates of issue 19's list over agg_records' fields, as
# [column, call] pairs, beside the fast count(*); 'float' marks those
# compared rounded.  FILTER sends sum to the general path.
sub agg_builtins
{
	return (
		[ n  => 'count(*)' ],
		[ cd => "count(DISTINCT value->>'u')" ],
		[ ba => "bool_and((value->>'b')::boolean)" ],
		[ bo => "bit_or((value->>'v')::int)" ],
		[ sa => "string_agg(value->>'w', ',' ORDER BY value->>'w')" ],
		[ aa => "array_agg((value->>'v')::int ORDER BY (value->>'v')::int)" ],
		[ ja => "jsonb_agg(value->'v' ORDER BY (value->>'seq')::int)" ],
		[ jo => "jsonb_object_agg(value->>'w', (value->>'v')::int)" ],
		[ sd => "stddev((value->>'v')::float8)", 'float' ],
		[ va => "variance((value->>'v')::numeric)" ],
		[ co => "corr((value->>'v')::float8, (value->>'x')::float8)", 'float' ],
		[ cf => "count(*) FILTER (WHERE (value->>'v')::int > 5)" ],
		[ sf => "sum((value->>'v')::int) FILTER (WHERE value->>'b' = 'true')" ],
	);
}

# Produce the records of $table WHERE $where to $topic, in seq order, keyed
# by k (one key's records go to one partition, in order).
sub agg_produce
{
	my ($topic, $table, $where) = @_;
	$where //= 'true';
	kcat_produce($topic, psql("SELECT k || E'\\t' || value::text FROM $table WHERE $where ORDER BY seq") . "\n");
}

# The aggregates' select list: "call AS col, ...".
sub agg_select
{
	my ($aggs) = @_;
	return join(",\n\t\t", map { "$_->[1] AS $_->[0]" } @$aggs);
}

# SQL's answer of a keyed job (no window) over the records WHERE $where.
sub agg_want_keyed
{
	my ($table, $aggs, $where) = @_;
	$where //= 'true';
	return "SELECT k, " . agg_select($aggs) . "\n\t  FROM $table WHERE $where GROUP BY k";
}

# A sink table typed by SQL's answer $want, keyed by $key (the key fields,
# and window_start for a window).
sub agg_sink
{
	my ($table, $want, $key) = @_;
	psql("DROP TABLE IF EXISTS $table; CREATE TABLE $table AS $want WITH NO DATA;
		ALTER TABLE $table ADD PRIMARY KEY ($key)");
}

# The job's spec: keyed by k, the aggregates of $aggs, into $o{table}.
# %o: topic, table, backend, window (the window step's object as JSON
# text; with it the event time is value's ts, and $o{ooo} of out of
# orderness), on_error, interval (checkpoint), steps (JSON text of steps
# before key_by).
sub agg_spec
{
	my ($aggs, %o) = @_;
	my $json = JSON::PP->new->canonical;
	my $agg = '{' . join(', ', map { $json->encode($_->[0]) . ': ' . $json->encode($_->[1]) } @$aggs) . '}';
	my @steps = grep { defined } ($o{steps}, q[{"key_by": {"k": "value->>'k'"}}],
		$o{window} ? qq[{"window": $o{window}}] : undef, qq[{"aggregate": $agg}]);
	my $time = $o{window}
	  ? qq["event_time": "(value->>'ts')::timestamptz", "watermark": {"max_out_of_orderness": "@{[ $o{ooo} // '5 seconds' ]}"},]
	  : '';
	my $on_error = $o{on_error} ? qq(, "on_error": "$o{on_error}") : '';
	return qq[{"source": {"type": "kafka", "brokers": "$MailerTest::BROKERS", "topic": "$o{topic}", "start": "earliest"},
	 $time
	 "steps": [@{[ join(', ', @steps) ]}],
	 "sink": {"type": "table", "table": "$o{table}"},
	 "checkpoint": {"interval": "@{[ $o{interval} // '200 milliseconds' ]}"},
	 "state": {"backend": "$o{backend}"}$on_error}];
}

# The rows of $got (a table) and of SQL's answer $want are the same; the
# columns of the aggregates marked 'float' compared rounded to 9 decimals
# (a float's sum depends on the order of the additions).  $where filters
# $got (e.g. a key that only closes the windows).
sub agg_same
{
	my ($got, $want, $aggs, $name, %o) = @_;
	my $cols = join(', ', ($o{group} // 'k'),
		map { $_->[2] && $_->[2] eq 'float' ? "round($_->[0]::numeric, 9) AS $_->[0]" : $_->[0] } @$aggs);
	my $where = $o{where} // 'true';
	same_rows("SELECT $cols FROM $got WHERE $where", "SELECT $cols FROM ($want) w", $name);
	Test::More::cmp_ok(psql("SELECT count(*) FROM $got WHERE $where"), '>', 0, "$name: rows were written");
}

# Two user-defined aggregates, owned by whoever runs this SQL:
#   ${p}_stats(int), in SQL: a bigint[] state {values, sum} from INITCOND
#     '{0,0}', a combine function, and a final function that says as whom
#     it ran ('3 values, sum 12 as alice');
#   ${p}_squares(int), in PL/pgSQL, without a combine function: the sum
#     of the squares, raising an error when its transition function runs
#     as another role than $owner.
sub agg_uda_sql
{
	my ($p, $owner) = @_;
	return qq{
	DROP AGGREGATE IF EXISTS ${p}_stats(int), ${p}_squares(int);
	CREATE OR REPLACE FUNCTION ${p}_stats_step(s bigint[], v int) RETURNS bigint[]
		LANGUAGE sql IMMUTABLE STRICT AS \$\$SELECT ARRAY[s[1] + 1, s[2] + v]\$\$;
	CREATE OR REPLACE FUNCTION ${p}_stats_combine(a bigint[], b bigint[]) RETURNS bigint[]
		LANGUAGE sql IMMUTABLE STRICT AS \$\$SELECT ARRAY[a[1] + b[1], a[2] + b[2]]\$\$;
	CREATE OR REPLACE FUNCTION ${p}_stats_final(s bigint[]) RETURNS text
		LANGUAGE sql STABLE AS \$\$SELECT s[1] || ' values, sum ' || s[2] || ' as ' || current_user\$\$;
	CREATE AGGREGATE ${p}_stats(int) (SFUNC = ${p}_stats_step, STYPE = bigint[], INITCOND = '{0,0}',
		COMBINEFUNC = ${p}_stats_combine, FINALFUNC = ${p}_stats_final);
	CREATE OR REPLACE FUNCTION ${p}_squares_step(s bigint, v int) RETURNS bigint
		LANGUAGE plpgsql STABLE AS \$\$
	BEGIN
		IF current_user <> '$owner' THEN
			RAISE EXCEPTION 'the transition function of ${p}_squares ran as %, not as $owner', current_user;
		END IF;
		RETURN coalesce(s, 0) + coalesce(v::bigint * v, 0);
	END \$\$;
	CREATE AGGREGATE ${p}_squares(int) (SFUNC = ${p}_squares_step, STYPE = bigint);
	};
}

1;
