# Transactions of mailer's job functions: PREPARE TRANSACTION of one that
# stopped a job is refused (the stop lived in the backend: after PREPARE
# the abort callback walked freed memory and crashed the server), and two
# create_job calls racing on one name fail with the duplicate_object error
# and its hint, not a raw unique violation.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use Test::More;
use IPC::Run;

# PREPARE TRANSACTION needs max_prepared_transactions, which takes a
# restart: on a server of its own, started with it.
mailer_node('node', "max_prepared_transactions = 2\n");
fresh_extension();
drop_tables('t106');
psql("CREATE TABLE t106 (k text)");
psql(q{SELECT mailer.create_job('j106', $${"source": {"type": "generator", "events": 1000000, "rate": 50},
	"steps": [{"map": {"k": "key"}}], "sink": {"type": "table", "table": "t106"},
	"checkpoint": {"interval": "200 milliseconds"}}$$)});
wait_until('j106 runs', sub { psql("SELECT state FROM mailer.jobs WHERE name = 'j106'") eq 'running' });
my $launcher = launcher_pid();

my $err = psql_fails("BEGIN; SELECT mailer.stop_job('j106'); PREPARE TRANSACTION 't106'; SELECT 1/0;");
like($err, qr/0A000: cannot PREPARE a transaction that has created, started, stopped, restored or dropped a mailer job/,
	'PREPARE of a transaction that stopped a job is refused');
like($err, qr/HINT:  Call mailer's job functions in a transaction of their own/, '... with a hint');
is(psql("SELECT count(*) FROM pg_prepared_xacts"), '0', 'nothing was prepared');
is(launcher_pid(), $launcher, 'the server did not restart');
like(psql_fails("BEGIN; SELECT mailer.create_job('j106b', \$\${\"source\": {\"type\": \"generator\", \"events\": 10},
	\"steps\": [{\"map\": {\"k\": \"key\"}}], \"sink\": {\"type\": \"table\", \"table\": \"t106\"}}\$\$);
	PREPARE TRANSACTION 't106b';"), qr/cannot PREPARE a transaction that has created/, 'so is one that created a job');
is(psql("SELECT count(*) FROM mailer.job WHERE name = 'j106b'"), '0', '... and the job is not there');
# The stop was withdrawn with the transaction: the job goes on.
my $n = psql("SELECT count(*) FROM t106");
wait_until('j106 goes on', sub { psql("SELECT count(*) FROM t106") > $n + 20 });
is(psql("SELECT state, desired_state FROM mailer.jobs WHERE name = 'j106'"), 'running|running', 'the job still runs');
# A session that prepared nothing of mailer's may prepare.
psql("BEGIN; INSERT INTO t106 VALUES ('x'); PREPARE TRANSACTION 't106c'; COMMIT PREPARED 't106c'");
is(psql("SELECT count(*) FROM t106 WHERE k = 'x'"), '1', 'other transactions still prepare');

# Two create_job of one name: the second waits on the first's row, then fails plainly.
my $spec = q{$${"source": {"type": "generator", "events": 10}, "steps": [{"map": {"k": "key"}}], "sink": {"type": "table", "table": "t106"}}$$};
my ($in, $out, $serr) = ('', '', '');
my $first = IPC::Run::start(['psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1'], '<', \$in, '>', \$out, '2>', \$serr);
$in = "BEGIN; SELECT mailer.create_job('race106', $spec); SELECT 'created';\n";
wait_until('the first create_job is done, not committed', sub { $first->pump_nb; $out =~ /created/ });
my ($in2, $out2, $err2) = ('', '', '');
my $second = IPC::Run::start(['psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose'],
	'<', \$in2, '>', \$out2, '2>', \$err2);
$in2 = "SELECT mailer.create_job('race106', $spec);\n\\q\n";
wait_until('the second create_job waits for the first', sub {
	$second->pump_nb;
	psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%race106%'") eq '1';
});
$in .= "COMMIT;\n\\q\n";
$first->finish;
$second->finish;
like($err2, qr/42710: job "race106" already exists/, 'the second create_job: duplicate_object');
like($err2, qr/HINT:  Choose another name, or drop the job first/, '... with its hint');

psql("SELECT mailer.drop_job('race106'); SELECT mailer.drop_job('j106')");

# DROP EXTENSION and CREATE EXTENSION while a worker is between its
# checkpoint's check of the installation and its writes: the worker's lock
# on the extension keeps the DROP waiting until its checkpoint commits, so
# it never writes its job id's checkpoint into the new installation (where
# job 1 is another job).
fresh_extension();
psql("DROP TABLE IF EXISTS t106_new; CREATE TABLE t106_new (k text)");
my $old_id = psql(q{SELECT mailer.create_job('old106', $${"source": {"type": "generator", "events": 1000000, "rate": 50},
	"steps": [{"map": {"k": "key"}}], "sink": {"type": "table", "table": "t106"},
	"checkpoint": {"interval": "200 milliseconds"}}$$)});
wait_until('old106 has checkpointed a few times', sub { psql("SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = $old_id") >= 5 });
my $epoch = psql("SELECT max(epoch) FROM mailer.checkpoints WHERE job_id = $old_id");
my $from = test_point_hold('checkpoint_after_ext_check');
test_point_wait_reached('checkpoint_after_ext_check', $from);
my ($in3, $out3, $err3) = ('', '', '');
my $reinstall = IPC::Run::start(['psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1'], '<', \$in3, '>', \$out3, '2>', \$err3);
$in3 = q{SET client_min_messages = warning; DROP EXTENSION mailer CASCADE; CREATE EXTENSION mailer;
	SELECT mailer.create_job('new106', $${"source": {"type": "generator", "events": 1000000, "rate": 50},
	"steps": [{"map": {"k": "key"}}], "sink": {"type": "table", "table": "t106_new"}}$$);
	SELECT mailer.stop_job('new106'); SELECT 'reinstalled';
\q
};
my $how = wait_until('the reinstall is done, or waits for the worker', sub {
	$reinstall->pump_nb;
	return 'done' if $out3 =~ /reinstalled/;
	return psql("SELECT count(*) FROM pg_locks WHERE locktype = 'object' AND classid = 'pg_extension'::regclass AND NOT granted") ne '0' ? 'waits' : undef;
});
is($how, 'waits', 'DROP EXTENSION waits for the checkpoint in progress');
test_point_release();
$reinstall->finish;
like($out3, qr/reinstalled/, 'the extension is installed again') or diag($err3);
is(psql("SELECT count(*) FROM mailer.checkpoints WHERE epoch > $epoch"), '0',
	"the old installation's worker wrote no checkpoint into the new one");
psql("SELECT mailer.drop_job('new106')");

# A stop_job that times out withdraws its stop request, also for a job id
# above 2^31 (it used to be kept as an int: the abort looked for another
# job's slot and the stop stayed, so the worker stopped).  A test point
# holds the worker in a checkpoint while stop_job waits for it.
psql("SELECT setval('mailer.job_job_id_seq', 3000000000)");
my $big = psql(q{SELECT mailer.create_job('big106', $${"source": {"type": "generator", "rate": 50},
	"steps": [{"map": {"k": "key"}}], "sink": {"type": "table", "table": "t106"},
	"checkpoint": {"interval": "200 milliseconds"}}$$)});
cmp_ok($big, '>', 2**31, 'the job id is above 2^31');
wait_until('big106 runs', sub { psql("SELECT state FROM mailer.jobs WHERE name = 'big106'") eq 'running' });
my $pid = job_info('big106')->{pid};
$from = test_point_hold('checkpoint_after_ext_check');
test_point_wait_reached('checkpoint_after_ext_check', $from);
like(psql_fails("SELECT mailer.stop_job('big106', '1 second')"), qr/did not stop within/, 'stop_job times out');
test_point_release();
my $epoch_now = psql("SELECT max(epoch) FROM mailer.checkpoints WHERE job_id = $big");
wait_until('big106 goes on', sub { psql("SELECT max(epoch) FROM mailer.checkpoints WHERE job_id = $big") >= $epoch_now + 5 });
is(job_info('big106')->{pid}, $pid, 'its worker was not stopped: the stop was withdrawn');
is(psql("SELECT restarts FROM mailer.jobs WHERE name = 'big106'"), '0', '... and not restarted');
psql("SELECT mailer.drop_job('big106')");
done_testing();
