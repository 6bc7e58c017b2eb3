# Keyed state is read back with the types it was written with, or not at all.
# A job's expressions are resolved again by name each time its worker
# starts: a function re-created with another result type makes the stored
# aggregate bytes mean something else.  On both state backends the job
# restores fine while the types stay the same, and once the function
# returns text instead of int the worker refuses the state: the job is
# failed (not retried) with a message naming the cause, and the server
# never crashed (the bytes of an int read as a text length used to make
# the worker copy ~500 MB from a 1 KB buffer).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

# A crash restarts every process, the launcher too (the postmaster's start time stays).
my $launcher = launcher_pid();
my $log_from = pg_log_size();

for my $b ('memory', 'rocksdb')
{
	my $j = "t094_$b";
	my $f = "amt_094_$b";
	psql("DROP TABLE IF EXISTS $j; CREATE TABLE $j (k text PRIMARY KEY, m int)");
	psql("DROP FUNCTION IF EXISTS $f(jsonb);
		CREATE FUNCTION $f(j jsonb) RETURNS int LANGUAGE sql IMMUTABLE
		AS \$\$ SELECT 500000000 + (j->>'order_id')::int \$\$");
	psql(qq{SELECT mailer.create_job('$j', \$\${
	  "source": {"type": "generator", "keys": 5, "rate": 500},
	  "steps": [{"key_by": {"k": "key"}}, {"aggregate": {"m": "max($f(value))"}}],
	  "sink": {"type": "table", "table": "$j"},
	  "checkpoint": {"interval": "200 milliseconds"},
	  "state": {"backend": "$b"}}\$\$)});
	wait_until("$b: a checkpoint with state", sub {
		psql("SELECT count(*) FROM $j") eq '5'
		  && psql("SELECT count(*) > 1 FROM mailer.checkpoints c JOIN mailer.job USING (job_id) WHERE name = '$j'") eq 't';
	}, 60);

	# Stopped and started with the same types: the state is read back.
	is(psql("SELECT mailer.stop_job('$j')"), 'stopped', "$b: stopped");
	my $before = psql("SELECT max(m) FROM $j");
	psql("SELECT mailer.start_job('$j')");
	wait_until("$b: the job goes on from its state", sub { psql("SELECT max(m) FROM $j") > $before }, 60);
	is(job_info($j)->{state}, 'running', "$b: running again after a restart with the same types");

	# The function now returns text: the stored ints must not be read as text.
	is(psql("SELECT mailer.stop_job('$j')"), 'stopped', "$b: stopped again");
	psql("DROP FUNCTION $f(jsonb);
		CREATE FUNCTION $f(j jsonb) RETURNS text LANGUAGE sql IMMUTABLE
		AS \$\$ SELECT (500000000 + (j->>'order_id')::int)::text \$\$");
	psql("SELECT mailer.start_job('$j')");
	my $info = wait_job_state($j, qr/^(failed|restarting)$/, 60);
	is($info->{state}, 'failed', "$b: the job failed, it is not retried");
	like($info->{last_error}, qr/state of job "\Q$j\E" was written with other types/,
		"$b: last_error says the state was written with other types");
	like($info->{last_error}, qr/max\(\Q$f\E\(value\)\).*integer.*text/,
		"$b: and names the aggregate and both types");

	# Same types again, but the stored bytes cut short: every read is checked.
	if ($b eq 'memory')
	{
		psql("DROP FUNCTION $f(jsonb);
			CREATE FUNCTION $f(j jsonb) RETURNS int LANGUAGE sql IMMUTABLE
			AS \$\$ SELECT 500000000 + (j->>'order_id')::int \$\$");
		psql("UPDATE mailer.memory_state SET value = substring(value FROM 1 FOR 12)
			WHERE job_id = (SELECT job_id FROM mailer.job WHERE name = '$j') AND value IS NOT NULL");
		psql("SELECT mailer.start_job('$j')");
		$info = wait_job_state($j, qr/^(failed|restarting)$/, 60);
		is($info->{state}, 'failed', "$b: state bytes cut short: the job failed");
		like($info->{last_error}, qr/mailer keyed state value is corrupt: A read of \d+ bytes at offset \d+ of a value of 12 bytes/,
			"$b: last_error says the state value is corrupt");
	}
	psql("SELECT mailer.drop_job('$j'); DROP TABLE $j; DROP FUNCTION $f(jsonb)");
}

is(launcher_pid(), $launcher, 'the server was not reinitialized: the same launcher');
unlike(pg_log_since($log_from), qr/terminated by signal/, 'no process died of a signal');
done_testing();
