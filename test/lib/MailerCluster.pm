# MailerCluster: a PostgreSQL server of a test's own, for the tests that stop,
# crash or restart the server.  The shared test cluster (test/services/pg.sh)
# then never goes down under the other tests, and such a test no longer has
# to wait for it to come back.
#
# A node is a PostgreSQL::Test::Cluster (the TAP framework contrib uses, from
# pg_config --pkglibdir), configured as pg.sh configures the shared cluster:
# mailer preloaded, serving the database 'mailer'.  mailer_node() points the
# environment (PGHOST, PGPORT, PGDATA, the server log) at the node, so every
# MailerTest helper (psql, pg_service, pg_log_since, job_state_dir...) works
# on it unchanged.  The Kafka broker stays the shared one.
#
# initdb refuses to run as root, and CI runs the tests as root.  The test
# itself stays root (the Kafka scripts read a cache only root may read);
# only the server's programs, initdb and pg_ctl, run as 'postgres', through
# two small wrappers first in PATH, in directories that user owns.
#
# Load this module before MailerTest's helpers run: PostgreSQL::Test::Utils
# clears PG* variables when it loads, and its INIT block opens the test's
# log (tmp_check/log/regress_log_<test>) under $TESTDIR.
package MailerCluster;

use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(basename);
use File::Path qw(make_path remove_tree);

my ($pg_bindir, $run_dir);

BEGIN
{
	my $pg_config = $ENV{PG_CONFIG} // '/usr/lib/postgresql/15/bin/pg_config';
	chomp($pg_bindir = `"$pg_config" --bindir`);
	chomp(my $pkglibdir = `"$pg_config" --pkglibdir`);
	die "$pg_config failed\n" unless $pg_bindir && $pkglibdir;
	unshift @INC, "$pkglibdir/pgxs/src/test/perl";

	# The node's files live beside the shared cluster's, outside the
	# source tree, which may be root's and read-only to 'postgres'.
	$run_dir = $ENV{MAILER_RUN_DIR} // '/tmp/mailer-run';
	$ENV{TESTDIR} = "$run_dir/tap";
	make_path($ENV{TESTDIR});

	# Cluster::init runs pg_regress --config-auth, which matters only on
	# Windows; PGXS installs pg_regress beside the TAP modules.
	$ENV{PG_REGRESS} //= "$pkglibdir/pgxs/src/test/regress/pg_regress";

	# The server binaries of the PostgreSQL the extension is built for.
	$ENV{PATH} = "$pg_bindir:$ENV{PATH}";

	# PostgreSQL::Test::Utils deletes PGDATABASE: keep the database the
	# tests use (the shared cluster's mailer.database).
	our $database = $ENV{PGDATABASE} // 'mailer';
}

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils ();
use MailerTest ();

our @EXPORT = qw(mailer_node);
our $database;

# PostgreSQL::Test::Utils sends STDERR to the test's log: say why a test
# died where prove shows it too, and where the logs are.  MailerTest's
# handler (loaded above) records the message for the end of the run.
my $mailer_test_die = $SIG{__DIE__};
$SIG{__DIE__} = sub {
	Test::More::diag($_[0]) if defined $^S && !$^S;
	$mailer_test_die->(@_) if ref $mailer_test_die;
	die @_;
};
END
{
	my $status = $?;
	Test::More::diag("logs: $PostgreSQL::Test::Utils::log_path")
	  if $status && $PostgreSQL::Test::Utils::log_path;
	$? = $status;
}

# The owner of server files: postgres when root, otherwise the caller.
my $as_root = $> == 0;

sub give_to_owner
{
	return unless $as_root;
	my (undef, undef, $uid, $gid) = getpwnam('postgres')
	  or die "no user 'postgres' to run the server as\n";
	chown $uid, $gid, @_ or die "could not chown @_ to postgres: $!\n";
}

# As root, 'initdb' and 'pg_ctl' found first in PATH run the real ones as
# postgres; Cluster.pm calls them by name.
sub owner_wrappers
{
	return unless $as_root;
	my $dir = "$PostgreSQL::Test::Utils::tmp_check/bin";
	make_path($dir);
	for my $prog (qw(initdb pg_ctl))
	{
		open my $fh, '>', "$dir/$prog" or die "could not write $dir/$prog: $!\n";
		print $fh "#!/bin/sh\nexec runuser -u postgres -- '$pg_bindir/$prog' \"\$@\"\n";
		close $fh;
		chmod 0755, "$dir/$prog";
	}
	$ENV{PATH} = "$dir:$ENV{PATH}" unless $ENV{PATH} =~ /^\Q$dir\E:/;
}

# A started node, with the environment pointed at it.  $extra_conf is
# appended to postgresql.conf.  The node stops when the test ends (Cluster's
# END block) and its files go when every test passed.
sub mailer_node
{
	my ($name, $extra_conf) = @_;
	$name //= 'node';

	owner_wrappers();
	give_to_owner($PostgreSQL::Test::Utils::tmp_check, $PostgreSQL::Test::Utils::log_path);
	# A failed run keeps its node's files for a look; the next run starts
	# anew (Cluster refuses a data directory that exists).
	(my $test = basename($0)) =~ s/\.[^.]+$//;
	remove_tree("$PostgreSQL::Test::Utils::tmp_check/t_${test}_${name}_data");
	my $node = PostgreSQL::Test::Cluster->new($name);
	give_to_owner($node->basedir, $node->host);

	# The superuser is 'postgres' whoever runs the test, as in pg.sh.
	$node->init(extra => [ '-U', 'postgres' ]);
	# After Cluster's settings, so these win: the shared cluster's, and a
	# crashed backend restarts the server as it does in production.
	$node->append_conf('postgresql.conf', MailerTest::shared_settings($database)
		  . "restart_after_crash = on\nlog_statement = none\n" . ($extra_conf // ''));

	$ENV{PGHOST} = $node->host;
	$ENV{PGPORT} = $node->port;
	$ENV{PGUSER} = 'postgres';
	$ENV{PGDATABASE} = $database;
	$ENV{PGDATA} = $node->data_dir;
	$ENV{MAILER_PG_LOG} = $node->logfile;
	$MailerTest::NODE = $node;

	$node->start;
	{
		local $ENV{PGDATABASE} = 'postgres';
		MailerTest::psql("CREATE DATABASE $database");
	}
	MailerTest::wait_server_ready();
	return $node;
}

1;
