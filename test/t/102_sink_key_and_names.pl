# The sink's conflict key and names are fixed where they should be
# (hardening review, M8, M2, L2):
#   - the unique index an upsert merges keys by, dropped and created again
#     with another collation while the job runs: keys the new index tells
#     apart are not merged (the worker restarts from its last checkpoint);
#   - the primary key of an upsert job's table dropped: the job retries
#     with a clear last_error instead of appending, and goes on once the key
#     is back;
#   - a role with CREATE in a schema ahead of the table's in the job's
#     search_path puts its own unnest(text[]) and a table of the sink's name
#     there: neither is used (mailer's SQL names pg_catalog.unnest, and the
#     table name is pinned to its schema at create_job);
#   - a conflict key whose type has no hash function is refused at
#     create_job.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t102');

my $topic = unique_name('t102');
kafka('create-topic', $topic, 1);

psql(<<'SQL');
DROP COLLATION IF EXISTS t102_ci;
CREATE COLLATION t102_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE t102_ci (k text, v int);
CREATE UNIQUE INDEX t102_ci_k ON t102_ci (k COLLATE t102_ci);
CREATE TABLE t102_pk (k text PRIMARY KEY, v int);
SQL

my $map = q{"steps": [{"map": {"k": "value->>'k'", "v": "(value->>'v')::int"}}]};
my $src = qq{"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"}};
psql(qq{SELECT mailer.create_job('j102_ci', \$\${$src, $map,
	"sink": {"type": "table", "table": "t102_ci", "key": ["k"]}, "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
psql(qq{SELECT mailer.create_job('j102_pk', \$\${$src, $map,
	"sink": {"type": "table", "table": "t102_pk"}, "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
is(psql("SELECT spec->'sink'->>'mode' FROM mailer.jobs WHERE name = 'j102_pk'"), 'upsert',
	'create_job stores the mode the table gave the spec');

my $v = 0;
sub produce
{
	my (@keys) = @_;
	kcat_produce($topic, [ map { $v++; "$_\t{\"k\": \"$_\", \"v\": $v}" } @keys ]);
}

# Under the case-insensitive index, a and A are one key.
produce('a', 'A');
is(wait_job($_, 30), 'running', "$_ runs") for ('j102_ci', 'j102_pk');
is(psql("SELECT count(*) FROM t102_ci"), '1', 'a and A: one row under the case-insensitive index');

# The index made again with the C collation: b1 and B1 are two keys now.
psql("BEGIN; DROP INDEX t102_ci_k; CREATE UNIQUE INDEX t102_ci_k2 ON t102_ci (k COLLATE \"C\"); COMMIT");
# The primary key of j102_pk's table dropped.
psql("ALTER TABLE t102_pk DROP CONSTRAINT t102_pk_pkey");
produce(map { ("b$_", "B$_") } 1 .. 50);
is(wait_job('j102_ci', 120), 'running', 'j102_ci goes on under the new index');
is(psql("SELECT count(*) FROM t102_ci WHERE lower(k) LIKE 'b%'"), '100',
	'every key the new index tells apart has its row');
like(job_info('j102_ci')->{last_error}, qr/the conflict key of sink table public\.t102_ci changed/,
	'last_error says the conflict key changed');

my $info;
wait_until('j102_pk retries without its primary key', sub {
	$info = job_info('j102_pk');
	$info->{restarts} > 0 && ($info->{last_error} // '') =~ /conflict key|primary key/;
}, 60);
like($info->{last_error}, qr/sink table public\.t102_pk has no conflict key for the job's upsert|table t102_pk has no primary key to upsert on/,
	"last_error says the upsert's key is missing: $info->{last_error}");
is(psql("SELECT count(*) FROM t102_pk"), '2', 'nothing appended without the primary key');
psql("ALTER TABLE t102_pk ADD PRIMARY KEY (k)");
is(wait_job('j102_pk', 120), 'running', 'with the primary key back the job goes on');
is(psql("SELECT count(*) || ' ' || count(DISTINCT k) FROM t102_pk"), '102 102', 'one row per key');

# A role with CREATE in a schema ahead of public in the job's search_path.
psql(<<'SQL');
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS t102_early CASCADE;
DROP ROLE IF EXISTS t102_intruder;
CREATE ROLE t102_intruder LOGIN;
CREATE SCHEMA t102_early;
GRANT USAGE, CREATE ON SCHEMA t102_early TO t102_intruder;
CREATE TABLE t102_real (k text, v int);
SQL
psql_as('t102_intruder', q{CREATE FUNCTION t102_early.unnest(text[]) RETURNS SETOF text LANGUAGE sql
	AS $$SELECT 'hijacked'$$});
my $topic2 = unique_name('t102b');
kafka('create-topic', $topic2, 1);
psql(qq{SET search_path = t102_early, public; SELECT mailer.create_job('j102_path', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic2"}, $map,
	"sink": {"type": "table", "table": "t102_real"}, "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
is(psql("SELECT spec->'sink'->>'table' FROM mailer.jobs WHERE name = 'j102_path'"), 'public.t102_real',
	'create_job stores the table name with the schema it resolved to');
psql_as('t102_intruder', q{CREATE TABLE t102_early.t102_real (k text, v int)});
kcat_produce($topic2, [ map { "x$_\t{\"k\": \"x$_\", \"v\": $_}" } 1 .. 10 ]);
is(wait_job('j102_path', 30), 'running', 'j102_path runs');
is(psql("SELECT count(*) || ' ' || count(*) FILTER (WHERE k = 'x' || v) FROM public.t102_real"), '10 10',
	"the rows go to the table of create_job's schema, with their own values");
is(psql("SELECT count(*) FROM t102_early.t102_real"), '0', 'the table placed ahead of it gets nothing');

# A key type without a hash function.
psql("CREATE TABLE t102_money (k money PRIMARY KEY, v int)");
like(psql_fails(q{SELECT mailer.create_job('j102_money', $${"source": {"type": "generator", "events": 10},
	"steps": [{"map": {"k": "(value->>'order_id')::int::money", "v": "(value->>'order_id')::int"}}],
	"sink": {"type": "table", "table": "t102_money"}}$$)}),
	qr/conflict column "k" of table public\.t102_money has type money, whose equality has no hash function.*HINT:.*mode.*append/s,
	'a money conflict key is refused at create_job, with a hint');

done_testing();
