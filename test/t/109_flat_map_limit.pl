# A flat_map that makes an unbounded number of records from one input
# record (generate_series up to 10^12) used to grow the worker's memory
# until it ran out (53200, an environment error: the same record replayed at
# every restart) or the OOM-killer restarted the server.  Now the records
# the flat_map steps make from one input record are capped by
# mailer.max_outputs_per_record (default 100000, reloadable): one record
# over it fails with 54000, is a dead letter naming the step and the
# setting, and the job goes on with every other record exactly once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t109');
psql("ALTER SYSTEM RESET mailer.max_outputs_per_record; SELECT pg_reload_conf();");
wait_for_sql('the default limit', 'SHOW mailer.max_outputs_per_record', '100000', 30);
psql("CREATE TABLE t109_rows (order_id bigint, value bigint);
      CREATE TABLE t109_small (order_id bigint, value bigint);");

# Record 7 would make 10^12 records, 11 one more than the limit, 12 exactly
# the limit; every other record o makes o % 4 + 1.
my $count = q{CASE order_id WHEN 7 THEN 1000000000000 WHEN 11 THEN 100001 WHEN 12 THEN 100000
	ELSE order_id % 4 + 1 END};
sub job
{
	my ($name, $table, $events) = @_;
	my $n = $count =~ s/\s+/ /gr;
	psql(qq{SELECT mailer.create_job('$name', \$spec\$
	  {"source": {"type": "generator", "events": $events, "keys": 3, "seed": 109},
	   "steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}},
	             {"flat_map": "generate_series(1, $n)"}],
	   "sink": {"type": "table", "table": "$table"},
	   "checkpoint": {"interval": "100 milliseconds"}}\$spec\$)});
}

# The rows a job should have written: each record's outputs 1..n, once.
sub exact
{
	my ($table, $events, $limit, $label) = @_;
	my $expected = "SELECT o AS order_id, v AS value FROM generate_series(0, $events - 1) o,
		LATERAL (SELECT $count AS n FROM (SELECT o AS order_id) r) c, generate_series(1, c.n) v
		WHERE c.n <= $limit";
	is(psql("SELECT count(*) FROM (($expected) EXCEPT ALL (SELECT order_id, value FROM $table)) d") . '|'
		  . psql("SELECT count(*) FROM ((SELECT order_id, value FROM $table) EXCEPT ALL ($expected)) d"),
		'0|0', "$label: every output of every other record, once");
}

job('j109', 't109_rows', 30);
is(wait_job('j109'), 'finished', 'the job with the exploding records finishes');
exact('t109_rows', 30, 100000, 'default limit');
is(psql("SELECT count(*) FROM t109_rows WHERE order_id = 12"), '100000',
	'a record that makes exactly mailer.max_outputs_per_record records passes');
my $dl = dead_letters('j109');
is(join(',', map { "$_->{offset}:$_->{stage}" } @$dl), '7:flat_map,11:flat_map',
	'the records over the limit are dead letters of step flat_map, and only those');
like($_->{error}, qr/^steps\[1\] \(flat_map\) made more than 100000 records from one input record: The limit is mailer\.max_outputs_per_record\.$/,
	"the dead letter names the step and the setting: $_->{error}") for @$dl;
is(psql("SELECT count(*) FROM t109_rows WHERE order_id IN (7, 11)"), '0',
	'nothing of a record over the limit reached the sink');
my $m = accounting_ok('j109');
is("$m->{records_in} $m->{records_dead_lettered}", '30 2', '30 records read, 2 dead-lettered');
is(job_info('j109')->{last_error}, undef, 'no error: the job never restarted for them');

# The setting is reloadable and bounded.
like(psql_fails("ALTER SYSTEM SET mailer.max_outputs_per_record = 0"), qr/outside the valid range/,
	'a limit below 1 is refused');
psql("ALTER SYSTEM SET mailer.max_outputs_per_record = 3; SELECT pg_reload_conf();");
wait_for_sql('the new limit', 'SHOW mailer.max_outputs_per_record', '3', 30);
job('j109_small', 't109_small', 20);
is(wait_job('j109_small'), 'finished', 'a job under a limit of 3 finishes');
exact('t109_small', 20, 3, 'limit 3');
is(join(',', map { $_->{offset} } @{ dead_letters('j109_small') }), '3,7,11,12,15,19',
	'the records that make 4 or more are dead letters');
like(dead_letters('j109_small')->[0]{error}, qr/made more than 3 records/, 'with the limit in force');

psql("ALTER SYSTEM RESET mailer.max_outputs_per_record; SELECT pg_reload_conf();");
psql("SELECT mailer.drop_job('j109'); SELECT mailer.drop_job('j109_small');");
drop_tables('t109');
done_testing();
