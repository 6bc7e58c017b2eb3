# The per-key limit of general aggregates' state and bad input (issue 19).
# With mailer.aggregate_state_limit at 4 kB, a key whose array_agg of
# 300-byte texts grows past it has its records from the one that would
# cross the limit on dead-lettered (on_error dead_letter, the default),
# each with an error naming the limit, while the other keys go on exactly;
# with on_error fail the job fails saying so.  A record whose aggregate
# argument raises an error (a cast of 'x' to int) is a dead letter and
# changes nothing.  Both backends; the rows equal SQL's GROUP BY over the
# records that are not dead letters.  Last, a record whose transition
# function raises an error (jsonb_object_agg of a NULL key), in an
# aggregate that keeps its inputs, is a dead letter too: the transition
# runs when the record comes, not first when the result is made.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerAggTest;
use Test::More;

my $topic = fresh_topic('t165', 1);
my $fail_topic = unique_name('t165f');
kafka('create-topic', $fail_topic, 1);
psql("ALTER SYSTEM SET mailer.aggregate_state_limit = '4kB'");
psql("SELECT pg_reload_conf()");
END { eval { psql('ALTER SYSTEM RESET mailer.aggregate_state_limit'); psql('SELECT pg_reload_conf()') } }
wait_for_sql('the limit reloaded', 'SHOW mailer.aggregate_state_limit', '4kB', 30);

# Record i: key 'big' (every other one, a 300-byte pad) or a, b, c (a
# 10-byte pad); seq 31 (key a) has v 'x'.
psql(q{DROP TABLE IF EXISTS t165_src;
	CREATE TABLE t165_src (seq int PRIMARY KEY, k text, value jsonb);
	INSERT INTO t165_src
	SELECT i, k, jsonb_strip_nulls(jsonb_build_object('k', k, 'seq', i,
		'v', CASE WHEN i = 31 THEN 'x' ELSE (i % 7)::text END,
		'w', 'w' || i,
		'pad', repeat(CASE WHEN k = 'big' THEN 'P' ELSE 'p' END, CASE WHEN k = 'big' THEN 300 ELSE 10 END)))
	  FROM (SELECT i, CASE WHEN i % 2 = 0 THEN 'big' ELSE (ARRAY['a', 'b', 'c'])[i / 2 % 3 + 1] END AS k
			  FROM generate_series(1, 100) i) r});
is(psql("SELECT k FROM t165_src WHERE seq = 31"), 'a', 'the bad record is of key a');

my @aggs = (
	[ n    => 'count(*)' ],
	[ pads => "array_agg(value->>'pad' ORDER BY (value->>'seq')::int)" ],
	[ vs   => "array_agg((value->>'v')::int ORDER BY (value->>'seq')::int)" ],
	[ jo   => "jsonb_object_agg(value->>'w', (value->>'seq')::int)" ],
);
# SQL's answer over the good records, for the table's column types.
my $good = "seq <> 31";
my %job = map { $_ => "t165_$_" } qw(rocksdb memory);
for my $be (sort keys %job)
{
	agg_sink($job{$be}, agg_want_keyed('t165_src', \@aggs, $good), 'k');
	psql("SELECT mailer.create_job('$job{$be}', \$spec\$"
		  . agg_spec(\@aggs, topic => $topic, table => $job{$be}, backend => $be) . "\$spec\$)");
}
agg_sink('t165_fail', agg_want_keyed('t165_src', \@aggs, $good), 'k');
psql("SELECT mailer.create_job('t165_fail', \$spec\$"
	  . agg_spec(\@aggs, topic => $fail_topic, table => 't165_fail', backend => 'memory', on_error => 'fail') . "\$spec\$)");

agg_produce($topic, 't165_src');
agg_produce($fail_topic, 't165_src', "k = 'big'");

for my $be (sort keys %job)
{
	my $j = $job{$be};
	is(wait_job($j, 60), 'running', "$be read every record");
	my @dl = @{ dead_letters($j) };
	# One partition, produced in seq order: the offset is seq - 1.
	my %seq = map { ($_->{offset} + 1, $_) } @dl;
	ok($seq{31}, "$be: the record with v 'x' is a dead letter")
	  or diag(explain([ map { "$_->{offset}: $_->{error}" } @dl ]));
	like($seq{31}{error} // '', qr/invalid input syntax for type integer: "x"/, "$be: ... with the cast's error");
	my @big = sort { $a <=> $b } grep { $_ != 31 } keys %seq;
	cmp_ok(scalar(@big), '>', 0, "$be: records of the key over the limit are dead letters");
	is(psql("SELECT count(*) FROM t165_src WHERE seq IN (" . join(',', 0, @big) . ") AND k <> 'big'"), '0',
		"$be: ... of that key only");
	is(scalar(grep { $seq{$_}{error} !~ /aggregate_state_limit/ } @big), 0,
		"$be: ... each with an error naming mailer.aggregate_state_limit")
	  or diag($seq{ $big[0] }{error});
	is(psql("SELECT count(*) FROM t165_src WHERE k = 'big' AND seq > " . ($big[0] // 0)),
		scalar(@big) - 1, "$be: ... from the first over the limit on: the state only grows");
	my $accepted = "seq NOT IN (" . join(',', keys %seq) . ")";
	agg_same($j, agg_want_keyed('t165_src', \@aggs, $accepted), \@aggs,
		"$be: every key equals SQL's GROUP BY over the records that are not dead letters");
	cmp_ok(psql("SELECT sum(octet_length(p)) FROM $j, unnest(pads) p WHERE k = 'big'"), '<=', 4096,
		"$be: the big key's state stayed within the limit");
	accounting_ok($j);
}

my $info = wait_job_state('t165_fail', qr/^failed$/, 60);
like($info->{last_error}, qr/aggregate_state_limit/, "on_error fail: the job fails naming the limit: $info->{last_error}");
is(psql("SELECT count(*) FROM mailer.dead_letters"), scalar(@{ dead_letters($job{rocksdb}) }) + scalar(@{ dead_letters($job{memory}) }),
	'on_error fail: no dead letter of its own');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");

# A transition function's error: key b's records, the fifth without w.
# jsonb_object_agg's state is internal without serialization, so the key's
# inputs are kept; a NULL key must fail when its record comes (a dead
# letter), not when the row is made at the checkpoint, where no record is
# to blame and the job would fail on every replay.
my $trans_topic = unique_name('t165t');
kafka('create-topic', $trans_topic, 1);
psql(q{DROP TABLE IF EXISTS t165_trans_src;
	CREATE TABLE t165_trans_src (seq int PRIMARY KEY, k text, value jsonb);
	INSERT INTO t165_trans_src
	SELECT i, 'b', jsonb_strip_nulls(jsonb_build_object('k', 'b', 'seq', i, 'w', CASE WHEN i <> 5 THEN 'w' || i END))
	  FROM generate_series(1, 10) i});
my @trans_aggs = ([ n => 'count(*)' ], [ jo => "jsonb_object_agg(value->>'w', (value->>'seq')::int)" ]);
agg_sink('t165_trans', agg_want_keyed('t165_trans_src', \@trans_aggs, 'seq <> 5'), 'k');
psql("SELECT mailer.create_job('t165_trans', \$spec\$"
	  . agg_spec(\@trans_aggs, topic => $trans_topic, table => 't165_trans', backend => 'memory') . "\$spec\$)");
agg_produce($trans_topic, 't165_trans_src');
my $state = eval { wait_job('t165_trans', 20) } // 'not caught up: ' . (job_info('t165_trans')->{last_error} // '');
is($state, 'running', 'a transition function that fails: the job goes on');
my @dl = @{ dead_letters('t165_trans') };
is(join(',', map { $_->{offset} } @dl), '4', '... the record is a dead letter');
like($dl[0]{error} // '', qr/field name must not be null/, '... with the transition function\'s error');
agg_same('t165_trans', agg_want_keyed('t165_trans_src', \@trans_aggs, 'seq <> 5'), \@trans_aggs,
	'... and the key has the other records');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
kafka('delete-topic', $_) for ($topic, $fail_topic, $trans_topic);
done_testing();
