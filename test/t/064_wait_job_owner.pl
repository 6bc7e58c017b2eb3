# wait_job makes a job's worker query its source (the broker's end
# offsets): like start_job and stop_job, only the job's owner, a member of
# the owning role, or a superuser may ask for it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t064');

my ($alice, $bob, $carol) = qw(t064_alice t064_bob t064_carol);
drop_roles($carol, $alice, $bob);
psql("SET client_min_messages = warning;
      CREATE ROLE $alice LOGIN;
      CREATE ROLE $bob LOGIN;
      CREATE ROLE $carol LOGIN IN ROLE $alice;
      CREATE TABLE t064_out (key text);
      GRANT INSERT ON t064_out TO $alice");

psql_as($alice, q{SELECT mailer.create_job('j064', $${"source": {"type": "generator", "events": 200},
	"steps": [{"map": {"key": "key"}}], "sink": {"type": "table", "table": "t064_out"}}$$)});

my $err = psql_fails_as($bob, "SELECT mailer.wait_job('j064', '10 seconds')");
like($err, qr/42501: permission denied to wait for job "j064"/,
	'another role may not wait for the job: insufficient_privilege');
like($err, qr/DETAIL:  The job is owned by role "t064_alice"/, '... the detail names the owner');
like($err, qr/HINT:  Only the job's owner, a member of the owning role, or a superuser may wait for it/,
	'... the hint says who may');

like(psql_as($alice, "SELECT mailer.wait_job('j064', '60 seconds')"), qr/^(running|finished)$/, 'the owner may wait for it');
like(psql_as($carol, "SELECT mailer.wait_job('j064', '60 seconds')"), qr/^(running|finished)$/,
	'a member of the owning role may');
like(psql("SELECT mailer.wait_job('j064', '60 seconds')"), qr/^(running|finished)$/, 'a superuser may');
is(psql("SELECT count(*) FROM t064_out"), '200', 'the job wrote its records');

psql("SELECT mailer.drop_job('j064')");
done_testing();
