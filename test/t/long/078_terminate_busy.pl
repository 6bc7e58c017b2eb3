# pg_terminate_backend ends a job worker that is busy (issue 11, item 13):
# one blocked on a lock of its sink table during a checkpoint, one running
# a slow expression.  The work in progress is cancelled as a backend's
# statement would be, the transaction rolls back, the worker exits within
# its grace period, and the launcher starts the job again from its last
# committed checkpoint: the results stay exact.  (A worker that is idle
# when terminated takes a final checkpoint: 010_generator_jobs.pl.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use IPC::Run ();
use MailerTest;
use Test::More;

my $N = 10_000;

fresh_extension();
test_point_release();
# A short grace keeps the test quick; the waits below allow far more.
psql("ALTER SYSTEM SET mailer.termination_grace = '2s'");
psql('SELECT pg_reload_conf()');
END { eval { psql('ALTER SYSTEM RESET mailer.termination_grace'); psql('SELECT pg_reload_conf()') } }
psql("DROP TABLE IF EXISTS t078_lock, t078_slow, t078_flag;
	CREATE TABLE t078_lock (order_id bigint, customer_id text);
	CREATE TABLE t078_slow (order_id bigint, customer_id text);
	CREATE TABLE t078_flag (on_ boolean);
	INSERT INTO t078_flag VALUES (true);
	CREATE OR REPLACE FUNCTION t078_check(n bigint) RETURNS boolean LANGUAGE plpgsql AS \$f\$
	BEGIN
		IF n = 500 AND EXISTS (SELECT FROM t078_flag) THEN
			PERFORM pg_sleep(600);
		END IF;
		RETURN true;
	END \$f\$");

sub create_job
{
	my ($name, $filter) = @_;
	my $steps = $filter ? qq{{"filter": "$filter"}, } : '';
	return psql(qq{SELECT mailer.create_job('$name', \$\${
		"source": {"type": "generator", "events": $N, "rate": 2000},
		"steps": [$steps {"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}],
		"sink": {"type": "table", "table": "$name"},
		"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
}

sub check_output
{
	my ($name) = @_;
	is(psql("SELECT mailer.wait_job('$name', '2 minutes')"), 'finished', "$name: the job finishes");
	is(psql("SELECT count(*), count(DISTINCT order_id), min(order_id), max(order_id) FROM $name"),
		"$N|$N|0|" . ($N - 1), "$name: every event written exactly once");
}

sub terminate_promptly
{
	my ($name, $pid) = @_;
	is(psql("SELECT pg_terminate_backend($pid)"), 't', "$name: pg_terminate_backend($pid)");
	my $gone = eval {
		wait_until("worker $pid gone", sub {
			psql("SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") eq '0' }, 30);
		1;
	};
	ok($gone, "$name: the busy worker exits promptly");
}

#
# Blocked on a lock in its checkpoint.
#
create_job('t078_lock');
wait_until('t078_lock has output', sub { psql("SELECT count(*) > 0 FROM t078_lock") eq 't' });
my ($in, $out, $err) = ("BEGIN; LOCK TABLE t078_lock IN ACCESS EXCLUSIVE MODE; SELECT 'locked';\n", '', '');
my $locker = IPC::Run::start(['psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1'],
	'<', \$in, '>', \$out, '2>', \$err);
wait_until('the table is locked', sub { $locker->pump_nb; $out =~ /locked/ });
my $pid = wait_until('the worker waits for the lock', sub {
	psql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'mailer job'
		AND application_name = 'mailer job t078_lock' AND wait_event_type = 'Lock'") || undef });
terminate_promptly('t078_lock', $pid);
$in .= "COMMIT;\n\\q\n";
$locker->finish;
check_output('t078_lock');

#
# A slow expression: record 500 sleeps for ten minutes while the flag is set.
#
create_job('t078_slow', q{t078_check((value->>'order_id')::bigint)});
$pid = wait_until('the worker runs the slow filter', sub {
	psql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'mailer job'
		AND application_name = 'mailer job t078_slow' AND wait_event = 'PgSleep'") || undef });
# The worker started next must not sleep again.
psql("DELETE FROM t078_flag");
terminate_promptly('t078_slow', $pid);
check_output('t078_slow');
like(psql("SELECT last_error FROM mailer.jobs WHERE name = 't078_slow'"), qr/terminated/,
	'last_error says the worker was terminated');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name LIKE 't078%'");
psql("DROP TABLE t078_lock, t078_slow, t078_flag; DROP FUNCTION t078_check(bigint)");
done_testing();
