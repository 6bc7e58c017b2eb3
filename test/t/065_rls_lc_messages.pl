# A row that a row-level security policy refuses is a refused row (a dead
# letter), whatever language the job owner's lc_messages speaks: the sink
# tells it from a missing privilege (the same SQLSTATE, 42501) without
# reading the message.  A privilege the owner lacks still fails the
# checkpoint, and the job retries until it is granted.
use strict;
use warnings;
use utf8;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

binmode(Test::More->builder->$_, ':encoding(UTF-8)') for qw(output failure_output todo_output);

# test/services/deps.sh generates the de_DE.UTF-8 locale; Debian's
# postgresql-15 ships the German messages.
my $german = eval { psql("SET lc_messages = 'de_DE.UTF-8'; SELECT 1/0"); 1 } ? '' : $@;
plan skip_all => "PostgreSQL's messages are not translated here (de_DE.UTF-8 locale or postgres-15.mo missing)"
  unless $german =~ /Division durch Null/;

my $owner = 't065_owner';
fresh_with_owner('t065', $owner);
psql("ALTER ROLE $owner SET lc_messages = 'de_DE.UTF-8';
      CREATE TABLE t065_out (order_id int, customer text);
      ALTER TABLE t065_out ENABLE ROW LEVEL SECURITY;
      CREATE POLICY no_tens ON t065_out FOR INSERT TO $owner WITH CHECK (order_id % 10 <> 0);
      GRANT INSERT ON t065_out TO $owner;
      CREATE TABLE t065_priv (order_id int);
      GRANT INSERT ON t065_priv TO $owner");

# 100 generated orders, ids 0..99: the policy refuses the ten multiples of 10.
psql_as($owner, q{SELECT mailer.create_job('j065_rls', $${"source": {"type": "generator", "events": 100},
	"steps": [{"map": {"order_id": "(value->>'order_id')::int", "customer": "value->>'customer_id'"}}],
	"sink": {"type": "table", "table": "t065_out"}}$$)});
my $info = wait_job_state('j065_rls', qr/^(finished|restarting|failed)$/, 60);
is($info->{state}, 'finished', 'with German messages the job reads every record and finishes')
  or diag("last_error: " . ($info->{last_error} // ''));
is(psql("SELECT count(*) || ' ' || count(*) FILTER (WHERE order_id % 10 = 0) FROM t065_out"), '90 0',
	'the rows the policy accepts are written, the others not');
my @dl = @{ dead_letters('j065_rls') };
is(scalar(@dl), 10, 'the ten rows the policy refuses are dead letters');
is(join(',', map { $_->{offset} } @dl), '0,10,20,30,40,50,60,70,80,90', '... at their positions');
is(scalar(grep { $_->{stage} eq 'sink' } @dl), 10, '... of stage sink');
like($dl[0]{error}, qr/verletzt Policy für Sicherheit auf Zeilenebene/,
	"... whose error is in German (so the message text says nothing to mailer): $dl[0]{error}");
unlike($dl[0]{error}, qr/row-level security/, '... and not in English');

# A missing privilege is not a row's fault: the checkpoint fails, no row is
# dead-lettered, and the job goes on once the privilege is back.
psql_as($owner, q{SELECT mailer.create_job('j065_priv', $${"source": {"type": "generator", "rate": 200},
	"steps": [{"map": {"order_id": "(value->>'order_id')::int"}}],
	"sink": {"type": "table", "table": "t065_priv"}}$$)});
wait_until('the job wrote rows', sub { psql("SELECT count(*) FROM t065_priv") > 0 }, 60);
psql("REVOKE INSERT ON t065_priv FROM $owner");
$info = wait_job_state('j065_priv', qr/^restarting$/, 60);
like($info->{last_error}, qr/keine Berechtigung für Tabelle t065_priv/,
	"INSERT revoked: the job retries and says why, in German: $info->{last_error}");
is(scalar(@{ dead_letters('j065_priv') }), 0, '... and no row became a dead letter');
psql("GRANT INSERT ON t065_priv TO $owner");
wait_job_state('j065_priv', qr/^running$/, 60);
my $count = psql("SELECT count(*) FROM t065_priv");
wait_until('INSERT granted again: the job writes again', sub { psql("SELECT count(*) FROM t065_priv") > $count }, 60);
is(scalar(@{ dead_letters('j065_priv') }), 0, '... still without dead letters');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
psql("ALTER ROLE $owner RESET lc_messages");
done_testing();
