# An append sink writes through table_multi_insert() where that is
# exactly what its INSERT would do, and through the INSERT elsewhere
# (connectors/sink_table.c).  Whichever path a table takes, a job's owner
# gets nothing it would not get from the INSERT: defaults are filled,
# NOT NULL, CHECK and unique indexes refuse the same rows (dead letters,
# the others written), a column privilege taken away fails the checkpoint,
# triggers run for every row, a default or CHECK that reads the table sees
# the rows before it, a CHECK sees tableoid, a partitioned table routes its
# rows, and a table changed under a running job (a column's type or typmod,
# a column dropped or made GENERATED ALWAYS, a domain's new constraint)
# gets only what the re-planned INSERT writes.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $owner = 't098_owner';
# drop_tables() would meet the partitions after their parent went.
psql("DROP TABLE IF EXISTS t098_part; DROP TABLE IF EXISTS t098_dom; DROP DOMAIN IF EXISTS t098_small");
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

# The table changed under the same OID while a job runs.  The rows the job
# holds were made for the columns it was planned against: only the INSERT,
# re-planned, may write them now (it converts them or fails the
# checkpoint); the bulk path would store one type's Datum as another
# (a bigint taken for a varlena pointer crashes the server).
my $started = psql("SELECT pg_postmaster_start_time()");

sub start_running
{
	my ($job, $table, $map) = @_;
	psql_as($owner, qq{SELECT mailer.create_job('$job', \$\${"source": {"type": "generator", "rate": 200},
		"steps": [{"map": $map}], "sink": {"type": "table", "table": "$table"},
		"on_error": "dead_letter", "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
	wait_until("$job wrote rows", sub { psql("SELECT count(*) FROM $table") > 0 }, 60);
}

# Waits until the job failed a checkpoint (it may be running again already),
# or $cond holds; returns job_info.
sub wait_stopped_or
{
	my ($job, $cond) = @_;
	my $info;
	wait_until("$job fails its checkpoint or the condition holds",
		sub { $info = job_info($job); $info->{state} =~ /^(restarting|failed)$/ || defined $info->{last_error} || $cond->() }, 60);
	return $info;
}

psql("CREATE TABLE t098_tb (order_id int, x bigint);
      CREATE TABLE t098_tt (order_id int, customer text);
      CREATE TABLE t098_vc (order_id int, customer varchar(10));
      CREATE TABLE t098_dc (order_id int, customer text);
      CREATE TABLE t098_ia (order_id int NOT NULL, customer text);
      CREATE DOMAIN t098_small AS int;
      CREATE TABLE t098_dom (order_id t098_small);
      GRANT INSERT ON t098_tb, t098_tt, t098_vc, t098_dc, t098_ia, t098_dom TO $owner");

# bigint -> bytea: the INSERT cannot put a bigint there.
start_running('j098_tb', 't098_tb', q{{"order_id": "(value->>'order_id')::int", "x": "(value->>'order_id')::bigint * 8 + 1"}});
psql("ALTER TABLE t098_tb ALTER COLUMN x TYPE bytea USING NULL");
$info = wait_stopped_or('j098_tb', sub { psql("SELECT count(*) FROM t098_tb WHERE x IS NOT NULL") > 0 });
like($info->{last_error} // '', qr/bytea|bigint/, "bigint column made bytea: the checkpoint fails: " . ($info->{last_error} // ''));
is(psql("SELECT pg_postmaster_start_time()"), $started, '... the server did not crash');
is(psql("SELECT count(*) FROM t098_tb WHERE x IS NOT NULL"), '0', '... and no bigint went into the bytea column');
psql("SELECT mailer.drop_job('j098_tb')");

# text -> bigint: the INSERT has no assignment cast from text; a pointer must not be stored.
start_running('j098_tt', 't098_tt', q{{"order_id": "(value->>'order_id')::int", "customer": "value->>'customer_id'"}});
psql("ALTER TABLE t098_tt ALTER COLUMN customer TYPE bigint USING NULL");
$info = wait_stopped_or('j098_tt', sub { psql("SELECT count(*) FROM t098_tt WHERE customer IS NOT NULL") > 0 });
is(psql("SELECT count(*) FROM t098_tt WHERE customer IS NOT NULL"), '0',
	'text column made bigint: no text pointer stored as a number; ' . ($info->{last_error} // ''));
psql("SELECT mailer.drop_job('j098_tt')");

# A typmod narrowed: the INSERT checks the new length; longer values are refused.
start_running('j098_vc', 't098_vc', q{{"order_id": "(value->>'order_id')::int", "customer": "'customer-' || (value->>'customer_id')"}});
psql("ALTER TABLE t098_vc ALTER COLUMN customer TYPE varchar(3) USING left(customer, 3)");
wait_stopped_or('j098_vc', sub {
	psql("SELECT count(*) FROM t098_vc WHERE length(customer) > 3") > 0
	  || scalar(@{ dead_letters('j098_vc') }) > 0 });
is(psql("SELECT count(*) FROM t098_vc WHERE length(customer) > 3"), '0', 'varchar(10) made varchar(3): no longer value written');
psql("SELECT mailer.drop_job('j098_vc')");

# A column dropped, or made GENERATED ALWAYS: the INSERT fails the
# checkpoint, the job re-plans; nothing is written without it or into it.
start_running('j098_dc', 't098_dc', q{{"order_id": "(value->>'order_id')::int", "customer": "value->>'customer_id'"}});
psql("ALTER TABLE t098_dc DROP COLUMN customer");
$info = wait_stopped_or('j098_dc', sub { 0 });
like($info->{last_error} // '', qr/customer/, "a column dropped: the checkpoint fails: " . ($info->{last_error} // ''));
psql("SELECT mailer.drop_job('j098_dc')");
start_running('j098_ia', 't098_ia', q{{"order_id": "(value->>'order_id')::int", "customer": "value->>'customer_id'"}});
# The job's last value, read under the ALTER's lock: no checkpoint commits in between.
my $before = psql("BEGIN;
	ALTER TABLE t098_ia ALTER COLUMN order_id ADD GENERATED ALWAYS AS IDENTITY (START WITH 1000000000);
	SELECT max(order_id) FROM t098_ia;
	COMMIT");
$info = wait_stopped_or('j098_ia', sub { 0 });
like($info->{last_error} // '', qr/identity|GENERATED ALWAYS|order_id/,
	"a fed column made GENERATED ALWAYS: the checkpoint fails: " . ($info->{last_error} // ''));
is(psql("SELECT count(*) FROM t098_ia WHERE order_id > $before AND order_id < 1000000000"), '0',
	'... the job wrote no value of its own into it');
psql("SELECT mailer.drop_job('j098_ia')");

# A domain constraint added while rows are buffered: the rows written after
# it obey it (the INSERT checks the domain when it writes).
start_running('j098_dom', 't098_dom', q{{"order_id": "(value->>'order_id')::int"}});
my $limit = psql("SELECT max(order_id) + 300 FROM t098_dom");
psql("ALTER DOMAIN t098_small ADD CONSTRAINT t098_small_max CHECK (VALUE < $limit)");
wait_stopped_or('j098_dom', sub {
	psql("SELECT count(*) FROM t098_dom WHERE order_id >= $limit") > 0
	  || scalar(@{ dead_letters('j098_dom') }) > 0 });
is(psql("SELECT count(*) FROM t098_dom WHERE order_id >= $limit"), '0',
	"ALTER DOMAIN ADD CONSTRAINT: no row written breaks it");
psql("SELECT mailer.drop_job('j098_dom')");

# A CHECK sees the row's tableoid, as in the INSERT.
psql("CREATE TABLE t098_toid (order_id int CHECK (tableoid = 't098_toid'::regclass));
      GRANT INSERT ON t098_toid TO $owner");
run_bounded('j098_toid', 't098_toid', q{{"order_id": "(value->>'order_id')::int"}});
is(psql("SELECT count(*) FROM t098_toid"), '100', 'a CHECK on tableoid accepts every row');
is(scalar(@{ dead_letters('j098_toid') }), 0, '... none is a dead letter');

# A CHECK calling a volatile function that reads the table sees the rows
# before its own: a quota of 50 rows lets 50 in.
psql("CREATE OR REPLACE FUNCTION t098_room() RETURNS boolean LANGUAGE plpgsql VOLATILE AS
        'BEGIN RETURN (SELECT count(*) < 50 FROM public.t098_quota); END';
      CREATE TABLE t098_quota (order_id int CHECK (t098_room()));
      GRANT INSERT, SELECT ON t098_quota TO $owner");
run_bounded('j098_quota', 't098_quota', q{{"order_id": "(value->>'order_id')::int"}});
is(psql("SELECT count(*) || ' ' || max(order_id) FROM t098_quota"), '50 49', 'a volatile CHECK saw the rows before it');
is(scalar(@{ dead_letters('j098_quota') }), 50, '... the others are dead letters');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
done_testing();
