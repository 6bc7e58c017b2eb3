# A Pulsar source's and sink's options (issue 18, "Security"; README,
# "Pulsar"): what a role without privileges may give, and a token that is
# sent on every request and shown nowhere. No broker: a loopback HTTP
# service that logs each request's path and Authorization header stands in
# for one (test/t/long/215 runs a real broker with tokens and TLS).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerPulsarTest;
use Test::More;

my $port = test_port(27000);
my $svc = "http://127.0.0.1:$port";
my $log = ($ENV{MAILER_RUN_DIR} // '/tmp') . "/t216_requests.$$";
my $role = 't216_plain';
my $secret = 'eyJ0MjE2.SECRET-t216-source.c2ln';
my $sink_secret = 'eyJ0MjE2.SECRET-t216-sink.c2ln';
my $pem = '-----BEGIN CERTIFICATE-----\nMIIBt216\n-----END CERTIFICATE-----\n';

fresh_with_owner('t216', $role);
psql("GRANT CREATE ON SCHEMA public TO $role");
psql_as($role, 'CREATE TABLE t216_out (value jsonb)');
my $log_from = pg_log_size();

sub source_spec
{
	my ($url, $options) = @_;
	return qq{{"source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://a/b/c", "options": $options},
	  "sink": {"type": "table", "table": "t216_out", "mode": "append"}, "state": {"backend": "memory"}}};
}

sub sink_spec
{
	my ($url, $options) = @_;
	return qq{{"source": {"type": "generator", "events": 10},
	  "sink": {"type": "pulsar", "service_url": "$url", "topic": "persistent://a/b/out", "options": $options}}};
}

# The options a plain role may not give, each refused with its path, an
# errcode and a hint; a token's value never in the error.
my @refused = (
	[ source_spec('https://127.0.0.1:1', '{"tls.ca.location": "/etc/ssl/certs/ca-certificates.crt"}'),
	  '42501', 'permission denied to set source.options.tls.ca.location', 'Give the certificate inline in "tls.ca.pem"' ],
	[ sink_spec('https://127.0.0.1:1', '{"tls.ca.location": "/etc/ssl/certs/ca-certificates.crt"}'),
	  '42501', 'permission denied to set sink.options.tls.ca.location', 'grant pg_read_server_files' ],
	[ source_spec('https://127.0.0.1:1', '{"tls.verify": "false"}'),
	  '22023', 'source.options.tls.verify: not a Pulsar option: only the CA can be given, and certificate verification cannot be turned off',
	  'the broker\'s certificate is always verified' ],
	[ sink_spec('https://127.0.0.1:1', '{"tls.insecure": "true"}'),
	  '22023', 'sink.options.tls.insecure: not a Pulsar option', 'A Pulsar source or sink takes "auth.token"' ],
	[ source_spec($svc, qq{{"auth.token": "Bearer $secret"}}),
	  '22023', 'source.options.auth.token: a token is visible ASCII characters without spaces', 'the value is not shown' ],
	[ source_spec($svc, qq{{"tls.ca.pem": "$pem"}}),
	  '22023', 'source.options.tls.ca.pem: a CA certificate applies to an https:// service_url only', 'Give an https:// service_url' ],
);
for my $r (@refused)
{
	my ($spec, $code, $msg, $hint) = @$r;
	my $err = psql_fails_as($role, qq{SELECT mailer.create_job('t216', \$\$$spec\$\$)});
	like($err, qr/ERROR:  $code:.*\Q$msg\E/s, "refused: $msg");
	like($err, qr/HINT:  .*\Q$hint\E/s, '  with a hint saying what is accepted');
	unlike($err, qr/SECRET-t216/, '  without the token');
}
# Inline, the CA is any role's to give.
psql_as($role, qq{SELECT mailer.create_job('t216', \$\$@{[ source_spec('https://127.0.0.1:1', qq{{"auth.token": "$secret", "tls.ca.pem": "$pem"}}) ]}\$\$)});
pass('a plain role gives a token and an inline CA');
psql_as($role, "SELECT mailer.stop_job('t216'); SELECT mailer.drop_job('t216')");

# A broker that refuses the token: the job says so in last_error, the
# token goes as "Authorization: Bearer" on each admin call, and is shown
# nowhere.
unlink $log;
my $fake = fake_server_start($port, 'internal_service.py', $port, 401, $log, 'auth');
psql_as($role, qq{SELECT mailer.create_job('t216', \$\$@{[ source_spec($svc, qq{{"auth.token": "$secret"}}) ]}\$\$)});
my $error;
wait_until('the source to report the refused token', sub {
	$error = psql_as($role, "SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = 't216'");
	return $error ne '';
}, 30);
like($error, qr/HTTP 401: not authenticated: the broker wants a valid token \(check the options' "auth\.token"\)/,
	"a refused token: last_error says so: $error");
unlike($error, qr/SECRET-t216/, '  without the token');
fake_server_stop($fake);

sub requests
{
	open my $f, '<', $log or return ();
	return map { chomp; [ split /\t/, $_, 2 ] } <$f>;
}
my @req = requests();
ok(@req > 0 && !grep({ ($_->[1] // '') ne "Bearer $secret" } @req), 'every admin call sent the token as a Bearer token');

# A broker that answers: the reader's WebSocket upgrade carries it too.
unlink $log;
$fake = fake_server_start($port, 'internal_service.py', $port, 200, $log, 'auth');
wait_until('the reader to ask for its upgrade', sub { grep { $_->[0] =~ m{^/ws/v2/reader/} } requests() }, 60);
my @ws = grep { $_->[0] =~ m{^/ws/v2/reader/} } requests();
is($ws[0][1], "Bearer $secret", 'the WebSocket upgrade sent the token as a Bearer token');

# Stored and shown masked; the stored spec, given back, keeps the token.
my $stored = psql_as($role, "SELECT spec FROM mailer.jobs WHERE name = 't216'");
like($stored, qr/"auth\.token": "\*\*\*\*\*\*\*\*"/, 'mailer.jobs shows the token masked');
unlike($stored, qr/SECRET-t216/, '  and not the token');
my $described = psql_as($role, "SELECT mailer.describe_job(spec) FROM mailer.jobs WHERE name = 't216'");
like($described, qr/option auth\.token = \*\*\*\*\*\*\*\*/, 'describe_job shows the token masked');
$described = psql_as($role, qq{SELECT mailer.describe_job(\$\$@{[ source_spec($svc, qq{{"auth.token": "$secret"}}) ]}\$\$)});
unlike($described, qr/SECRET-t216/, 'describe_job of the spec as given does not show the token');
is(psql_as($role, "SELECT secrets->>'auth.token' FROM mailer.job_secret JOIN mailer.job USING (job_id) WHERE name = 't216'"),
	$secret, "the token is kept in mailer.job_secret, the owner's to read");
psql_as($role, "SELECT mailer.stop_job('t216')");
psql_as($role, "SELECT mailer.alter_job('t216', spec) FROM mailer.jobs WHERE name = 't216'");
unlink $log;
psql_as($role, "SELECT mailer.start_job('t216')");
wait_until('the restarted source to call the broker', sub { scalar requests() }, 30);
@req = requests();
is($req[0][1], "Bearer $secret", 'after alter_job with the masked spec, the job still sends its token');
psql_as($role, "SELECT mailer.stop_job('t216'); SELECT mailer.drop_job('t216')");

# The sink: the admin calls before its producer opens carry its own token
# (the fake's topic has partitions, so the sink refuses it and waits).
unlink $log;
psql_as($role, qq{SELECT mailer.create_job('t216s', \$\$@{[ sink_spec($svc, qq{{"auth.token": "$sink_secret"}}) ]}\$\$)});
wait_until('the sink to report the topic', sub {
	$error = psql_as($role, "SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = 't216s'");
	return $error ne '';
}, 30);
# Only the sink's own calls: the source job stopped above may have had a
# call of its own in flight, which the fake logs when it ends.
@req = grep { $_->[0] =~ m{/a/b/out} } requests();
ok(@req > 0 && !grep({ ($_->[1] // '') ne "Bearer $sink_secret" } @req), 'the sink sent its token on its admin calls');
like(psql_as($role, "SELECT spec FROM mailer.jobs WHERE name = 't216s'"), qr/"auth\.token": "\*\*\*\*\*\*\*\*"/,
	"mailer.jobs shows the sink's token masked");
unlike($error, qr/SECRET-t216/, "the sink's last_error does not show its token: $error");
psql_as($role, "SELECT mailer.stop_job('t216s'); SELECT mailer.drop_job('t216s')");
fake_server_stop($fake);
unlink $log;

# The server log: neither token, from any statement, error or worker.
my $server_log = pg_log_since($log_from);
ok(length($server_log) > 0, 'the server log was written meanwhile');
unlike($server_log, qr/SECRET-t216/, 'the server log shows no token');

# A CA file that is not a regular file (a FIFO, whose open would block
# for good, a device that never ends): the worker reads the file itself,
# refuses it with a clear last_error, and stays stoppable.
{
	my $fifo = ($ENV{MAILER_RUN_DIR} // '/tmp') . "/t216_fifo.$$";
	unlink $fifo;
	system('mkfifo', '-m', '644', $fifo) == 0 or die "mkfifo: $!";
	psql("GRANT pg_read_server_files TO $role");
	for my $file ($fifo, '/dev/urandom')
	{
		psql_as($role, qq{SELECT mailer.create_job('t216f', \$\$@{[ source_spec("https://127.0.0.1:$port", qq{{"tls.ca.location": "$file"}}) ]}\$\$)});
		my $err = '';
		wait_until("the CA file $file to be refused", sub {
			$err = psql_as($role, "SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = 't216f'");
			return $err =~ /is not a regular file/;
		}, 30);
		like($err, qr/the Pulsar CA file "\Q$file\E" \(options\.tls\.ca\.location\) is not a regular file of at most 1 MB/,
			"a CA file that is not a regular file ($file) is refused: $err");
		is(psql_fails_as($role, "SELECT mailer.stop_job('t216f', '20 seconds')"), '', '  and the job stops');
		psql_as($role, "SELECT mailer.drop_job('t216f')");
	}
	psql("REVOKE pg_read_server_files FROM $role");
	unlink $fifo;
}

psql_as($role, 'DROP TABLE t216_out');
drop_roles($role);
done_testing();
