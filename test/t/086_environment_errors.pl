# Errors from the environment are not the record's fault (issue 11, item
# 10).  A job's filter reads a lookup table through a function; SELECT on it
# is revoked from the job's owner.  Every record then fails with "permission
# denied", but none is dead-lettered: the batch fails, the job is
# restarting with the error in last_error and its position does not move.
# Once SELECT is granted back it goes on, and every record is in the sink
# exactly once.  A record the function itself refuses (RAISE EXCEPTION) is a
# dead letter, as before.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t086');
my $owner = 't086_owner';
drop_roles($owner);
psql("SET client_min_messages = warning;
      DROP FUNCTION IF EXISTS t086_allowed(text);
      CREATE ROLE $owner LOGIN;
      CREATE TABLE t086_lookup (customer_id text PRIMARY KEY, allowed bool);
      INSERT INTO t086_lookup SELECT 'c' || i, i <> 4 FROM generate_series(0, 4) i;
      CREATE FUNCTION t086_allowed(c text) RETURNS bool LANGUAGE plpgsql STABLE AS \$\$
      BEGIN
        IF c = 'refused' THEN
          RAISE EXCEPTION 'customer % is refused', c;
        END IF;
        RETURN (SELECT allowed FROM t086_lookup WHERE customer_id = c);
      END \$\$;
      CREATE TABLE t086_rows (seq bigint, customer_id text);
      GRANT SELECT ON t086_lookup TO $owner;
      GRANT INSERT ON t086_rows TO $owner;");

my $topic = unique_name('t086');
kafka('create-topic', $topic, 2);
my $produced = 0;
# Orders seq $produced.. for customers c0..c4; c4 is filtered out.
sub produce
{
	my ($n, @extra) = @_;
	my @lines = map { "k$_\t{\"seq\": $_, \"customer_id\": \"c" . ($_ % 5) . "\"}" }
	  $produced .. $produced + $n - 1;
	kcat_produce($topic, [ @lines, @extra ]);
	$produced += $n;
}

psql_as($owner, "SELECT mailer.create_job('j086', \$\$
  {\"source\": {\"type\": \"kafka\", \"brokers\": \"$BROKERS\", \"topic\": \"$topic\"},
   \"steps\": [{\"filter\": \"t086_allowed(value->>'customer_id')\"},
             {\"map\": {\"seq\": \"(value->>'seq')::bigint\", \"customer_id\": \"value->>'customer_id'\"}}],
   \"sink\": {\"type\": \"table\", \"table\": \"t086_rows\"},
   \"checkpoint\": {\"interval\": \"200 milliseconds\"}}\$\$)");

sub exact
{
	my ($label) = @_;
	is(psql("SELECT count(*), count(DISTINCT seq) FROM t086_rows"),
		psql("SELECT count(*) || '|' || count(*) FROM generate_series(0, $produced - 1) i WHERE i % 5 <> 4"),
		"$label: each allowed record once");
	is(psql("SELECT count(*) FROM generate_series(0, $produced - 1) i
	         WHERE i % 5 <> 4 AND NOT EXISTS (SELECT FROM t086_rows WHERE seq = i)"), '0',
		"$label: none missing");
}

produce(200, "kr\t{\"seq\": -1, \"customer_id\": \"refused\"}");
is(wait_job('j086'), 'running', 'the job caught up');
exact('before the revoke');
my $dl = dead_letters('j086');
is(scalar @$dl, 1, 'the record the function refuses is a dead letter');
like($dl->[0]{error} // '', qr/customer refused is refused/, 'with the function\'s error');

# SELECT revoked: every record would fail the filter.
my $restarts = job_info('j086')->{restarts};
psql("REVOKE SELECT ON t086_lookup FROM $owner");
produce(200);
my $info = wait_until('j086 restarting after the revoke', sub {
	my $i = job_info('j086');
	return $i if $i->{state} eq 'restarting' && $i->{restarts} > $restarts;
	return undef;
}, 60);
like($info->{last_error}, qr/permission denied for table t086_lookup/,
	"last_error names the permission problem: $info->{last_error}");
is(scalar @{ dead_letters('j086') }, 1, 'no record was dead-lettered for it');
is(psql("SELECT count(*) FROM t086_rows WHERE seq >= 200"), '0', 'nothing of the failing batch was written');
is(job_metrics('j086')->{records_dead_lettered}, 1, 'mailer.metrics counts no dead letter for it either');

psql("GRANT SELECT ON t086_lookup TO $owner");
wait_job_state('j086', qr/^running$/, 120);
is(wait_job('j086'), 'running', 'the job caught up after the grant');
exact('after the grant');
is(scalar @{ dead_letters('j086') }, 1, 'still only the refused record is a dead letter');

psql("SELECT mailer.drop_job('j086')");
kafka('delete-topic', $topic);
psql("SET client_min_messages = warning; DROP OWNED BY $owner CASCADE; DROP ROLE $owner;");
drop_tables('t086');
psql("DROP FUNCTION IF EXISTS t086_allowed(text)");
done_testing();
