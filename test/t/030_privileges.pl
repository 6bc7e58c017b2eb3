# Privileges, with real logins: a job belongs to the role that created it and
# its worker connects as that role; another role may neither stop, start nor
# drop it; create_job refuses a sink table its caller cannot insert into.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
psql("DROP TABLE IF EXISTS t030_alice_orders, t030_bob_orders;
	DROP ROLE IF EXISTS t030_alice;
	DROP ROLE IF EXISTS t030_bob;
	CREATE ROLE t030_alice LOGIN;
	CREATE ROLE t030_bob LOGIN;
	CREATE TABLE t030_alice_orders (order_id bigint, customer_id text);
	CREATE TABLE t030_bob_orders (order_id bigint, customer_id text);
	GRANT SELECT, INSERT ON t030_alice_orders TO t030_alice;
	GRANT SELECT, INSERT ON t030_bob_orders TO t030_bob;");

sub spec
{
	my ($table) = @_;
	return qq{\$\${"source": {"type": "generator", "rate": 5000},
		"steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
		"sink": {"type": "table", "table": "$table"},
		"checkpoint": {"interval": "100 milliseconds"}}\$\$};
}

# alice creates a job: she owns it and its worker runs as her.
like(psql("SELECT mailer.create_job('t030_alice_job', " . spec('t030_alice_orders') . ")", user => 't030_alice'),
	qr/^\d+$/, 'alice creates a job');
is(psql("SELECT mailer.wait_job('t030_alice_job')", user => 't030_alice'), 'running', 'it runs');
is(psql("SELECT owner FROM mailer.jobs WHERE name = 't030_alice_job'", user => 't030_bob'), 't030_alice',
	'mailer.jobs shows alice as the owner, to bob too');
is(psql("SELECT a.usename FROM mailer.jobs j JOIN pg_stat_activity a ON a.pid = j.pid
	WHERE j.name = 't030_alice_job'"), 't030_alice', 'the worker is connected as alice');
wait_until('rows written by the job', sub { psql("SELECT count(*) FROM t030_alice_orders") > 0 });

# bob may not control it.
for my $action ('stop', 'start', 'drop')
{
	my $err = psql_fails("SELECT mailer.${action}_job('t030_alice_job')", user => 't030_bob');
	like($err, qr/permission denied to $action job "t030_alice_job"/, "bob may not $action alice's job");
	like($err, qr/The job is owned by role "t030_alice"/, "... and is told whose it is");
}
my $err = psql_fails("SELECT mailer.restore_job('t030_alice_job', 1)", user => 't030_bob');
like($err, qr/permission denied to restore job "t030_alice_job"/, "bob may not restore alice's job");
is(psql("SELECT desired_state, state FROM mailer.jobs WHERE name = 't030_alice_job'"), 'running|running',
	"alice's job runs on");

# bob may not write where he cannot insert, whatever the job.
$err = psql_fails("SELECT mailer.create_job('t030_bob_job', " . spec('t030_alice_orders') . ")", user => 't030_bob');
like($err, qr/invalid job spec at sink\.table: role "t030_bob" may not insert into column "\w+" of table public\.t030_alice_orders/,
	'create_job refuses a sink table bob cannot insert into');
like($err, qr/HINT:\s+A job writes as its owner: grant INSERT on the table to the job's owner\./, '... and says what to grant');
is(psql("SELECT count(*) FROM mailer.jobs WHERE name = 't030_bob_job'"), '0', 'no job was created');

# Into his own table he may; alice may not touch his job either.
like(psql("SELECT mailer.create_job('t030_bob_job', " . spec('t030_bob_orders') . ")", user => 't030_bob'),
	qr/^\d+$/, 'bob creates a job on his own table');
is(psql("SELECT mailer.wait_job('t030_bob_job')", user => 't030_bob'), 'running', "bob's job runs");
like(psql_fails("SELECT mailer.drop_job('t030_bob_job')", user => 't030_alice'),
	qr/permission denied to drop job "t030_bob_job"/, "alice may not drop bob's job");

# The owner may stop and drop her job; a superuser may drop anyone's.
is(psql("SELECT mailer.stop_job('t030_alice_job')", user => 't030_alice'), 'stopped', 'alice stops her job');
is(psql("SELECT count(*) = (SELECT (positions->>'next')::bigint FROM mailer.checkpoints c
		JOIN mailer.jobs j USING (job_id) WHERE j.name = 't030_alice_job' ORDER BY epoch DESC LIMIT 1)
	FROM t030_alice_orders"), 't', 'her table holds exactly what the final checkpoint covers');
like(psql("SELECT mailer.drop_job('t030_alice_job')", user => 't030_alice'), qr/^\d+$/, 'alice drops her job');
like(psql("SELECT mailer.drop_job('t030_bob_job')"), qr/^\d+$/, "the superuser drops bob's job");
is(psql("SELECT count(*) FROM mailer.jobs"), '0', 'no jobs left');
ok(wait_until('the workers gone', sub {
	psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer job'") == 0 }), 'no workers left');

psql("DROP TABLE t030_alice_orders, t030_bob_orders; DROP ROLE t030_alice; DROP ROLE t030_bob;");
done_testing();
