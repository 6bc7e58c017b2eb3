# A record that fails in the keyed stage changes no state (issue 11 review,
# exactly once).  Every event of a generator adds 1e308 to a float sum: the
# first fits, the sum of two overflows, so every later record is a dead
# letter.  Before, the aggregates before the failing one (count(*)) and the
# windows before the failing one had already counted it: the row's count
# must be the number of records that were not dead-lettered, and the dead
# letters exactly the failing records.  Tumbling, sliding (two windows per
# record), session windows, a session merge that overflows, and no window
# with a numeric sum that overflows; a record a flat_map made into two
# outputs, the second of which overflows; on both state backends.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my $gen = q{"source": {"type": "generator", "events": 10, "keys": 1,
	"start_time": "2030-01-01 00:00:00+00", "step": "1 second"}};
my $key = q{{"key_by": {"k": "'x'"}}};
my $float_aggs = q{{"aggregate": {"n": "count(*)", "t": "sum(1e308::float8)"}}};

sub window_table
{
	my ($table) = @_;
	psql("DROP TABLE IF EXISTS $table;
	      CREATE TABLE $table (k text, window_start timestamptz, window_end timestamptz,
	        n bigint, t float8, PRIMARY KEY (k, window_start))");
}

sub job
{
	my ($name, $spec) = @_;
	psql(qq{SELECT mailer.create_job('$name', \$spec\${$spec}\$spec\$)});
	is(wait_job($name), 'finished', "$name ends finished");
}

# The offsets of a job's dead letters, and their stages.
sub dead_offsets
{
	my ($name) = @_;
	return join(',', map { "$_->{offset}:$_->{stage}" } @{ dead_letters($name) });
}

sub rows
{
	my ($table) = @_;
	return psql(qq{SELECT string_agg(format('%s %s %s', to_char(window_start, 'HH24:MI:SS'),
		to_char(window_end, 'HH24:MI:SS'), n), ', ' ORDER BY window_start) FROM $table});
}

my $failing = join(',', map { "$_:aggregate" } 1 .. 9);

for my $backend (qw(rocksdb memory))
{
	my $b = substr($backend, 0, 1);
	my $state = qq{"state": {"backend": "$backend"}};

	window_table("t091_tumbling_$b");
	job("t091_tumbling_$b", qq{$gen, "steps": [$key, {"window": {"type": "tumbling", "size": "1 hour"}}, $float_aggs],
		"sink": {"type": "table", "table": "t091_tumbling_$b"}, $state});
	is(rows("t091_tumbling_$b"), '00:00:00 01:00:00 1', "$backend tumbling: the window counts the one record that was not dead-lettered");
	is(psql("SELECT t FROM t091_tumbling_$b"), '1e+308', "$backend tumbling: its sum");
	is(dead_offsets("t091_tumbling_$b"), $failing, "$backend tumbling: the dead letters are records 1 to 9");

	window_table("t091_sliding_$b");
	job("t091_sliding_$b", qq{$gen, "steps": [$key, {"window": {"type": "sliding", "size": "2 hours", "slide": "1 hour"}}, $float_aggs],
		"sink": {"type": "table", "table": "t091_sliding_$b"}, $state});
	is(rows("t091_sliding_$b"), '23:00:00 01:00:00 1, 00:00:00 02:00:00 1',
		"$backend sliding: both windows of the records count only record 0");
	is(dead_offsets("t091_sliding_$b"), $failing, "$backend sliding: the dead letters are records 1 to 9");

	window_table("t091_session_$b");
	job("t091_session_$b", qq{$gen, "steps": [$key, {"window": {"type": "session", "gap": "1 minute"}}, $float_aggs],
		"sink": {"type": "table", "table": "t091_session_$b"}, $state});
	is(rows("t091_session_$b"), '00:00:00 00:01:00 1',
		"$backend session: record 0 alone, the failed records did not extend the session");
	is(dead_offsets("t091_session_$b"), $failing, "$backend session: the dead letters are records 1 to 9");

	# Sessions [0, 15 min) and [20, 35 min) hold 1e308 each; record 2 at 10
	# min would merge them, and the merged sum overflows.
	window_table("t091_merge_$b");
	job("t091_merge_$b", qq{"source": {"type": "generator", "events": 3, "keys": 1,
		"start_time": "2030-01-01 00:00:00+00", "step": "1 second"},
		"event_time": "CASE (value->>'order_id')::int WHEN 0 THEN timestamptz '2030-01-01 00:00:00+00' WHEN 1 THEN timestamptz '2030-01-01 00:20:00+00' ELSE timestamptz '2030-01-01 00:10:00+00' END",
		"watermark": {"max_out_of_orderness": "1 hour"},
		"steps": [$key, {"window": {"type": "session", "gap": "15 minutes"}},
			{"aggregate": {"n": "count(*)", "t": "sum(CASE WHEN (value->>'order_id')::int < 2 THEN 1e308 ELSE 0 END::float8)"}}],
		"sink": {"type": "table", "table": "t091_merge_$b"}, $state});
	is(rows("t091_merge_$b"), '00:00:00 00:15:00 1, 00:20:00 00:35:00 1',
		"$backend session merge: the two sessions stay as they were, one record each");
	is(dead_offsets("t091_merge_$b"), '2:aggregate', "$backend session merge: the merging record is the dead letter");

	# A flat_map makes two outputs of each record, 5e307 each: record 0 fits
	# (1e308), every later record's second output overflows, and its first
	# output must not stay counted (nor extend the session).
	for my $w (['tumbling', '{"type": "tumbling", "size": "1 hour"}', '00:00:00 01:00:00 2'],
		['flat_session', '{"type": "session", "gap": "1 minute"}', '00:00:00 00:01:00 2'])
	{
		my ($kind, $window, $want) = @$w;
		my $t = "t091_flat_${kind}_$b";
		window_table($t);
		job($t, qq{$gen, "steps": [{"flat_map": "jsonb_array_elements(jsonb_build_array(value, value))"}, $key,
			{"window": $window}, {"aggregate": {"n": "count(*)", "t": "sum(5e307::float8)"}}],
			"sink": {"type": "table", "table": "$t"}, $state});
		is(rows($t), $want, "$backend flat_map, $kind: only record 0's two outputs count");
		is(dead_offsets($t), $failing, "$backend flat_map, $kind: the dead letters are records 1 to 9");
	}

	# Sliding windows with a numeric sum, kept as panes of 2 hours / 1 hour:
	# a pane's sum must stay a factor 3 under numeric's limit (1e131072),
	# so that no window combining panes can overflow.  A record's second
	# output passes that, and its first output must leave no trace in the
	# panes, the timers or the windows to emit.  1.5e131071 per output:
	# record 0 sums to 3e131071 (x 3 fits), 4.5e131071 does not; one record
	# of 3e131071 fits, two do not.
	for my $kind ('pane', 'flat_pane')
	{
		my $t = "t091_${kind}_$b";
		my $flat = $kind eq 'flat_pane' ? '{"flat_map": "jsonb_array_elements(jsonb_build_array(value, value))"}, ' : '';
		my $x = $kind eq 'flat_pane' ? '1.5e131071' : '3e131071';
		psql("DROP TABLE IF EXISTS $t;
		      CREATE TABLE $t (k text, window_start timestamptz, window_end timestamptz,
		        n bigint, s numeric, PRIMARY KEY (k, window_start))");
		job($t, qq{$gen, "steps": [$flat$key, {"window": {"type": "sliding", "size": "2 hours", "slide": "1 hour"}},
			{"aggregate": {"n": "count(*)", "s": "sum('$x'::numeric)"}}],
			"sink": {"type": "table", "table": "$t"}, $state});
		my $n = $kind eq 'flat_pane' ? 2 : 1;
		is(rows($t), "23:00:00 01:00:00 $n, 00:00:00 02:00:00 $n", "$backend $kind: both windows count only record 0");
		is(psql("SELECT bool_and(s = $n * '$x'::numeric) FROM $t"), 't', "$backend $kind: and sum only it");
		is(dead_offsets($t), $failing, "$backend $kind: the dead letters are records 1 to 9");
	}

	# Records an hour apart, each in a pane of its own (2 hours / 1 hour),
	# 4e131071 each: two records' sum fits, but a pane's sum is within a
	# factor 3 of numeric's limit.  Without that check a window combining
	# panes could overflow outside any record and fail the job on every
	# replay; with it, each record is refused with numeric's own error and
	# the job goes on (one by one, these records would all have fitted:
	# the difference the check makes, only this close to the limit).  Also
	# avg(numeric).
	for my $agg (['numeric', "sum('4e131071'::numeric)", 'numeric'], ['avgnum', "avg('4e131071'::numeric)", 'numeric'])
	{
		my ($name, $expr, $type) = @$agg;
		my $t = "t091_over_${name}_$b";
		my $hourly = $gen =~ s/"step": "1 second"/"step": "1 hour"/r;
		psql("DROP TABLE IF EXISTS $t;
		      CREATE TABLE $t (k text, window_start timestamptz, window_end timestamptz,
		        n bigint, s $type, PRIMARY KEY (k, window_start))");
		job($t, qq{$hourly, "steps": [$key, {"window": {"type": "sliding", "size": "2 hours", "slide": "1 hour"}},
			{"aggregate": {"n": "count(*)", "s": "$expr"}}],
			"sink": {"type": "table", "table": "$t"}, $state});
		is(psql("SELECT count(*) FROM $t"), '0', "$backend $name near the limit in panes: no window");
		is(dead_offsets($t), join(',', map { "$_:aggregate" } 0 .. 9),
			"$backend $name near the limit in panes: every record is a dead letter");
		is(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.job j USING (job_id)
			  WHERE j.name = '$t' AND d.error LIKE '%overflows numeric format%'"), '10',
			"$backend $name near the limit in panes: with numeric's overflow error");
	}

	psql("DROP TABLE IF EXISTS t091_flat_plain_$b;
	      CREATE TABLE t091_flat_plain_$b (k text PRIMARY KEY, n bigint, t float8)");
	job("t091_flat_plain_$b", qq{$gen, "steps": [{"flat_map": "jsonb_array_elements(jsonb_build_array(value, value))"}, $key,
			{"aggregate": {"n": "count(*)", "t": "sum(5e307::float8)"}}],
		"sink": {"type": "table", "table": "t091_flat_plain_$b"}, $state});
	is(psql("SELECT n || ' ' || t FROM t091_flat_plain_$b"), '2 1e+308', "$backend flat_map, no window: only record 0's two outputs count");
	is(dead_offsets("t091_flat_plain_$b"), $failing, "$backend flat_map, no window: the dead letters are records 1 to 9");

	# No window: count(*), then a numeric sum that overflows numeric, then a float sum.
	psql("DROP TABLE IF EXISTS t091_plain_$b;
	      CREATE TABLE t091_plain_$b (k text PRIMARY KEY, n bigint, s numeric, t float8)");
	job("t091_plain_$b", qq{$gen, "steps": [$key,
			{"aggregate": {"n": "count(*)", "s": "sum('9e131071'::numeric)", "t": "sum(1::float8)"}}],
		"sink": {"type": "table", "table": "t091_plain_$b"}, $state});
	is(psql("SELECT n || ' ' || t || ' ' || (s = '9e131071'::numeric) FROM t091_plain_$b"), '1 1 true',
		"$backend no window: every aggregate counts the one record that was not dead-lettered");
	is(dead_offsets("t091_plain_$b"), $failing, "$backend no window: the dead letters are records 1 to 9");
	is(job_metric("t091_plain_$b", 'records_dead_lettered'), '9', "$backend no window: 9 records dead-lettered");
}

psql("SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 't091%'");
psql("DROP TABLE " . join(', ', map { my $b = $_; map { "t091_${_}_$b" } qw(tumbling sliding session merge plain flat_tumbling flat_flat_session flat_plain pane flat_pane over_numeric over_avgnum) } qw(r m)));
done_testing();
