# A Pulsar broker with token authentication and TLS (issue 18, "Security"):
# a standalone of its own (pulsar.sh with PULSAR_SECURE=1: a secret key, a
# CA and a certificate for 127.0.0.1 made by openssl), started beside the
# plain one, on ports of its own. A wrong token, a missing CA and a host
# name the certificate does not name each give a clear last_error, not a
# hang; the right token moves the data through a source and a sink over
# https:// and wss://; no token is shown in any view or the server log.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerPulsarTest;
use Test::More;

my $x = ($ENV{PGPORT} // 54329) % 1000;
$ENV{PULSAR_SECURE} = 1;
$ENV{PULSAR_DIR} = ($ENV{MAILER_RUN_DIR} // '/tmp/mailer-run') . '/pulsar-secure';
$ENV{PULSAR_HTTP_PORT} = 24000 + $x;
$ENV{PULSAR_PORT} = 25000 + $x;
$ENV{PULSAR_BOOKIE_PORT} = 22000 + $x;
$ENV{PULSAR_HTTPS_PORT} = 21000 + $x;
$ENV{PULSAR_URL} = "http://127.0.0.1:$ENV{PULSAR_HTTP_PORT}";
pulsar_start_or_skip();
END { eval { pulsar('stop') } if $ENV{PULSAR_SECURE}; }

# The tool (pt_produce, pt_read) and pulsar.sh go over http with the admin
# token; the jobs over https with tokens of their own.
chomp(my $admin_token = pulsar('token', 'admin'));
$ENV{PULSAR_TOKEN} = $admin_token;
chomp(my $token = pulsar('token', 't215-jobs'));
my $bad_token = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0MjE1In0.BADSIGNATURE-t215';
my $ca_file = "$ENV{PULSAR_DIR}/secure/ca.cert.pem";
open my $f, '<', $ca_file or die "$ca_file: $!";
my $ca = do { local $/; <$f> };
close $f;
(my $ca_json = $ca) =~ s/\n/\\n/g;
# A bundle whose first certificate is another CA's: every certificate of
# an inline PEM is trusted, not the first alone.
my $other = "$ENV{PULSAR_DIR}/secure/t215_other_ca.pem";
system("openssl req -x509 -newkey rsa:2048 -nodes -days 3 -subj '/CN=t215 other CA' -keyout $other.key -out $other >/dev/null 2>&1") == 0
  or die "openssl failed\n";
open $f, '<', $other or die "$other: $!";
(my $bundle_json = do { local $/; <$f> } . $ca) =~ s/\n/\\n/g;
close $f;
my $https = "https://127.0.0.1:$ENV{PULSAR_HTTPS_PORT}";
my $role = 't215_plain';
my $in = "public/default/t215_in_$$";
my $out = "public/default/t215_out_$$";
my $n = 20;

fresh_with_owner('t215', $role);
psql("GRANT CREATE ON SCHEMA public TO $role");
psql_as($role, 'CREATE TABLE t215_rows (value jsonb)');
my $log_from = pg_log_size();
pulsar('create-topic', $in, 2);
pulsar('create-topic', $out, 0);
for my $p (0, 1)
{
	pt_produce("$in-partition-$p", "t215-$p", 0, [ map { qq({"n": $_}) } grep { $_ % 2 == $p } 1 .. $n ]);
}

sub source_job
{
	my ($name, $url, $options) = @_;
	psql_as($role, qq{SELECT mailer.create_job('$name', \$\${
	  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$in", "options": $options},
	  "sink": {"type": "table", "table": "t215_rows", "mode": "append"}, "state": {"backend": "memory"},
	  "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
}

sub last_error_of
{
	my ($name, $what) = @_;
	my $error;
	wait_until("$name to report $what", sub {
		$error = psql_as($role, "SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = '$name'");
		return $error ne '';
	}, 60);
	return $error;
}

# Refusals: each a clear last_error, the job waiting, nothing read.
my @cases = (
	[ 't215_bad_token', $https, qq({"auth.token": "$bad_token", "tls.ca.pem": "$ca_json"}), 'a wrong token',
	  qr/HTTP 401: not authenticated: the broker wants a valid token/ ],
	[ 't215_no_token', $https, qq({"tls.ca.pem": "$ca_json"}), 'no token',
	  qr/HTTP 401: not authenticated/ ],
	[ 't215_no_ca', $https, qq({"auth.token": "$token"}), 'a CA the system does not trust',
	  qr/TLS: SSL certificate problem: .*the broker's certificate must be signed by the CA given/ ],
	[ 't215_host', "https://localhost:$ENV{PULSAR_HTTPS_PORT}", qq({"auth.token": "$token", "tls.ca.pem": "$ca_json"}),
	  'a host name the certificate does not name', qr/TLS: .*(subject name|host name|localhost)/ ],
);
for my $c (@cases)
{
	my ($name, $url, $options, $what, $want) = @$c;
	source_job($name, $url, $options);
	my $error = last_error_of($name, $what);
	like($error, $want, "$what: last_error says so: $error");
	unlike($error, qr/BADSIGNATURE|\Q$token\E/, "$what: last_error shows no token");
	like(psql_as($role, "SELECT state FROM mailer.jobs WHERE name = '$name'"), qr/^(waiting|running|starting)$/,
		"$what: the job waits for the broker, it does not fail");
	psql_as($role, "SELECT mailer.stop_job('$name'); SELECT mailer.drop_job('$name')");
}
is(psql('SELECT count(*) FROM t215_rows'), 0, 'nothing was read without the right token and CA');

# The jobs above met the admin API first; the WebSocket transport (the
# source's readers, the sink's producer: connectors/pulsar_ws.c) refuses
# the same way, through test/pulsar_tool.
{
	local $ENV{PULSAR_URL} = $https;
	local $ENV{PULSAR_CA_FILE} = $ca_file;
	local $ENV{PULSAR_TOKEN} = $bad_token;
	my ($rc, undef, $err) = pt_read("$in-partition-0", 'earliest', 1);
	like($err, qr/the broker refused the upgrade \(HTTP 401: not authenticated: the broker wants a valid token/, "wss://, a wrong token: $err");
	$ENV{PULSAR_TOKEN} = $token;
	$ENV{PULSAR_URL} = "https://localhost:$ENV{PULSAR_HTTPS_PORT}";
	($rc, undef, $err) = pt_read("$in-partition-0", 'earliest', 1);
	like($err, qr/over TLS .*its certificate failed a check .*name the service URL's host/, "wss://, a host the certificate does not name: $err");
	$ENV{PULSAR_URL} = $https;
	delete $ENV{PULSAR_CA_FILE};
	($rc, undef, $err) = pt_read("$in-partition-0", 'earliest', 1);
	like($err, qr/over TLS .*its certificate failed a check/, "wss://, no CA: $err");
	$ENV{PULSAR_CA_FILE} = $ca_file;
	my $lines;
	($rc, $lines, $err) = pt_read("$in-partition-0", 'earliest', $n / 2);
	is($rc, 0, "wss://, the right token and CA: the partition's messages read $err");
}

# The right token and the CA inline, in a bundle (a plain role): every
# record, once.
source_job('t215', $https, qq({"auth.token": "$token", "tls.ca.pem": "$bundle_json"}));
is(psql_as($role, "SELECT mailer.wait_job('t215', '90 seconds')"), 'running', 'the source read the topic over https with its token');
is(psql('SELECT count(DISTINCT value) FROM t215_rows'), $n, "each of the $n records read");
is(psql('SELECT count(*) FROM t215_rows'), $n, '  once');

# A sink over wss:// too, with the CA as a server file (a superuser's).
psql(qq{SELECT mailer.create_job('t215_sink', \$\${
  "source": {"type": "pulsar", "service_url": "$https", "topic": "persistent://$in", "format": "text",
             "options": {"auth.token": "$token", "tls.ca.location": "$ca_file"}},
  "sink": {"type": "pulsar", "service_url": "$https", "topic": "persistent://$out", "value": "value", "format": "text",
           "options": {"auth.token": "$token", "tls.ca.location": "$ca_file"}},
  "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
is(psql("SELECT mailer.wait_job('t215_sink', '90 seconds')"), 'running', 'the passthrough read its input over https');
my ($rc, $lines, $err);
wait_until('the sink to publish every record', sub {
	($rc, $lines, $err) = pt_read($out, 'earliest', $n);
	return $rc == 0;
}, 60);
my %seen = map { my @c = split /\t/; ($c[4] => 1) } @$lines;
is(scalar(keys %seen), $n, "the sink published each of the $n records over wss:// with its token");

# Nowhere shown: the views, describe_job, last_error, the server log.
my $views = psql(q{SELECT string_agg(coalesce(spec::text, '') || coalesce(last_error, ''), ' ') FROM mailer.jobs})
  . psql(q{SELECT string_agg(mailer.describe_job(spec), ' ') FROM mailer.jobs});
unlike($views, qr/\Q$token\E|BADSIGNATURE/, 'mailer.jobs and describe_job show no token');
like($views, qr/"auth\.token": "\*\*\*\*\*\*\*\*"/, '  but the mask');
unlike(pg_log_since($log_from), qr/\Q$token\E|BADSIGNATURE/, 'the server log shows no token');

psql("SELECT mailer.stop_job('t215_sink'); SELECT mailer.drop_job('t215_sink')");
psql_as($role, "SELECT mailer.stop_job('t215'); SELECT mailer.drop_job('t215')");
psql_as($role, 'DROP TABLE t215_rows');
pulsar('delete-topic', $in);
pulsar('delete-topic', $out);
drop_roles($role);
done_testing();
