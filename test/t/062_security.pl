# Security: a job's worker runs as the job's owner (privileges and
# row-level security apply to its expressions, functions and writes); a job
# cannot be created to write where its owner may not; only the owner (or a
# member of the owning role) and superusers control a job; secrets in
# source.options are kept where only superusers and the owner read them and
# shown as ******** everywhere else, logs and errors included; identifiers
# from a spec are quoted and a spec cannot inject SQL.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t062');
my $log_start = pg_log_size();

my ($alice, $bob, $carol, $nologin) = qw(t062_alice t062_bob t062_carol t062_nologin);
psql("SET client_min_messages = warning;
      DO \$\$BEGIN
        IF EXISTS (SELECT FROM pg_roles WHERE rolname = '$alice') THEN
          EXECUTE 'DROP OWNED BY $alice, $bob, $carol CASCADE';
        END IF;
      END\$\$;
      DROP FUNCTION IF EXISTS t062_label(text), t062_privileged();
      DROP ROLE IF EXISTS $alice, $bob, $carol, $nologin;
      CREATE ROLE $alice LOGIN;
      CREATE ROLE $bob LOGIN;
      CREATE ROLE $carol LOGIN IN ROLE $alice;
      CREATE ROLE $nologin NOLOGIN;
      GRANT CREATE ON SCHEMA public TO $alice, $bob");

my $topic = unique_name('t062');
kafka('create-topic', $topic, 1);

# ---------------------------------------------------------------------------
# The worker is the owner: privileges and row-level security apply
# ---------------------------------------------------------------------------

# A lookup table whose rows each role sees only its own of, read through a
# function; a sink table whose policy lets alice insert only amounts >= 0.
psql("CREATE TABLE t062_labels (id text, label text, visible_to name);
      INSERT INTO t062_labels VALUES ('1', 'one', '$alice'), ('2', 'two', '$bob');
      ALTER TABLE t062_labels ENABLE ROW LEVEL SECURITY;
      CREATE POLICY own_rows ON t062_labels USING (visible_to = current_user);
      GRANT SELECT ON t062_labels TO PUBLIC;
      CREATE FUNCTION t062_label(text) RETURNS text LANGUAGE sql STABLE
        AS \$\$SELECT label FROM t062_labels WHERE id = \$1\$\$;
      CREATE FUNCTION t062_privileged() RETURNS text LANGUAGE sql AS \$\$SELECT 'x'\$\$;
      REVOKE EXECUTE ON FUNCTION t062_privileged() FROM PUBLIC;
      CREATE TABLE t062_out (id text, who text, session_who text, label text, amount int);
      ALTER TABLE t062_out ENABLE ROW LEVEL SECURITY;
      CREATE POLICY alice_inserts ON t062_out FOR INSERT TO $alice WITH CHECK (amount >= 0);
      GRANT INSERT ON t062_out TO $alice;
      CREATE TABLE t062_upsert (id text PRIMARY KEY, amount int);
      GRANT INSERT, SELECT ON t062_upsert TO $bob;");

kcat_produce($topic, [ "k1\t{\"id\": \"1\", \"amount\": 5}", "k2\t{\"id\": \"2\", \"amount\": 6}",
	"k3\t{\"id\": \"3\", \"amount\": -1}", "k4\t{\"id\": \"1\", \"amount\": 7}" ]);

sub owner_spec
{
	my ($table, %opt) = @_;
	my $map = $opt{map} // q("id": "value->>'id'", "who": "current_user", "session_who": "session_user",
	   "label": "t062_label(value->>'id')", "amount": "(value->>'amount')::int");
	my $mode = $opt{mode} ? qq(, "mode": "$opt{mode}") : '';
	return qq({"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	  "steps": [{"map": {$map}}],
	  "sink": {"type": "table", "table": "$table"$mode}});
}

psql_as($alice, "SELECT mailer.create_job('j062_owner', \$\$" . owner_spec('t062_out') . "\$\$)");
is(psql("SELECT owner FROM mailer.jobs WHERE name = 'j062_owner'"), $alice, 'the creator owns the job');
is(wait_job('j062_owner'), 'running', 'the job has committed its input');
is(psql("SELECT string_agg(concat_ws(',', id, who, session_who, coalesce(label, 'NULL'), amount), ' ' ORDER BY amount) FROM t062_out"),
	"1,$alice,$alice,one,5 2,$alice,$alice,NULL,6 1,$alice,$alice,one,7",
	"expressions run as $alice: current_user and session_user are the owner, and row-level security hides bob's label");
my @dl = @{ dead_letters('j062_owner') };
is(scalar(@dl), 1, 'the row the policy refuses is a dead letter');
is($dl[0]{stage}, 'sink', '... of stage sink');
like($dl[0]{error}, qr/new row violates row-level security policy for table "t062_out"/, '... saying the policy refused it');
is_deeply([ $dl[0]{partition}, $dl[0]{offset} ], topic_offsets_by_key($topic)->{k3},
	'... at the position of the record with amount -1');
like(pack('H*', $dl[0]{value_hex}), qr/^\{"id": "3", "who": "$alice", .*"amount": "-1"\}$/,
	'... holding the row the table refused');
is(psql_as($alice, "SELECT count(*) FROM mailer.dead_letters"), '1', 'the owner reads the dead letters of her job');
is(psql_as($bob, "SELECT count(*) FROM mailer.dead_letters"), '0', 'another role reads none of them');
is(psql_as($bob, "WITH d AS (DELETE FROM mailer.dead_letters RETURNING 1) SELECT count(*) FROM d"), '0',
	'nor deletes them');

# Privileges taken away while the job runs: its writes fail, it says so,
# retries, and goes on once they are back, without losing or repeating rows.
my $ckpts = "SELECT max(epoch) FROM mailer.checkpoints WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'j062_owner')";
my $epoch_before = psql($ckpts);
psql("REVOKE INSERT ON t062_out FROM $alice");
kcat_produce($topic, ["k5\t{\"id\": \"1\", \"amount\": 8}"]);
my $info = wait_job_state('j062_owner', qr/^restarting$/, 60);
like($info->{last_error}, qr/permission denied for table t062_out|may not insert into column .* of table public\.t062_out/,
	"INSERT revoked: the job reports it: $info->{last_error}");
is(psql($ckpts), $epoch_before, 'INSERT revoked: no checkpoint commits');
psql("GRANT INSERT ON t062_out TO $alice");
wait_job_state('j062_owner', qr/^running$/, 60);
wait_job('j062_owner');
is(psql("SELECT string_agg(amount::text, ',' ORDER BY amount) FROM t062_out"), '5,6,7,8',
	'INSERT granted again: the row is written, once');

# ---------------------------------------------------------------------------
# A job cannot be created to do what its owner may not
# ---------------------------------------------------------------------------

like(psql_fails_as($bob, "SELECT mailer.create_job('j062_bob', \$\$" . owner_spec('t062_out') . "\$\$)"),
	qr/role "t062_bob" may not insert into column "id" of table public\.t062_out/,
	'no INSERT on the sink table: create_job refuses');
like(psql_fails_as($bob, "SELECT mailer.create_job('j062_bob', \$\$"
	  . owner_spec('t062_upsert', map => q("id": "value->>'id'", "amount": "(value->>'amount')::int")) . "\$\$)"),
	qr/role "t062_bob" may not update column "amount" of table public\.t062_upsert/,
	'an upsert sink without UPDATE: create_job refuses');
like(psql_fails_as($bob, "SELECT mailer.create_job('j062_bob', \$\$"
	  . owner_spec('mailer.job_secret', map => q("job_id": "1", "secrets": "value")) . "\$\$)"),
	qr/may not insert into column .* of table mailer\.job_secret/,
	"mailer's own tables as a sink: create_job refuses");
like(psql_fails_as($alice, "SELECT mailer.create_job('j062_bob', \$\$"
	  . owner_spec('t062_out', map => q("id": "t062_privileged()")) . "\$\$)"),
	qr/permission denied for function t062_privileged/,
	'a function the owner may not execute: create_job refuses');
like(psql_fails_as($alice, "SELECT mailer.create_job('j062_bob', \$\$"
	  . owner_spec('t062_out', map => q("id": "pg_read_file('/etc/hostname')")) . "\$\$)"),
	qr/permission denied for function pg_read_file/,
	'a superuser-only function: create_job refuses');
like(psql_fails("SET ROLE $nologin; SELECT mailer.create_job('j062_nologin', \$\$" . owner_spec('t062_out') . "\$\$)"),
	qr/role "t062_nologin" cannot own a job because it cannot log in/,
	'a role that cannot log in cannot own a job');
is(psql("SELECT count(*) FROM mailer.jobs WHERE name <> 'j062_owner'"), '0', 'none of those jobs exists');

# ---------------------------------------------------------------------------
# Only the owner, a member of the owning role, or a superuser controls a job
# ---------------------------------------------------------------------------

for my $action ("stop_job('j062_owner')", "start_job('j062_owner')", "drop_job('j062_owner')",
	"restore_job('j062_owner', 1)")
{
	my ($verb) = $action =~ /^(\w+)_job/;
	like(psql_fails_as($bob, "SELECT mailer.$action"), qr/permission denied to $verb job "j062_owner"/,
		"another role may not $verb the job");
}
is(job_info('j062_owner')->{state}, 'running', 'the job runs on');
is(psql_as($carol, "SELECT mailer.stop_job('j062_owner')"), 'stopped', 'a member of the owning role may stop it');
is(psql_as($carol, "SELECT mailer.restore_job('j062_owner', (SELECT min(epoch) FROM mailer.checkpoints))") > 0, 1,
	'... and restore it');
is(psql("SELECT mailer.start_job('j062_owner')"), 'starting', 'a superuser may start it');
is(psql("SELECT mailer.stop_job('j062_owner')"), 'stopped', '... and stop it');
is(psql_as($alice, "SELECT mailer.start_job('j062_owner')"), 'starting', 'the owner may start it');
wait_job('j062_owner');

# The owner loses LOGIN: the worker cannot connect as the owner, says so,
# and the job goes on once the role may log in again.
psql("ALTER ROLE $alice NOLOGIN");
psql("SELECT pg_terminate_backend(pid) FROM mailer.jobs WHERE name = 'j062_owner'");
wait_until('the job retried as a role that cannot log in', sub {
	$info = job_info('j062_owner');
	$info->{state} eq 'restarting' && ($info->{last_error} // '') =~ /log in/;
});
like($info->{last_error}, qr/could not connect as the job's owner: role "t062_alice" is not permitted to log in/,
	"the owner cannot log in: mailer.jobs says so: $info->{last_error}");
psql("ALTER ROLE $alice LOGIN");
wait_job_state('j062_owner', qr/^running$/, 60);
pass('LOGIN again: the job runs again');

# ---------------------------------------------------------------------------
# A job's errors may quote its records: only the owner reads them
# ---------------------------------------------------------------------------

my $etopic = unique_name('t062e');
kafka('create-topic', $etopic, 1);
kcat_produce($etopic, ["e1\t{\"id\": \"1\", \"amount\": \"x-private-7731\"}"]);
psql_as($alice, "SELECT mailer.create_job('j062_fail', \$\$"
	  . (owner_spec('t062_out', map => q("id": "value->>'id'", "amount": "(value->>'amount')::int")) =~ s/\Q$topic\E/$etopic/r =~ s/\}\s*$/, "on_error": "fail"}/r)
	  . "\$\$)");
$info = wait_job_state('j062_fail', qr/^failed$/);
like($info->{last_error}, qr/invalid input syntax for type integer: "x-private-7731"/,
	'the owner reads why her job failed, record data included');
my $seen_by_bob = psql_as($bob, "SELECT state || ' ' || coalesce(last_error, '') FROM mailer.jobs WHERE name = 'j062_fail'");
like($seen_by_bob, qr/^failed /, 'another role sees that the job failed');
unlike($seen_by_bob, qr/x-private-7731/, '... but not the record data in its last_error');
unlike(psql_as($bob, "SELECT coalesce(string_agg(error, ' '), '') FROM mailer._live_jobs()"), qr/x-private-7731/,
	'... nor in the live state');
like(psql_fails_as($bob, "SELECT last_error FROM mailer.job_status"), qr/permission denied/,
	'... nor in mailer.job_status');
is(psql_as($bob, "SELECT count(*) FROM mailer.job_status"), '2', '... whose other columns it reads');
psql_as($alice, "SELECT mailer.drop_job('j062_fail')");

# ---------------------------------------------------------------------------
# Secrets: kept from other roles, masked everywhere, never logged
# ---------------------------------------------------------------------------

my %secret = (
	'sasl.username' => 'user-Q7ZK4',
	'sasl.password' => 'pw-K9X2-hush',
	'ssl.key.password' => 'kp-3JJ8-hush',
	'sasl.oauthbearer.config' => 'principal=admin extension_apikey=ob-77TQ-hush',
);
my $options = join(', ', map { qq("$_": "$secret{$_}") } sort keys %secret);
# The worker logs librdkafka's messages at DEBUG1: log them all for this role.
psql("ALTER ROLE $alice SET log_min_messages = 'debug1'");
my $secret_spec = qq({"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic",
    "options": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", $options,
                "debug": "security,broker,conf"}},
  "steps": [{"map": {"id": "value->>'id'", "amount": "(value->>'amount')::int"}}],
  "sink": {"type": "table", "table": "t062_secret_out"}});
psql("CREATE TABLE t062_secret_out (id text, amount int); GRANT INSERT ON t062_secret_out TO $alice");

my $described = psql_as($alice, "SELECT mailer.describe_job(\$\$$secret_spec\$\$)");
like($described, qr/option sasl\.password = \*{8}/, 'describe_job shows ******** for sasl.password');
like($described, qr/option security\.protocol = SASL_PLAINTEXT/, '... and other options as they are');
psql_as($alice, "SELECT mailer.create_job('j062_secret', \$\$$secret_spec\$\$)");

# The plaintext broker cannot authenticate a SASL client: the job waits.
$info = wait_job_state('j062_secret', qr/^waiting$/, 60);
like($info->{last_error}, qr/Kafka/, "against a plaintext listener the job waits: $info->{last_error}");

my $spec_shown = psql("SELECT spec FROM mailer.jobs WHERE name = 'j062_secret'");
for my $k (sort keys %secret)
{
	is(psql("SELECT spec->'source'->'options'->>'$k' FROM mailer.jobs WHERE name = 'j062_secret'"), '********',
		"mailer.jobs shows $k as ********");
}
is(psql("SELECT spec->'source'->'options'->>'sasl.mechanism' FROM mailer.jobs WHERE name = 'j062_secret'"),
	'PLAIN', 'mailer.jobs shows other options as they are');
$described = psql_as($alice, "SELECT mailer.describe_job(spec) FROM mailer.jobs WHERE name = 'j062_secret'");
like($described, qr/option sasl\.username = \*{8}/, 'describe_job of the stored spec masks them too');

is(psql_as($bob, "SELECT count(*) FROM mailer.job_secret"), '0', 'another role reads no secret');
is(psql_as($alice, "SELECT secrets->>'sasl.password' FROM mailer.job_secret"), $secret{'sasl.password'},
	'the owner reads the secrets of her job');
is(psql("SELECT count(*) FROM mailer.job_secret"), '1', 'a superuser reads them');
like(psql_fails_as($bob, "UPDATE mailer.job_secret SET secrets = '{}'"), qr/permission denied/,
	'another role cannot change them');

# Errors raised with secrets in the spec do not show them.
my $bad_spec = $secret_spec =~ s/"steps"/"stepz"/r;
my $err = psql_fails_as($alice, "SELECT mailer.create_job('j062_bad', \$\$$bad_spec\$\$)");
like($err, qr/unknown field "stepz"/, 'a spec with secrets and an error: the error');
# (As a superuser: other roles may not set properties off mailer's list.)
my $err2 = psql_fails("SELECT mailer.create_job('j062_bad', \$\$"
	  . ($secret_spec =~ s/"debug"/"api.token": "tok-PZ81-hush", "debug"/r) . "\$\$)");
like($err2, qr/source\.options\.api\.token: librdkafka refused the value/,
	'a secret option librdkafka refuses: the error names it');
my $err3 = psql_fails_as($alice, "SELECT mailer.describe_job(\$\$$bad_spec\$\$)");

# Let the job try (and fail) to authenticate a few times, logging at DEBUG1.
my $tries = psql("SELECT restarts FROM mailer.jobs WHERE name = 'j062_secret'");
wait_until('librdkafka has logged the failed authentication',
	sub { pg_log_since($log_start) =~ /librdkafka.*(SASL|sasl|authentication|Disconnected)/ }, 60);
my $log = pg_log_since($log_start);
ok($log =~ /librdkafka/, 'the log holds what librdkafka said') or diag(substr($log, -3000));
for my $k (sort keys %secret)
{
	my $v = $secret{$k};
	unlike($log, qr/\Q$v\E/, "the server log never shows $k");
	unlike($info->{last_error} . job_info('j062_secret')->{last_error} . $err . $err2 . $err3, qr/\Q$v\E/,
		"no error message shows $k");
	unlike($spec_shown . $described, qr/\Q$v\E/, "no view shows $k");
}
unlike($log . $err2, qr/tok-PZ81-hush/, 'nor the value of a refused secret option');
psql("ALTER ROLE $alice RESET log_min_messages");
psql_as($alice, "SELECT mailer.drop_job('j062_secret')");
is(psql("SELECT count(*) FROM mailer.job_secret"), '0', 'dropping the job removes its secrets');

# ---------------------------------------------------------------------------
# Identifiers are quoted; a spec cannot inject SQL
# ---------------------------------------------------------------------------

psql(qq(CREATE TABLE t062_victim (x int);
        INSERT INTO t062_victim VALUES (42);
        CREATE TABLE "t062_odd; DROP TABLE t062_victim; --" ("we""ird col" text, "select" int, "Amount" int)));
my $odd = q("t062_odd; DROP TABLE t062_victim; --");
my $odd_json = $odd =~ s/"/\\"/gr;
psql(qq(SELECT mailer.create_job('j062_odd', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
  "steps": [{"map": {"we\\"ird col": "value->>'id'", "select": "(value->>'amount')::int", "Amount": "1"}}],
  "sink": {"type": "table", "table": "$odd_json"}}\$\$)));
wait_job('j062_odd');
is(psql(qq(SELECT string_agg("we""ird col" || ':' || "select" || ':' || "Amount", ',' ORDER BY "select") FROM $odd)),
	'3:-1:1,1:5:1,2:6:1,1:7:1,1:8:1', 'a table and columns with quotes, semicolons and keywords in their names are written');

my %injections = (
	'sink.table with a statement' => [ q~"sink": {"type": "table", "table": "t062_victim; DROP TABLE t062_victim"}~,
		qr/is not a table name|does not exist/ ],
	'sink.table with a quote' => [ q~"sink": {"type": "table", "table": "t062_victim\" (x) SELECT 1; DROP TABLE t062_victim; --"}~,
		qr/is not a table name|does not exist/ ],
	'sink.key with a statement' => [ q~"sink": {"type": "table", "table": "t062_upsert", "key": ["id) DO NOTHING; DROP TABLE t062_victim; --"]}~,
		qr/has no column/ ],
	'an expression with a second statement' => [ q~"steps": [{"map": {"id": "1; DROP TABLE t062_victim"}}]~,
		qr/expected one expression/ ],
	'an expression with FROM' => [ q~"steps": [{"map": {"id": "rolpassword FROM pg_authid"}}]~,
		qr/expected a single expression/ ],
	'an expression with a subquery' => [ q~"steps": [{"map": {"id": "(SELECT rolpassword FROM pg_authid LIMIT 1)"}}]~,
		qr/subqueries are not supported/ ],
	'an expression that closes a parenthesis' => [ q~"steps": [{"filter": "true) OR (SELECT true FROM pg_authid"}]~,
		qr/invalid job spec at steps\[0\]\.filter/ ],
	'an expression that opens a comment' => [ q~"steps": [{"filter": "true /*"}]~,
		qr/invalid job spec at steps\[0\]\.filter/ ],
	'an event_time with a statement' => [ q~"event_time": "now(); DROP TABLE t062_victim"~,
		qr/invalid job spec at event_time: expected one expression/ ],
	'an aggregate with a statement' => [ q~"steps": [{"key_by": {"id": "value->>'id'"}}, {"aggregate": {"amount": "count(*); DROP TABLE t062_victim"}}]~,
		qr/invalid job spec at steps\[1\]\.aggregate\.amount/ ],
);
for my $case (sort keys %injections)
{
	my ($part, $re) = @{ $injections{$case} };
	my $spec = qq({"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"});
	$spec .= $part =~ /^"sink"/ ? ", $part" : qq(, $part, "sink": {"type": "table", "table": "t062_upsert"});
	like(psql_fails("SELECT mailer.create_job('j062_inject', \$\$$spec}\$\$)"), $re, "refused: $case");
}
like(psql_fails("SELECT mailer.create_job('x''; DROP TABLE t062_victim; --', \$\$" . owner_spec('t062_out') . "\$\$)"),
	qr/invalid job name/, 'refused: a job name with a statement');
is(psql("SELECT x FROM t062_victim"), '42', 'after all of these, the table they tried to drop is still there');
is(psql("SELECT count(*) FROM mailer.jobs WHERE name = 'j062_inject'"), '0', 'and no job was created');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
done_testing();
