# The dashboard page (issue 15, item 4) in a real browser, headless
# Chromium, while a job's records flow:
#   - the rendered DOM (--dump-dom) has the job's row and its topology
#     diagram with a box per stage of the spec;
#   - one page, never reloaded, shows the job's records-in counter change
#     within 3 seconds: the test drives that page over the DevTools
#     protocol (--remote-debugging-pipe) and reads the counter twice, so it
#     cannot pass unless the page itself updated;
#   - a screenshot (--screenshot) is saved as a test artifact:
#     $MAILER_ARTIFACTS/141_http_dashboard.png, by default
#     tmp_check/artifacts/ in the source tree.
# Chromium runs as root here: --no-sandbox, and a HOME and profile of the
# test's own.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerHttp;
use File::Temp qw(tempdir);
use IO::Select;
use IPC::Run ();
use JSON::PP ();
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

my $port = http_port();
my $url = "http://127.0.0.1:$port/";
my $job = 'j141';
fresh_extension();
drop_tables('t141');

# A generator job with every kind of stage: source, steps (a filter),
# key_by, window, aggregate, sink.
psql("CREATE TABLE t141_totals (customer_id text, window_start timestamptz, window_end timestamptz,
	orders bigint, PRIMARY KEY (customer_id, window_start))");
psql(qq{SELECT mailer.create_job('$job', \$\${"source": {"type": "generator", "rate": 200},
	"event_time": "(value->>'ts')::timestamptz",
	"watermark": {"max_out_of_orderness": "5 seconds"},
	"steps": [{"filter": "(value->>'amount')::numeric > 0"},
	          {"key_by": {"customer_id": "value->>'customer_id'"}},
	          {"window": {"type": "tumbling", "size": "1 minute"}},
	          {"aggregate": {"orders": "count(*)"}}],
	"sink": {"type": "table", "table": "t141_totals"},
	"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
wait_until("$job reads records", sub { job_metrics($job)->{records_in} > 0 }, 60);

my $home = tempdir('t141_chromium_XXXX', TMPDIR => 1, CLEANUP => 1);
my @chromium = ('chromium', '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
	'--hide-scrollbars', "--user-data-dir=$home/profile", '--window-size=1280,1000');
local $ENV{HOME} = $home;

# Run Chromium once on the page; returns its stdout.
sub chromium_run
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run([ @chromium, @args, $url ], '>', \$out, '2>', \$err, IPC::Run::timeout(90));
	};
	die "chromium @args failed: " . ($@ || $err) . "\n" unless $ok;
	return $out;
}

# ---------------------------------------------------------------------------
# The rendered DOM
# ---------------------------------------------------------------------------

my $dom = chromium_run('--virtual-time-budget=5000', '--dump-dom');
like($dom, qr/<[^>]*\bid="jobs"/, 'the DOM has the jobs container');
my ($row) = $dom =~ /(<[^>]*\bdata-job="$job"[^>]*>.*)/s;
ok($row && $row =~ /^<[^>]*\bclass="[^"]*\bjob\b/, "the job's row (.job[data-job=\"$job\"]) is in the DOM")
  or diag(substr($dom, 0, 3000));
$row //= '';
like($row, qr/<svg[^>]*\bclass="[^"]*\btopology\b/, '... with its topology diagram (svg.topology)');
for my $stage (qw(source steps key_by window aggregate sink))
{
	like($row, qr/<[^>]*\bclass="[^"]*\bstage\b[^"]*"[^>]*\bdata-stage="$stage"|<[^>]*\bdata-stage="$stage"[^>]*\bclass="[^"]*\bstage\b/,
		"... which has the $stage stage");
}
like($row, qr/\bclass="[^"]*\bcounter-records-in\b[^"]*"[^>]*>\s*[0-9]/, '... and a records-in counter');

# ---------------------------------------------------------------------------
# One page, read twice: the counter changes without a reload
# ---------------------------------------------------------------------------

# Chromium on the DevTools protocol over a pipe: it reads commands on fd 3
# and writes answers on fd 4, each a JSON text ended by a NUL.
my ($cdp_in, $cdp_out, $cdp_pid, $cdp_buf, $cdp_id, @exceptions) = (undef, undef, 0, '', 0);
{
	local $^F = 255;	# the pipes survive exec
	pipe(my $cmd_r, my $cmd_w) or die "pipe: $!\n";
	pipe(my $ans_r, my $ans_w) or die "pipe: $!\n";
	$cdp_pid = fork // die "fork: $!\n";
	if ($cdp_pid == 0)
	{
		POSIX::dup2(fileno($cmd_r), 3) // POSIX::_exit(1);
		POSIX::dup2(fileno($ans_w), 4) // POSIX::_exit(1);
		open STDOUT, '>', "$home/cdp.log" or POSIX::_exit(1);
		open STDERR, '>&', \*STDOUT or POSIX::_exit(1);
		exec @chromium, '--remote-debugging-pipe', 'about:blank' or POSIX::_exit(1);
	}
	close $cmd_r;
	close $ans_w;
	($cdp_in, $cdp_out) = ($cmd_w, $ans_r);
	$cdp_in->autoflush(1);
}
END
{
	my $status = $?;
	if ($cdp_pid)
	{
		kill 'KILL', $cdp_pid;
		waitpid $cdp_pid, 0;
	}
	$? = $status;
}

# Send a command (to a page's session when $session is given) and return
# its result; events that come meanwhile are kept (uncaught exceptions).
sub cdp
{
	my ($method, $params, $session) = @_;
	my $msg = { id => ++$cdp_id, method => $method, params => $params // {} };
	$msg->{sessionId} = $session if $session;
	print $cdp_in JSON::PP::encode_json($msg) . "\0";
	my $sel = IO::Select->new($cdp_out);
	my $deadline = time() + 30;
	while (time() < $deadline)
	{
		while ((my $end = index($cdp_buf, "\0")) >= 0)
		{
			my $got = JSON::PP::decode_json(substr($cdp_buf, 0, $end));
			substr($cdp_buf, 0, $end + 1) = '';
			push @exceptions, $got->{params}{exceptionDetails}
			  if ($got->{method} // '') eq 'Runtime.exceptionThrown';
			next unless ($got->{id} // 0) == $cdp_id;
			die "$method: $got->{error}{message}\n" if $got->{error};
			return $got->{result};
		}
		next unless $sel->can_read(1);
		my $n = sysread($cdp_out, $cdp_buf, 65536, length $cdp_buf);
		die "Chromium closed the DevTools pipe\n" unless $n;
	}
	die "no answer from Chromium to $method\n";
}

# The value of a JavaScript expression in the page.
sub page_eval
{
	my ($session, $js) = @_;
	my $r = cdp('Runtime.evaluate', { expression => $js, returnByValue => JSON::PP::true() }, $session);
	die "$js: $r->{exceptionDetails}{text}\n" if $r->{exceptionDetails};
	return $r->{result}{value};
}

my $target = cdp('Target.createTarget', { url => 'about:blank' })->{targetId};
my $session = cdp('Target.attachToTarget', { targetId => $target, flatten => JSON::PP::true() })->{sessionId};
cdp('Runtime.enable', {}, $session);
cdp('Page.navigate', { url => $url }, $session);

my $sel_counter = qq{document.querySelector('.job[data-job="$job"] .counter-records-in')};
my $read_counter = "(function () { var e = $sel_counter; return e ? e.textContent : null; })()";
my $first;
wait_until('the page shows the job\'s records-in counter', sub {
	$first = page_eval($session, $read_counter);
	return defined $first && $first =~ /[0-9]/;
}, 30);
# A mark in the page's window: a reload would lose it.
page_eval($session, 'window.t141_mark = 1');
my $t0 = time();
my $second;
my $changed = eval {
	wait_until('the counter changes', sub {
		$second = page_eval($session, $read_counter);
		return defined $second && $second ne $first;
	}, 3);
	1;
};
my $took = time() - $t0;
ok($changed, sprintf('the records-in counter changed within 3 s (%s -> %s in %.1f s)', $first, $second // 'gone', $took));
(my $n1 = $first) =~ s/[^0-9]//g;
(my $n2 = $second // '') =~ s/[^0-9]//g;
cmp_ok($n2 || 0, '>', $n1, '... upwards');
is(page_eval($session, 'window.t141_mark'), 1, '... in the same page: it was not reloaded');

my $stages = page_eval($session,
	qq{Array.from(document.querySelectorAll('.job[data-job="$job"] .topology .stage')).map(function (e) { return e.getAttribute('data-stage'); }).join(' ')});
is($stages, 'source steps key_by window aggregate sink', 'the topology has the stages in the pipeline\'s order');
like(page_eval($session, qq{document.querySelector('.job[data-job="$job"] .job-state').textContent}), qr/running/,
	'the job\'s state shows running');
ok(page_eval($session, qq{!!document.querySelector('.job[data-job="$job"] .dead-letters')}), 'the dead-letter count is shown');
ok(page_eval($session, q{document.querySelector('#updated-at').textContent.length > 0}), '#updated-at says when the page refreshed');
is(scalar(@exceptions), 0, 'the page threw no uncaught exception')
  or diag(JSON::PP->new->canonical->encode(\@exceptions));
cdp('Browser.close');
waitpid $cdp_pid, 0;
$cdp_pid = 0;

# ---------------------------------------------------------------------------
# A screenshot, kept as an artifact
# ---------------------------------------------------------------------------

my $png = artifacts_dir() . '/141_http_dashboard.png';
unlink $png;
chromium_run('--virtual-time-budget=5000', "--screenshot=$png");
ok(-s $png && -s $png > 1000, "the screenshot is saved: $png");
open my $fh, '<:raw', $png or die "$png: $!\n";
read $fh, my $magic, 8;
close $fh;
is($magic, "\x89PNG\r\n\x1a\n", '... as a PNG');

psql("SELECT mailer.drop_job('$job')");
done_testing();
