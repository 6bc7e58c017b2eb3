# A job's secrets stay out of pg_stat_activity and the server log whatever
# the logging settings and whatever becomes of the statement:
# - pg_stat_activity, read by a pg_read_all_stats role (a monitoring role,
#   not a superuser), does not show the create_job statement's text, also
#   while the creating session sits idle after it;
# - log_min_duration_statement, as sites set it to find slow queries, logs
#   a stand-in for the statement;
# - a spec that is not valid JSON fails before create_job runs: the error
#   is logged without the statement and without the JSON error's context.
# (A Pulsar token here; Kafka's secret options go the same way.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;
use IPC::Run;

my $role = 't217_plain';
my $monitor = 't217_monitor';
my $secret = 'eyJ0MjE3.SECRET-t217-token.c2ln';
fresh_with_owner('t217', $role);
drop_roles($monitor);
psql("CREATE ROLE $monitor LOGIN; GRANT pg_read_all_stats TO $monitor");
psql("GRANT CREATE ON SCHEMA public TO $role");
psql_as($role, 'CREATE TABLE t217_out (value jsonb)');

my $spec = qq{{"source": {"type": "pulsar", "service_url": "https://127.0.0.1:1", "topic": "persistent://a/b/c",
  "options": {"auth.token": "$secret"}},
  "sink": {"type": "table", "table": "t217_out", "mode": "append"}, "state": {"backend": "memory"}}};

# A session (a pooled connection, an application) that creates the job
# and then stays connected, idle.
my ($in, $out, $err) = ('', '', '');
my $h = IPC::Run::start([ 'psql', '-X', '-q', '-A', '-t', '-U', $role ], \$in, \$out, \$err);
$in .= "SELECT mailer.create_job('t217', \$\$$spec\$\$);\n";
$h->pump until $out =~ /\d/;
my $seen = psql_as($monitor, "SELECT coalesce(string_agg(query, ' '), '') FROM pg_stat_activity WHERE usename = '$role'");
unlike($seen, qr/SECRET-t217/, 'a pg_read_all_stats role does not see the token in pg_stat_activity');
like($seen, qr/SELECT mailer\.create_job\('t217', <the spec is not shown: it may hold a job's secrets>\)/,
	'  but the call, by its job\'s name');
$in .= "\\q\n";
$h->finish;
psql_as($role, "SELECT mailer.stop_job('t217'); SELECT mailer.drop_job('t217')");

# log_min_duration_statement, as sites set it to find slow queries.
psql("ALTER ROLE $role SET log_min_duration_statement = 0");
my $from = pg_log_size();
psql_as($role, qq{SELECT mailer.create_job('t217', \$\$$spec\$\$)});
psql_as($role, "SELECT mailer.stop_job('t217'); SELECT mailer.drop_job('t217')");
my $duration_log = pg_log_since($from);
like($duration_log, qr/duration: .*the statement is not shown: it may hold a mailer job's secrets/,
	'log_min_duration_statement logs the statement as a stand-in');
unlike($duration_log, qr/SECRET-t217/, 'log_min_duration_statement does not write the token to the server log');

psql_as($role, 'DROP TABLE t217_out');

# A spec that is not valid JSON (a trailing comma).
$from = pg_log_size();
$err = psql_fails_as($role, q{SELECT mailer.create_job('t217_typo', $${"source": {"type": "pulsar", "service_url": "https://127.0.0.1:1",
  "topic": "persistent://a/b/c", "options": {"auth.token": "eyJ0MjE3.SECRET-t217-typo-token.c2ln",}},
  "sink": {"type": "table", "table": "t217_out", "mode": "append"}}$$)});
like($err, qr/invalid input syntax for type json/, 'the spec is refused as JSON');
my $typo_log = pg_log_since($from);
like($typo_log, qr/invalid input syntax for type json/, 'the error is logged');
unlike($typo_log, qr/SECRET-t217-typo/, 'the server log does not show the token');
drop_roles($role, $monitor);
done_testing();
