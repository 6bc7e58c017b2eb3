# Any role that may create a job names a Pulsar service_url, as it names
# Kafka brokers: the server then reaches that host (README, "Security").
# What such a server answers never reaches the job's owner: last_error
# gives the HTTP status and what it means, not the body (the review's
# finding 3: a plain role read a loopback service's secret there).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

my $port = test_port(27000);
my $log = ($ENV{MAILER_RUN_DIR} // '/tmp') . "/t186_requests.$$";
my $role = 't186_plain';

fresh_with_owner('t186', $role);
psql("GRANT CREATE ON SCHEMA public TO $role");

for my $status (403, 200, 500)
{
	unlink $log;
	my $svc = fake_server_start($port, 'internal_service.py', $port, $status, $log);
	psql_as($role, 'DROP TABLE IF EXISTS t186_out; CREATE TABLE t186_out (value jsonb)');
	psql_as($role, qq{SELECT mailer.create_job('t186', \$\${
	  "source": {"type": "pulsar", "service_url": "http://127.0.0.1:$port", "topic": "persistent://a/b/c"},
	  "sink": {"type": "table", "table": "t186_out", "mode": "append"}, "state": {"backend": "memory"}
	}\$\$)});
	my $error;
	wait_until("t186 to report what it waits on (HTTP $status)", sub {
		$error = psql_as($role, "SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = 't186'");
		return $error ne '';
	}, 30);
	unlike($error, qr/hunter2/, "HTTP $status: last_error does not show the service's body");
	like($error, $status == 403 ? qr/HTTP 403: not authorized/
		: $status == 500 ? qr/HTTP 500: the broker failed/
		: qr/not an answer of Pulsar's admin API|cannot open the WebSocket session/,
		"HTTP $status: last_error says what the status means: $error");
	psql_as($role, "SELECT mailer.drop_job('t186')");
	fake_server_stop($svc);
	open my $f, '<', $log or die "$log: $!";
	my @paths = <$f>;
	ok(@paths > 0 && !grep({ !m{^/(admin/v2/persistent|ws/v2/reader/persistent)/a/b/c\b} } @paths),
		"HTTP $status: the server asked only for the topic's admin and reader paths");
}
unlink $log;

# The URL and the topic are checked at create_job, with the JSON path and
# a hint: a dot segment would make the admin API's path another (finding
# 5), and a host or port the worker cannot use would leave the job waiting
# forever (finding 6). A topic whose name merely contains "-partition-" is
# a topic (finding 11).
psql_as($role, 'DROP TABLE IF EXISTS t186_out; CREATE TABLE t186_out (value jsonb)');
my $svc = "http://127.0.0.1:$port";
my @bad = (
	[ $svc, 'persistent://../../x', 'source.topic', 'a tenant, namespace or topic may not be "." or ".."' ],
	[ $svc, 'persistent://public/./x', 'source.topic', 'may not be "." or ".."' ],
	[ $svc, 'persistent://public/default/..', 'source.topic', 'may not be "." or ".."' ],
	[ $svc, 'persistent://public/default', 'source.topic', 'give tenant, namespace and topic' ],
	[ $svc, 'persistent://public/default/x-partition-3', 'source.topic', 'names one partition of a topic' ],
	[ 'http://:8080', 'persistent://a/b/c', 'source.service_url', 'the host must be' ],
	[ 'http://127.0.0.1:notaport', 'persistent://a/b/c', 'source.service_url', 'the port must be a number from 1 to 65535' ],
	[ 'http://127.0.0.1:99999', 'persistent://a/b/c', 'source.service_url', 'the port must be a number from 1 to 65535' ],
	[ 'http://127.0.0.1:0', 'persistent://a/b/c', 'source.service_url', 'the port must be a number from 1 to 65535' ],
	[ "http://a\\tb:1", 'persistent://a/b/c', 'source.service_url', 'the host must be' ],
	[ "http://127.0.0.1:28997\\\\x", 'persistent://a/b/c', 'source.service_url', 'the port must be' ],
	[ 'http://[::1:8080', 'persistent://a/b/c', 'source.service_url', 'the host must be' ],
);
for my $b (@bad)
{
	my ($url, $topic, $path, $msg) = @$b;
	my $err = psql_fails_as($role, qq{SELECT mailer.create_job('t186', \$\${
	  "source": {"type": "pulsar", "service_url": "$url", "topic": "$topic"},
	  "sink": {"type": "table", "table": "t186_out", "mode": "append"}}\$\$)});
	like($err, qr/ERROR:  (22023|42602):.*\Q$path\E.*\Q$msg\E/s, "refused: $url $topic: $msg");
	like($err, qr/HINT:  \S/, '  with a hint');
}
for my $ok ([ $svc, 'persistent://public/default/user-partition-events' ],
	[ 'http://[::1]:8080/', 'persistent://public/default/x-partition-' ],
	[ 'http://pulsar-1.example_net', 'persistent://t=1/n:2/x.y-partition-1a' ])
{
	my ($url, $topic) = @$ok;
	psql_as($role, qq{SELECT mailer.create_job('t186', \$\${
	  "source": {"type": "pulsar", "service_url": "$url", "topic": "$topic"},
	  "sink": {"type": "table", "table": "t186_out", "mode": "append"}}\$\$)});
	pass("accepted: $url $topic");
	psql_as($role, "SELECT mailer.stop_job('t186')");
	psql_as($role, "SELECT mailer.drop_job('t186')");
}
psql_as($role, 'DROP TABLE IF EXISTS t186_out');
drop_roles($role);
done_testing();
