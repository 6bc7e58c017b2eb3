# MailerTest: what the integration tests share.  The services (the test
# PostgreSQL cluster and the Kafka broker) are started by test/services/*.sh;
# these helpers talk to them and wait on job progress, never on timing.
package MailerTest;

use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use IPC::Run ();
use Test::More ();
use Time::HiRes qw(time sleep);

our @EXPORT = qw(psql psql_ok psql_fails kafka kcat_produce kcat_consume
  wait_until pg_service launcher_pid wait_server_ready fresh_extension unique_name $ROOT $BROKERS);

our $ROOT = File::Spec->rel2abs(dirname(__FILE__) . '/../..');
our $BROKERS = $ENV{KAFKA_BROKERS} // '127.0.0.1:19092';

# Run SQL through psql; return its unaligned, tuples-only output without the
# trailing newline.  Dies with psql's message when the SQL fails.
# $opt{user} connects as another role than PGUSER.
sub psql
{
	my ($sql, %opt) = @_;
	my ($out, $err) = ('', '');
	my @cmd = ('psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
		'-F', $opt{sep} // '|', '-f', '-');
	push @cmd, '-U', $opt{user} if defined $opt{user};
	my $ok = IPC::Run::run(\@cmd, '<', \$sql, '>', \$out, '2>', \$err);
	die "psql failed: $err\nSQL: $sql\n" unless $ok;
	chomp $out;
	return $out;
}

# Run SQL expected to fail; return the error text (empty when it did not fail).
# $opt{user} connects as another role than PGUSER.
sub psql_fails
{
	my ($sql, %opt) = @_;
	my ($out, $err) = ('', '');
	my @cmd = ('psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
		'-v', 'VERBOSITY=verbose', '-f', '-');
	push @cmd, '-U', $opt{user} if defined $opt{user};
	my $ok = IPC::Run::run(\@cmd, '<', \$sql, '>', \$out, '2>', \$err);
	return $ok ? '' : $err;
}

sub psql_ok
{
	my ($sql, $name) = @_;
	my $res = eval { psql($sql); 1 };
	Test::More::ok($res, $name) or Test::More::diag($@);
}

# Poll a condition (a code ref) until it returns true; fail the test with
# $what if it does not within $timeout seconds.  The condition is the
# progress being waited for; the pause between polls only spares the CPU.
sub wait_until
{
	my ($what, $cond, $timeout) = @_;
	$timeout //= 120;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		my $v = eval { $cond->() };
		return $v if $v;
		sleep 0.1;
	}
	die "timed out after ${timeout}s waiting for: $what\n";
}

# The service scripts: pg_service('crash'), kafka('create-topic', 'x', 8).
sub pg_service
{
	system("$ROOT/test/services/pg.sh", @_) == 0
	  or die "pg.sh @_ failed\n";
}

# The pid of the mailer launcher ('' when there is none or no server).
sub launcher_pid
{
	my $pid = eval {
		psql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'mailer launcher'");
	};
	return $pid // '';
}

# Wait until the server accepts connections and the mailer launcher is
# connected.  After a process crashed, the postmaster restarts them all:
# pass the launcher's pid from before (launcher_pid()) as $opt{not_launcher}
# to wait for the new one, not to see the old one before the restart.
sub wait_server_ready
{
	my (%opt) = @_;
	wait_until('the server and the mailer launcher to be up',
		sub {
			my $pid = launcher_pid();
			return $pid =~ /^\d+$/
			  && (!defined $opt{not_launcher} || $pid ne $opt{not_launcher});
		},
		$opt{timeout} // 120);
}

sub kafka
{
	my ($out, $err) = ('', '');
	IPC::Run::run(["$ROOT/test/services/kafka.sh", @_], '>', \$out, '2>', \$err)
	  or die "kafka.sh @_ failed: $err$out\n";
	return $out;
}

# Produce lines "key<TAB>value" (or values alone when $opt{keyed} is false)
# to a topic; $opt{partition} pins a partition.
sub kcat_produce
{
	my ($topic, $lines, %opt) = @_;
	my @cmd = ('kcat', '-b', $BROKERS, '-P', '-t', $topic, '-z', 'lz4');
	push @cmd, '-K', "\t" if $opt{keyed} // 1;
	push @cmd, '-p', $opt{partition} if defined $opt{partition};
	my $in = ref $lines ? join('', map { "$_\n" } @$lines) : $lines;
	my $err = '';
	IPC::Run::run(\@cmd, '<', \$in, '2>', \$err)
	  or die "kcat produce to $topic failed: $err\n";
}

# Consume a whole topic from the beginning; return the message values.
sub kcat_consume
{
	my ($topic, %opt) = @_;
	my @cmd = ('kcat', '-b', $BROKERS, '-C', '-t', $topic, '-o', 'beginning',
		'-e', '-q', '-f', $opt{format} // "%s\n");
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat consume from $topic failed: $err\n";
	return [ split /\n/, $out ];
}

# Drop and create the extension: every test file starts from nothing.  Jobs
# left by an earlier test are dropped first, which waits for their workers
# to exit: a worker outliving DROP EXTENSION could write into the new
# extension's catalog, where job ids start at 1 again.
sub fresh_extension
{
	psql("SET client_min_messages = warning;
		DO \$\$ BEGIN
			IF EXISTS (SELECT FROM pg_extension WHERE extname = 'mailer') THEN
				PERFORM mailer.drop_job(name) FROM mailer.jobs;
			END IF;
		END \$\$;
		DROP EXTENSION IF EXISTS mailer CASCADE; CREATE EXTENSION mailer;");
}

# A name unique to this run, for topics and jobs.
sub unique_name
{
	my ($prefix) = @_;
	return sprintf('%s_%d_%d', $prefix, $$, int(time() * 1000) % 100000000);
}

1;
