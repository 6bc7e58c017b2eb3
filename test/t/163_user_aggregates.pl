# User-defined aggregates in a job (issue 19), owned by a superuser and run
# by a plain role's job: one in SQL (a bigint[] state from INITCOND, a
# combine function, a final function saying as whom it ran) and one in
# PL/pgSQL without a combine function (its transition function raises an
# error unless it runs as the job's owner).  A keyed job with both, on both
# backends, equals SQL's GROUP BY run as the owner, with no dead letter: the
# functions ran as the owner.  A session window needs a combine function:
# the PL/pgSQL one is refused there at create_job, naming the aggregate's
# JSON path, with a hint; the SQL one is accepted.  With EXECUTE on the
# aggregate revoked from PUBLIC, create_job as the plain role is refused
# with SQLSTATE 42501.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerAggTest;
use Test::More;

my $owner = 't163_owner';
fresh_with_owner('t163', $owner);
my $topic = unique_name('t163');
kafka('create-topic', $topic, 2);
psql(agg_uda_sql('t163', $owner));
agg_records('t163_src', count => 600, keys => 8);
psql("GRANT SELECT ON t163_src TO $owner");

my @aggs = (
	[ n  => 'count(*)' ],
	[ st => "t163_stats((value->>'v')::int)" ],
	[ sq => "t163_squares((value->>'v')::int)" ],
);
my $want = agg_want_keyed('t163_src', \@aggs);
my %job = map { $_ => "t163_$_" } qw(rocksdb memory);
for my $b (sort keys %job)
{
	agg_sink($job{$b}, $want, 'k');
	psql("GRANT SELECT, INSERT, UPDATE ON $job{$b} TO $owner");
	psql_as($owner, "SELECT mailer.create_job('$job{$b}', \$spec\$"
		  . agg_spec(\@aggs, topic => $topic, table => $job{$b}, backend => $b) . "\$spec\$)");
}
agg_produce($topic, 't163_src', 'seq <= 300');
is(wait_job($job{$_}, 60), 'running', "$_ read the first half") for sort keys %job;
agg_produce($topic, 't163_src', 'seq > 300');

# SQL's answer, as the owner: the PL/pgSQL transition function raises as anyone else.
my $rows = sub { "SELECT coalesce(string_agg(r::text, E'\\n' ORDER BY r::text), '') FROM ($_[0]) r" };
my $sql_answer = psql_as($owner, $rows->($want));
like($sql_answer, qr/^\(k0,\d+,"\d+ values, sum -?\d+ as $owner",\d+\)$/m, "SQL's answer as $owner");
for my $b (sort keys %job)
{
	is(wait_job($job{$b}, 60), 'running', "$b read every record");
	is(psql($rows->("SELECT k, n, st, sq FROM $job{$b}")), $sql_answer,
		"$b: both user-defined aggregates equal SQL's GROUP BY");
	is(psql("SELECT count(*) FROM $job{$b} WHERE st NOT LIKE '% as $owner'"), '0',
		"$b: the final function ran as the job's owner");
	is(job_metric($job{$b}, 'records_dead_lettered'), '0',
		"$b: no dead letter: the PL/pgSQL transition function ran as the job's owner");
	accounting_ok($job{$b});
}

# A session window merges sessions through the combine function.
sub session_spec
{
	my ($agg) = @_;
	return agg_spec([ [ n => 'count(*)' ], [ x => $agg ] ], topic => $topic, table => 't163_sessions',
		backend => 'memory', window => '{"type": "session", "gap": "10 seconds"}');
}
psql("CREATE TABLE t163_sessions (k text, window_start timestamptz, window_end timestamptz, n bigint, x text,
	PRIMARY KEY (k, window_start));
	GRANT SELECT, INSERT, UPDATE, DELETE ON t163_sessions TO $owner");
my $err = psql_fails_as($owner, "SELECT mailer.create_job('t163_no_combine', \$spec\$"
	  . session_spec("t163_squares((value->>'v')::int)") . "\$spec\$)");
like($err, qr/ERROR:\s+0A000:/, 'an aggregate without a combine function in a session window: refused, feature_not_supported');
like($err, qr/steps\[2\]\.aggregate\.x/, '... naming its JSON path');
like($err, qr/aggregate t163_squares has no combine function/, '... saying that it has no combine function');
like($err, qr/HINT:.*COMBINEFUNC/, '... with a hint');
is(psql("SELECT count(*) FROM mailer.jobs WHERE name = 't163_no_combine'"), '0', '... and no job is made');
like(psql_as($owner, "SELECT mailer.describe_job(\$spec\$" . session_spec("t163_stats((value->>'v')::int)") . "\$spec\$)"),
	qr/t163_stats/, 'the SQL aggregate, which has one, serves a session window');

# EXECUTE revoked: the plain role may not run the aggregate, nor make a job of it.
psql("SELECT mailer.drop_job('$job{$_}')") for sort keys %job;
psql("REVOKE EXECUTE ON FUNCTION t163_stats(int) FROM PUBLIC");
$err = psql_fails_as($owner, "SELECT mailer.create_job('t163_revoked', \$spec\$"
	  . agg_spec(\@aggs, topic => $topic, table => $job{memory}, backend => 'memory') . "\$spec\$)");
like($err, qr/ERROR:\s+42501:/, 'EXECUTE on the aggregate revoked: create_job refuses with SQLSTATE 42501');
like($err, qr/steps\[1\]\.aggregate\.st: permission denied for aggregate t163_stats/, '... naming the aggregate and its path');
like($err, qr/HINT:.*GRANT EXECUTE ON FUNCTION t163_stats\(integer\) TO $owner/, '... with a hint');
is(psql("SELECT count(*) FROM mailer.jobs WHERE name = 't163_revoked'"), '0', '... and no job is made');
psql("GRANT EXECUTE ON FUNCTION t163_stats(int) TO $owner");
like(psql_as($owner, "SELECT mailer.describe_job(\$spec\$"
		  . agg_spec(\@aggs, topic => $topic, table => $job{memory}, backend => 'memory') . "\$spec\$)"),
	qr/t163_stats/, 'granted to the owner again: accepted');

kafka('delete-topic', $topic);
done_testing();
