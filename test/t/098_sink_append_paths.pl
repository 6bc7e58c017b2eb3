# An append sink writes through table_multi_insert() where that is
# exactly what its INSERT would do, and through the INSERT elsewhere
# (connectors/sink_table.c).  Whichever path a table takes, a job's owner
# gets nothing it would not get from the INSERT: defaults are filled,
# NOT NULL, CHECK and unique indexes refuse the same rows (dead letters,
# the others written), a column privilege taken away fails the checkpoint,
# triggers run for every row, a default that reads the table sees the rows
# before it, and a partitioned table routes its rows.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $owner = 't098_owner';
# drop_tables() would meet the partitions after their parent went.
psql("DROP TABLE IF EXISTS t098_part");
fresh_with_owner('t098', $owner);
psql("CREATE TABLE t098_fast (
        id bigint GENERATED ALWAYS AS IDENTITY,
        order_id int NOT NULL CHECK (order_id % 10 <> 7),
        customer text,
        u int UNIQUE,
        tag text DEFAULT 'd',
        at timestamptz DEFAULT clock_timestamp(),
        nothing int);
      GRANT INSERT ON t098_fast TO $owner;
      CREATE TABLE t098_log (order_id int, who name);
      CREATE OR REPLACE FUNCTION t098_upper() RETURNS trigger LANGUAGE plpgsql AS \$\$
      BEGIN
        NEW.customer := upper(NEW.customer);
        INSERT INTO t098_log VALUES (NEW.order_id, current_user);
        RETURN NEW;
      END \$\$;
      CREATE TABLE t098_trig (order_id int, customer text);
      CREATE TRIGGER t098_upper BEFORE INSERT ON t098_trig FOR EACH ROW EXECUTE FUNCTION t098_upper();
      GRANT INSERT ON t098_trig, t098_log TO $owner;
      CREATE OR REPLACE FUNCTION t098_seen() RETURNS bigint LANGUAGE plpgsql VOLATILE AS
        'BEGIN RETURN (SELECT count(*) FROM public.t098_reads); END';
      CREATE TABLE t098_reads (order_id int, seen bigint DEFAULT t098_seen());
      GRANT INSERT, SELECT ON t098_reads TO $owner;
      CREATE TABLE t098_part (order_id int, customer text) PARTITION BY RANGE (order_id);
      CREATE TABLE t098_part_low PARTITION OF t098_part FOR VALUES FROM (0) TO (50);
      CREATE TABLE t098_part_high PARTITION OF t098_part FOR VALUES FROM (50) TO (100);
      GRANT INSERT ON t098_part TO $owner;
      CREATE TABLE t098_cols (order_id int, customer text);
      GRANT INSERT ON t098_cols TO $owner");

sub run_bounded
{
	my ($job, $table, $map) = @_;
	psql_as($owner, qq{SELECT mailer.create_job('$job', \$\${"source": {"type": "generator", "events": 100},
		"steps": [{"map": $map}],
		"sink": {"type": "table", "table": "$table"}, "on_error": "dead_letter"}\$\$)});
	my $info = wait_job_state($job, qr/^(finished|restarting|failed)$/, 60);
	is($info->{state}, 'finished', "$job: reads every record and finishes")
	  or diag("last_error: " . ($info->{last_error} // ''));
}

# Ids 0..99.  CHECK refuses 7, 17, ..., 97; u of 42 is 41 again: the unique
# index refuses the later one.
run_bounded('j098_fast', 't098_fast',
	q{{"order_id": "(value->>'order_id')::int", "customer": "value->>'customer_id'",
	   "u": "CASE WHEN (value->>'order_id')::int = 42 THEN 41 ELSE (value->>'order_id')::int END"}});
is(psql("SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || count(*) FILTER (WHERE tag = 'd' AND at IS NOT NULL AND nothing IS NULL)
           FROM t098_fast"), '89 89 89', 'the rows are written with their defaults, identity included');
is(psql("SELECT count(*) FROM t098_fast WHERE order_id % 10 = 7 OR order_id = 42"), '0',
	'no row the constraints refuse');
my @dl = @{ dead_letters('j098_fast') };
is(join(',', map { $_->{offset} } @dl), '7,17,27,37,42,47,57,67,77,87,97',
	'the refused rows are dead letters, at their positions');
like($dl[0]{error}, qr/check constraint/, "... CHECK's error: $dl[0]{error}");
like($dl[4]{error}, qr/duplicate key value violates unique constraint/, "... the unique index's: $dl[4]{error}");

# A trigger runs for every row, as the job's owner.
run_bounded('j098_trig', 't098_trig', q{{"order_id": "(value->>'order_id')::int", "customer": "value->>'customer_id'"}});
is(psql("SELECT count(*) || ' ' || count(*) FILTER (WHERE customer = upper(customer)) FROM t098_trig"), '100 100',
	'a BEFORE trigger changed every row');
is(psql("SELECT count(*) || ' ' || string_agg(DISTINCT who, ',') FROM t098_log"), "100 $owner",
	'... running as the job\'s owner');

# A volatile default that reads the table sees the rows written before its own.
run_bounded('j098_reads', 't098_reads', q{{"order_id": "(value->>'order_id')::int"}});
is(psql("SELECT count(*) || ' ' || count(DISTINCT seen) || ' ' || max(seen) FROM t098_reads"), '100 100 99',
	'a default reading the table saw each row before it');

# A partitioned table routes each row to its partition.
run_bounded('j098_part', 't098_part', q{{"order_id": "(value->>'order_id')::int", "customer": "value->>'customer_id'"}});
is(psql("SELECT (SELECT count(*) FROM t098_part_low) || ' ' || (SELECT count(*) FROM t098_part_high)"), '50 50',
	'a partitioned table gets every row, in its partition');

# The owner's column privileges are checked at each checkpoint: a column it
# may no longer insert into fails the checkpoint (no dead letter) until the
# privilege is back.
psql_as($owner, q{SELECT mailer.create_job('j098_cols', $${"source": {"type": "generator", "rate": 200},
	"steps": [{"map": {"order_id": "(value->>'order_id')::int", "customer": "value->>'customer_id'"}}],
	"sink": {"type": "table", "table": "t098_cols"}}$$)});
wait_until('the job wrote rows', sub { psql("SELECT count(*) FROM t098_cols") > 0 }, 60);
psql("REVOKE INSERT ON t098_cols FROM $owner; GRANT INSERT (order_id) ON t098_cols TO $owner");
my $info = wait_job_state('j098_cols', qr/^restarting$/, 60);
like($info->{last_error}, qr/permission denied for table t098_cols|may not insert into column "customer" of table public\.t098_cols/,
	"INSERT on one column revoked: the job retries and says why: $info->{last_error}");
is(scalar(@{ dead_letters('j098_cols') }), 0, '... and no row became a dead letter');
psql("GRANT INSERT ON t098_cols TO $owner");
wait_job_state('j098_cols', qr/^running$/, 60);
my $count = psql("SELECT count(*) FROM t098_cols");
wait_until('INSERT granted again: the job writes again', sub { psql("SELECT count(*) FROM t098_cols") > $count }, 60);
wait_job('j098_cols');
is(psql("SELECT count(*) = count(DISTINCT order_id) FROM t098_cols"), 't', '... no row written twice');

# The worker killed once the rows are in the table, before the checkpoint
# commits: none of them stays, and the job, restarted, writes each once.
psql("CREATE TABLE t098_kill (order_id int, at timestamptz DEFAULT clock_timestamp());
      GRANT INSERT ON t098_kill TO $owner");
my $from = test_point_hold('sink_after_bulk_insert');
psql_as($owner, q{SELECT mailer.create_job('j098_kill', $${"source": {"type": "generator", "events": 3000, "rate": 1000},
	"steps": [{"map": {"order_id": "(value->>'order_id')::int"}}],
	"sink": {"type": "table", "table": "t098_kill"}, "checkpoint": {"interval": "200 milliseconds"}}$$)});
my $pid = test_point_wait_reached('sink_after_bulk_insert', $from);
ok($pid, 'the worker is held after table_multi_insert(), before the commit');
is(kill('KILL', $pid), 1, 'SIGKILL sent to it');
wait_until('the server restarted after the crash', sub { my $p = worker_pid('j098_kill'); $p > 0 && $p != $pid }, 120);
test_point_release();
is(psql("SELECT mailer.wait_job('j098_kill', '2 minutes')"), 'finished', 'the job recovers and finishes');
is(psql("SELECT count(*) || ' ' || count(DISTINCT order_id) FROM t098_kill"), '3000 3000',
	'every record is a row, once');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
done_testing();
