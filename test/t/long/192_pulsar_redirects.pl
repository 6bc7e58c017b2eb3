# Redirects from a Pulsar service_url, which any role that may create a job
# names (README, "Security"): only the fixed paths are ever asked.
#  - The reader's WebSocket upgrade never follows a redirect: the session
#    fails with a last_error that says so, and the redirect's target is
#    never contacted (libwebsockets follows by default: a plain role's job
#    made the server GET any URL, the target's status in last_error). A
#    session the server closes shows its close code, never its reason text.
#  - The admin calls follow a 307/308 that asks the same path and query on
#    another broker, over http, as a broker that does not own a partition
#    answers (Pulsar adds ?authoritative=): on a cluster of more than one
#    broker, wait_job returns and a "latest" job starts. Any other redirect
#    (another path, query, scheme, a user name, more than 3 hops) is
#    refused, its target never contacted, and last_error says why, also
#    when wait_job's marks wait on it.
# test/lib/pulsar_front.py plays the broker that does not own partition 1,
# in front of the standalone. Takes about a minute, hence test/t/long.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

my $front_port = test_port(24000);
my $target_port = test_port(25000);
my $run = $ENV{MAILER_RUN_DIR} // '/tmp';
my $front_log = "$run/t192_front.$$";
my $target_log = "$run/t192_target.$$";
my $role = 't192_plain';

sub lines_of
{
	my ($file) = @_;
	open my $f, '<', $file or return ();
	my @lines = <$f>;
	return @lines;
}

sub last_error
{
	my ($job, %opt) = @_;
	return psql("SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = '$job'", %opt);
}

# A plain role's job reading topic a/b/c of the fake broker at the front
# port into t192_ws: its last_error once that matches $until.
sub plain_job_error
{
	my ($job, $until) = @_;
	my $error;
	psql_as($role, qq{SELECT mailer.create_job('$job', \$\${
	  "source": {"type": "pulsar", "service_url": "http://127.0.0.1:$front_port", "topic": "persistent://a/b/c"},
	  "sink": {"type": "table", "table": "t192_ws", "mode": "append"}, "state": {"backend": "memory"}
	}\$\$)});
	wait_until("$job to say why its reader does not open", sub {
		$error = last_error($job, user => $role);
		return $error =~ $until;
	}, 30);
	return $error;
}

fresh_with_owner('t192', $role);
psql("GRANT CREATE ON SCHEMA public TO $role");

# --- A: the WebSocket upgrade answered 302 to an internal URL, a plain role's job.
unlink $target_log;
my $target = fake_server_start($target_port, 'internal_service.py', $target_port, 403, $target_log);
unlink $front_log;
my $fake = fake_server_start($front_port, 'fake_pulsar.py', $front_port, 'redirect-ws', 0, $front_log,
	"http://127.0.0.1:$target_port/internal/admin/delete-everything?confirm=yes");
psql_as($role, 'DROP TABLE IF EXISTS t192_ws; CREATE TABLE t192_ws (value jsonb)');
my $error = plain_job_error('t192_ws', qr/WebSocket/);
like($error, qr/the WebSocket upgrade was redirected \(HTTP 302\); mailer does not follow redirects: give service_url a broker that serves the WebSocket API or a Pulsar proxy/,
	"WebSocket redirect: last_error says it is not followed: $error");
unlike($error, qr/403|internal|delete|confirm/, 'WebSocket redirect: nothing of the target in last_error');
wait_until('the reader to be redirected three times', sub {
	scalar(grep { m{^/ws/} } lines_of($front_log)) >= 3;
}, 30);
is(scalar(@{[ lines_of($target_log) ]}), 0, 'WebSocket redirect: the target was never contacted');
psql_as($role, "SELECT mailer.drop_job('t192_ws')");
fake_server_stop($fake);

# --- A's kin: a WebSocket service that takes the upgrade and closes the
# session with a reason of its own: last_error keeps the close code only.
$fake = fake_server_start($front_port, 'fake_pulsar.py', $front_port, 'close-ws', 0, '',
	'SECRET-of-the-internal-service');
$error = plain_job_error('t192_close', qr/closed the session/);
like($error, qr/the broker closed the session \(WebSocket close code 1000\)/, "close frame: last_error has its code: $error");
unlike($error, qr/SECRET/, 'close frame: nothing of its reason text in last_error');
psql_as($role, "SELECT mailer.drop_job('t192_close')");
fake_server_stop($fake);

# --- E: a 2-partition topic; the front redirects partition 1's admin calls.
pulsar_start_or_skip();
my $url = pulsar_url();
my ($pulsar_port) = $url =~ /:(\d+)$/;
my $front_url = "http://127.0.0.1:$front_port";
my $topic = 'public/default/' . unique_name('t192');
pulsar('create-topic', $topic, 2);
pulsar_produce_lines("$topic-partition-0", join('', map { qq({"i":$_}\n) } 1 .. 3));
pulsar_produce_lines("$topic-partition-1", join('', map { qq({"i":$_}\n) } 4 .. 6));
psql('DROP TABLE IF EXISTS t192_all; CREATE TABLE t192_all (i int)');
psql('DROP TABLE IF EXISTS t192_new; CREATE TABLE t192_new (i int)');

sub create_job
{
	my ($job, $table, $start) = @_;
	psql(qq{SELECT mailer.create_job('$job', \$\${
	  "source": {"type": "pulsar", "service_url": "$front_url", "topic": "persistent://$topic", "start": "$start"},
	  "steps": [{"map": {"i": "(value->>'i')::int"}}],
	  "sink": {"type": "table", "table": "$table", "mode": "append"}, "state": {"backend": "memory"}
	}\$\$)});
}

# The same path on the owner, as Pulsar redirects (the standalone plays the owner).
unlink $front_log;
my $front = fake_server_start($front_port, 'pulsar_front.py', $front_port, $pulsar_port, 1,
	"http://127.0.0.1:$pulsar_port\{path}?authoritative=false", $front_log);
create_job('t192_all', 't192_all', 'earliest');
create_job('t192_new', 't192_new', 'latest');
wait_job_running('t192_new');
# The latest job is positioned (its lastMessageId of partition 1 came through the redirect).
wait_until('t192_new to pin its positions', sub { job_epoch('t192_new') > 0 }, 60);
pulsar_produce_lines("$topic-partition-1", qq({"i":7}\n{"i":8}\n));
is(psql("SELECT mailer.wait_job('t192_all', '60 s')"), 'running', 'same-path 307: wait_job returns (earliest job)');
is(psql("SELECT string_agg(i::text, ',' ORDER BY i) FROM t192_all"), '1,2,3,4,5,6,7,8', '  every message once');
is(psql("SELECT mailer.wait_job('t192_new', '60 s')"), 'running', 'same-path 307: wait_job returns ("latest" job)');
is(psql("SELECT string_agg(i::text, ',' ORDER BY i) FROM t192_new"), '7,8', '  the messages after its start, once');
is(last_error('t192_all') . last_error('t192_new'), '', '  no error');
ok(scalar(grep { m{-partition-1/lastMessageId$} } lines_of($front_log)) > 0,
	'  partition 1\'s lastMessageId was asked of the front (and redirected)');
psql("SELECT mailer.drop_job('t192_all'); SELECT mailer.drop_job('t192_new')");
fake_server_stop($front);

# Redirects that are not the same request elsewhere: refused, the target never contacted.
my @refused = (
	[ 'another path', "http://127.0.0.1:$target_port/internal/admin/delete-everything", qr/HTTP 307: redirected elsewhere than the same path on another broker/ ],
	[ 'another query', "http://127.0.0.1:$target_port\{path}?confirm=yes", qr/HTTP 307: redirected elsewhere/ ],
	[ 'a user name', "http://admin:secret\@127.0.0.1:$target_port\{path}", qr/HTTP 307: redirected elsewhere/ ],
	[ 'https', "https://127.0.0.1:$target_port\{path}", qr/HTTP 307: redirected elsewhere/ ],
	[ 'a dot segment', "http://127.0.0.1:$target_port\{path}/../../../internal", qr/HTTP 307: redirected elsewhere/ ],
	[ 'a loop', "$front_url\{path}", qr/HTTP 307: redirected more than 3 times, not followed further/ ],
);
for my $r (@refused)
{
	my ($what, $location, $want) = @$r;
	unlink $front_log, $target_log;
	$front = fake_server_start($front_port, 'pulsar_front.py', $front_port, $pulsar_port, 1, $location, $front_log);
	psql('TRUNCATE t192_new');
	create_job('t192_new', 't192_new', 'latest');
	wait_until("$what: t192_new to say why it does not start", sub {
		$error = last_error('t192_new');
		return $error =~ /lastMessageId/;
	}, 30);
	like($error, qr/waiting for Pulsar: topic "[^"]+": GET \S+-partition-1\/lastMessageId: $want/, "$what: refused: $error");
	unlike($error, qr/internal|confirm|secret|admin:|403/, "$what: nothing of the Location's path or the target in last_error");
	is(scalar(@{[ lines_of($target_log) ]}), 0, "$what: the target was never contacted");
	psql("SELECT mailer.drop_job('t192_new')");
	fake_server_stop($front);
}

# wait_job's marks wait on a refused redirect: last_error says why.
unlink $target_log;
$front = fake_server_start($front_port, 'pulsar_front.py', $front_port, $pulsar_port, 1,
	"http://127.0.0.1:$target_port/internal/admin/delete-everything", $front_log);
psql('TRUNCATE t192_all');
create_job('t192_all', 't192_all', 'earliest');
wait_until('t192_all to read every message', sub { psql('SELECT count(*) FROM t192_all') == 8 }, 60);
my $fails = psql_fails("SELECT mailer.wait_job('t192_all', '4 s')");
like($fails, qr/did not commit its available input within 4000 ms/, 'refused redirect: wait_job times out');
like(last_error('t192_all'),
	qr/waiting for Pulsar: topic "[^"]+": wait_job's mark of partition 1: GET \S+-partition-1\/lastMessageId: HTTP 307: redirected elsewhere than the same path on another broker/,
	'  and last_error says why: ' . last_error('t192_all'));
is(scalar(@{[ lines_of($target_log) ]}), 0, '  the target was never contacted');
psql("SELECT mailer.drop_job('t192_all')");
fake_server_stop($target);
fake_server_stop($front);
unlink $front_log, $target_log;
done_testing();
