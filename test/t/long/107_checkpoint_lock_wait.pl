# A job stuck on a lock says so (issue 11 item 16's 'lock'): another
# session holds the sink table in SHARE mode (any role with a privilege on
# it may).  The checkpoint used to block for good while mailer.jobs showed
# 'running', and stop_job timed out.  Now the checkpoint waits at most its
# lock_timeout, the job is 'waiting' for 'lock' with last_error saying so,
# keeping its rows and positions; stop_job returns promptly without a final
# checkpoint; once the lock is gone the job goes on, every row once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time);

fresh_extension();
test_point_release();
drop_tables('t107');
psql("CREATE TABLE t107 (order_id bigint)");
psql(q{SELECT mailer.create_job('j107', $${"source": {"type": "generator", "events": 2000, "rate": 200},
	"steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}}],
	"sink": {"type": "table", "table": "t107"}, "checkpoint": {"interval": "200 milliseconds"}}$$)});
wait_until('j107 writes', sub { psql("SELECT count(*) FROM t107") > 0 });

my ($in, $out, $err) = ('', '', '');
my $locker = IPC::Run::start(['psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1'], '<', \$in, '>', \$out, '2>', \$err);
$in = "BEGIN; LOCK TABLE t107 IN SHARE MODE; SELECT 'locked';\n";
wait_until('the sink table is locked', sub { $locker->pump_nb; $out =~ /locked/ });
my $held = psql("SELECT count(*) FROM t107");

my $view = '';
my $ok = eval {
	wait_until('j107 waits for the lock', sub {
		$locker->pump_nb;
		$view = psql("SELECT state || '|' || coalesce(waiting_for, '') || '|' || coalesce(last_error, '') FROM mailer.jobs WHERE name = 'j107'");
		$view =~ /^waiting\|lock\|/;
	}, 60);
	1;
};
ok($ok, 'the job is waiting for lock') or diag("mailer.jobs says: $view");
like($view, qr/\|waiting for a lock on the sink table "public\.t107"/, 'last_error says it waits for a lock on the sink table');
is(psql("SELECT count(*) FROM t107"), $held, 'nothing was written meanwhile');

my $t0 = time();
my $stopped = eval { psql("SELECT mailer.stop_job('j107', '30 seconds')") } // "failed: $@";
is($stopped, 'stopped', 'stop_job returns while the job waits for the lock');
cmp_ok(time() - $t0, '<', 15, '... promptly');

$in .= "COMMIT;\n\\q\n";
$locker->finish;
psql("SELECT mailer.start_job('j107')");
is(wait_job('j107'), 'finished', 'started again after the unlock, it finishes');
is(psql("SELECT count(*) || ' ' || count(DISTINCT order_id) FROM t107"), '2000 2000', 'every row once');
psql("SELECT mailer.drop_job('j107')");
done_testing();
