# Requests the HTTP endpoint must refuse cleanly, its bearer token, and its
# behaviour under many clients (issue 15, item 4), on a server of the
# test's own with mailer.http_port and mailer.http_token set:
#   - the token: a plain role cannot read it; no or a wrong token is a 401
#     saying nothing more, whatever the path; a reload changes it;
#   - unknown paths and jobs are 404 JSON, other methods 405 with Allow;
#     a 100 kB header and malformed requests get a 4xx or a closed
#     connection, never a hang, and a half-sent request blocks nobody;
#   - a job name in the path is data, never SQL, and no path reads a file;
#   - no secret of a job's spec shows in the API, the page or /metrics;
#   - 50 concurrent clients: every request is answered 200, the job keeps
#     committing checkpoints meanwhile, and the worker's memory does not
#     grow with the number of requests.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use MailerHttp;
use File::Path ();
use File::Temp qw(tempdir);
use IPC::Run ();
use IO::Socket::INET;
use MIME::Base64 ();
use Time::HiRes ();
use JSON::PP ();
use POSIX ();
use Test::More;

my @tempdirs;
my $port = free_port();
my $token = "tok-T142-$$";
mailer_node('http', "mailer.http_port = $port\nmailer.http_token = '$token'\n");
psql("CREATE EXTENSION mailer");

# A request to the node's endpoint, with the token unless told otherwise.
sub req
{
	my ($path, %opt) = @_;
	return http_get($path, port => $port, token => (exists $opt{token} ? $opt{token} : $token), %opt);
}

sub json_error
{
	my ($r) = @_;
	my $body = eval { JSON::PP::decode_json($r->{content}) };
	return ref $body eq 'HASH' ? $body->{error} : undef;
}

wait_until('the HTTP worker answers', sub { req('/metrics')->{status} == 200 }, 60);

# ---------------------------------------------------------------------------
# The token
# ---------------------------------------------------------------------------

psql("CREATE ROLE t142_plain LOGIN");
like(psql_fails_as('t142_plain', 'SHOW mailer.http_token'), qr/must be superuser|permission denied/,
	'a plain role cannot SHOW mailer.http_token');
like(psql_fails_as('t142_plain', "SELECT current_setting('mailer.http_token')"), qr/must be superuser|permission denied/,
	'... nor read it with current_setting');
is(psql_as('t142_plain', "SELECT count(*) FROM pg_settings WHERE name = 'mailer.http_token'"), '0',
	'... nor see it in pg_settings');
is(psql("SHOW mailer.http_token"), $token, 'a superuser reads it');

for my $case ([ 'no token', undef ], [ 'a wrong token', 'tok-wrong' ], [ 'a token one character short', substr($token, 0, -1) ])
{
	my ($what, $t) = @$case;
	for my $path ('/metrics', '/api/jobs', '/api/jobs/x', '/no/such/path')
	{
		my $r = req($path, token => $t);
		is($r->{status}, 401, "$what: GET $path is 401");
		like($r->{headers}{'www-authenticate'} // '', qr/^Bearer\b/, "$what: GET $path asks for a Bearer token")
		  if $path eq '/metrics';
	}
}
my $basic = HTTP::Tiny->new(timeout => 10)->get("http://127.0.0.1:$port/metrics",
	{ headers => { Authorization => "Basic " . MIME::Base64::encode_base64("x:$token", '') } });
is($basic->{status}, 401, 'the token as a Basic password is a 401');
is(req('/metrics')->{status}, 200, 'the right token: 200');

# A reload changes the token.
my $token2 = "tok2-T142-$$";
psql("ALTER SYSTEM SET mailer.http_token = '$token2'");
psql("SELECT pg_reload_conf()");
wait_until('the new token is taken', sub { req('/metrics', token => $token2)->{status} == 200 }, 30);
is(req('/metrics')->{status}, 401, 'after a reload the old token is a 401');
$token = $token2;

# ---------------------------------------------------------------------------
# Paths and methods
# ---------------------------------------------------------------------------

my $r = req('/no/such/path');
is($r->{status}, 404, 'an unknown path: 404');
like($r->{headers}{'content-type'}, qr{^application/json}, '... as JSON');
ok(defined json_error($r), '... {"error": ...}');
is($r->{headers}{'cache-control'}, 'no-store', '... Cache-Control: no-store');
is($r->{headers}{'x-content-type-options'}, 'nosniff', '... X-Content-Type-Options: nosniff');

$r = req('/api/jobs/no_such_job');
is($r->{status}, 404, 'an unknown job: 404');
is(json_error($r), 'no job of that name', '... saying so, without echoing what the client sent');

for my $method (qw(POST PUT DELETE PATCH))
{
	$r = req('/metrics', method => $method, content => '{"x": 1}');
	is($r->{status}, 405, "$method /metrics: 405");
	like($r->{headers}{allow} // '', qr/^GET, HEAD$/, "... Allow: GET, HEAD");
}
$r = req('/api/jobs', method => 'HEAD');
is($r->{status}, 200, 'HEAD /api/jobs: 200');

# Paths that would be SQL, or files, if anything built either from them.
psql("CREATE TABLE t142_canary (x int)");
for my $path ("/api/jobs/%27%3B%20DROP%20TABLE%20t142_canary%3B%20--",
	"/api/jobs/x'%20OR%20'1'='1", "/api/jobs/%25%00%ff%fe", "/api/jobs/%zz%",
	'/api/jobs/' . ('%41' x 3000))
{
	$r = req($path);
	is($r->{status}, 404, 'GET ' . substr($path, 0, 60) . ': 404');
}
for my $path ('/%2e%2e/%2e%2e/%2e%2e/etc/passwd', '/../../../../etc/passwd',
	'/mailer-dashboard.js/../../../../../etc/passwd', '/mailer-dashboard.css%00.html')
{
	$r = req($path);
	cmp_ok($r->{status}, '==', 404, "GET $path: 404");
	unlike($r->{content}, qr/root:/, '... and no file');
}
is(psql("SELECT count(*) FROM t142_canary"), '0', 'the canary table is still there: nothing was executed');

# ---------------------------------------------------------------------------
# Oversized and malformed requests, on the socket
# ---------------------------------------------------------------------------

my $auth = "Authorization: Bearer $token\r\n";
my @raw = (
	[ 'a 100 kB header', "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth}X-Big: " . ('a' x 100_000) . "\r\n\r\n" ],
	[ '2000 headers', "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n$auth" . join('', map { "X-H$_: v\r\n" } 1 .. 2000) . "\r\n" ],
	[ 'a 100 kB path', "GET /" . ('p' x 100_000) . " HTTP/1.1\r\nHost: 127.0.0.1\r\n$auth\r\n" ],
	[ 'a request line without a path', "GET\r\nHost: 127.0.0.1\r\n\r\n" ],
	[ 'binary junk', "\x00\x01\x02\xff\xfe junk \r\n\r\n" ],
	[ 'a header without a colon', "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nNoColonHere\r\n$auth\r\n" ],
);
for my $case (@raw)
{
	my ($what, $bytes) = @$case;
	my ($got, $how) = raw_request($port, $bytes, 20);
	my ($status) = $got =~ m{^HTTP/1\.[01] (\d{3})};
	ok($how eq 'closed' && (!defined $status || $status =~ /^4/),
		"$what: " . (defined $status ? "answered $status" : 'the connection closed') . ', no hang')
	  or diag("ended by $how; got: " . substr($got, 0, 300));
	is(req('/metrics')->{status}, 200, "after $what the server answers");
}

# A client that sends half a request and waits blocks no one else.
{
	my $slow = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp')
	  or die "connect: $!\n";
	syswrite($slow, "GET /metr");
	my $t0 = Time::HiRes::time();
	is(req('/metrics', timeout => 5)->{status}, 200, 'a half-sent request blocks no other client');
	cmp_ok(Time::HiRes::time() - $t0, '<', 5, '... which is answered at once');
	close $slow;
}

# ---------------------------------------------------------------------------
# Secrets never show
# ---------------------------------------------------------------------------

my %secret = ('sasl.password' => "pw-T142-hush-$$", 'sasl.username' => "user-T142-$$");
my $topic = unique_name('t142');
psql("CREATE TABLE t142_secret_out (v text)");
psql(qq{SELECT mailer.create_job('j142_secret', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic",
	"options": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
	            "sasl.username": "$secret{'sasl.username'}", "sasl.password": "$secret{'sasl.password'}"}},
	"steps": [{"map": {"v": "value::text"}}],
	"sink": {"type": "table", "table": "t142_secret_out"}}\$\$)});
my $detail;
wait_until('the API shows the job with its plan', sub {
	$detail = req('/api/jobs/j142_secret');
	$detail->{status} == 200 && (eval { JSON::PP::decode_json($detail->{content})->{plan} } // '') ne '';
}, 60);
like(JSON::PP::decode_json($detail->{content})->{plan}, qr/sasl\.password = \*{8}/,
	'the plan in /api/jobs/<name> shows the password masked');
for my $path ('/api/jobs', '/api/jobs/j142_secret', '/metrics', '/', '/mailer-dashboard.js')
{
	my $body = req($path)->{content};
	for my $k (sort keys %secret)
	{
		unlike($body, qr/\Q$secret{$k}\E/, "GET $path does not contain the $k");
	}
}
psql("SELECT mailer.drop_job('j142_secret')");

# ---------------------------------------------------------------------------
# Many clients at once
# ---------------------------------------------------------------------------

psql("CREATE TABLE t142_orders (order_id bigint, amount numeric)");
psql(q{SELECT mailer.create_job('j142_gen', $${"source": {"type": "generator", "rate": 2000},
	"steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "amount": "(value->>'amount')::numeric"}}],
	"sink": {"type": "table", "table": "t142_orders"},
	"checkpoint": {"interval": "200 milliseconds"}}$$)});
sub epoch { psql("SELECT coalesce(last_checkpoint_epoch, 0) FROM mailer.metrics WHERE name = 'j142_gen'") }
wait_until('j142_gen commits checkpoints', sub { epoch() > 1 }, 60);

# A job's name is compared whole: a percent-encoded NUL does not cut it.
$r = req('/api/jobs/j142_gen%00junk');
is($r->{status}, 404, 'GET /api/jobs/j142_gen%00junk: 404, not the job j142_gen');

# With a token, the page opened as /#token=... shows the jobs: the browser
# loads the page and its script without a header, and the script sends
# the token from the URL's fragment.
{
	my $home = tempdir('t142_chromium_XXXX', TMPDIR => 1, CLEANUP => 1);
	push @tempdirs, $home;
	local $ENV{HOME} = $home;
	my ($dom, $err) = ('', '');
	eval {
		IPC::Run::run([ 'chromium', '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
			"--user-data-dir=$home/profile", '--virtual-time-budget=5000', '--dump-dom',
			"http://127.0.0.1:$port/#token=$token" ], '>', \$dom, '2>', \$err, IPC::Run::timeout(90));
	};
	like($dom, qr/\bdata-job="j142_gen"/, 'with a token, the page opened as /#token=... shows the job');
}

my $http_pid = http_worker_pid();
like($http_pid, qr/^\d+$/, "the \"mailer http\" worker is process $http_pid");
my $restarts0 = job_info('j142_gen')->{restarts};

# $clients processes, each sending $per requests in turn to /metrics,
# /api/jobs and /api/jobs/j142_gen.  $during->() runs in the parent while
# they do.  Returns (requests answered 200, a summary of the others).
my $tmp = tempdir('t142_clients_XXXX', TMPDIR => 1, CLEANUP => 1);
push @tempdirs, $tmp;
sub burst
{
	my ($clients, $per, $during) = @_;
	my @pids;
	for my $c (1 .. $clients)
	{
		my $pid = fork // die "fork: $!\n";
		if ($pid == 0)
		{
			my %status;
			my @paths = ('/metrics', '/api/jobs', '/api/jobs/j142_gen');
			for my $i (1 .. $per)
			{
				my $res = http_get($paths[ $i % 3 ], port => $port, token => $token, timeout => 30);
				$status{ $res->{status} }++;
			}
			open my $fh, '>', "$tmp/client_$c" or POSIX::_exit(1);
			print $fh join(' ', map { "$_=$status{$_}" } sort keys %status), "\n";
			close $fh;
			POSIX::_exit(0);
		}
		push @pids, $pid;
	}
	$during->(\@pids) if $during;
	waitpid $_, 0 for @pids;
	my ($ok, %other) = (0);
	for my $c (1 .. $clients)
	{
		open my $fh, '<', "$tmp/client_$c" or do { $other{'client died'}++; next };
		for (split ' ', <$fh> // '')
		{
			my ($status, $n) = split /=/;
			$status == 200 ? ($ok += $n) : ($other{$status} += $n);
		}
		close $fh;
		unlink "$tmp/client_$c";
	}
	return ($ok, join(', ', map { "$_: $other{$_}" } sort keys %other));
}

my ($ok, $other) = burst(50, 4);
is($ok, 200, '50 clients, 200 requests: every one answered 200');
is($other, '', '... and none otherwise');
my $rss_warm = proc_status_kb($http_pid, 'VmRSS');

# 2000 more, while the job runs: its epoch must move while the clients
# are being answered.
my $epoch_before = epoch();
my $epoch_during = $epoch_before;
($ok, $other) = burst(50, 40, sub {
	my ($pids) = @_;
	while (grep { waitpid($_, POSIX::WNOHANG()) == 0 } @$pids)
	{
		$epoch_during = epoch();
		last if $epoch_during > $epoch_before + 2;
		Time::HiRes::sleep(0.1);
	}
});
is($ok, 2000, '50 clients, 2000 requests: every one answered 200');
is($other, '', '... and none otherwise');
cmp_ok($epoch_during, '>', $epoch_before, "the job committed checkpoints while they were answered (epoch $epoch_before -> $epoch_during)");
is(job_info('j142_gen')->{restarts}, $restarts0, '... and did not restart');
my $rss_after = proc_status_kb($http_pid, 'VmRSS');
is(http_worker_pid(), $http_pid, 'the HTTP worker is the same process');
cmp_ok($rss_after - $rss_warm, '<', 2048,
	"the HTTP worker's RSS after 2200 requests is within 2 MB of after 200 ($rss_warm kB -> $rss_after kB)");

psql("SELECT mailer.drop_job('j142_gen')");
# File::Temp's own cleanup does not run under the TAP framework's exit.
File::Path::remove_tree(@tempdirs);
done_testing();
