# MailerUpgradeTest: run a released mailer next to the shared test services
# without touching them.  A private copy of the PostgreSQL installation (the
# one PG_CONFIG names) gets a release built from its git tag, a private
# cluster of its own runs it, and the current tree is installed there
# afterwards, as a user upgrading would.  The temporary directory and the
# private cluster go away when the test ends, passes or fails.
package MailerUpgradeTest;

use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(basename dirname);
use File::Path qw(make_path remove_tree);
use File::Temp ();
use IPC::Run ();
use Test::More ();
use MailerTest;

our @EXPORT = qw(upgrade_workdir release_commit private_pg_install build_release
  install_current_tree private_cluster_init private_cluster_start private_cluster_env
  private_cluster_stop private_log_size private_log_since kafka_start kafka_finish);

# initdb refuses root: then clusters belong to postgres (as in
# test/services/env.sh).
my $OWNER = $> == 0 ? 'postgres' : scalar getpwuid($>);

my $workdir;		# the temporary directory, removed at the end
my @clusters;		# private clusters started, stopped at the end

# The temporary directory of this test: the PostgreSQL copy, the release's
# source, the private cluster and the build logs.  Readable by the
# cluster's owner, who is not the caller when the caller is root.
sub upgrade_workdir
{
	return $workdir if $workdir;
	$workdir = File::Temp::tempdir('mailer-upgrade-XXXXXX', TMPDIR => 1, CLEANUP => 0);
	chmod 0755, $workdir or die "chmod $workdir: $!\n";
	# prove stops a test with a signal on timeout; END must still run.
	$SIG{$_} = sub { die "killed by signal\n" } for qw(INT TERM HUP);
	return $workdir;
}

END
{
	my $status = $?;
	for my $c (@clusters)
	{
		next unless -f "$c->{pgdata}/postmaster.pid";
		if ($status != 0 || !Test::More->builder->is_passing)
		{
			my @lines = split /^/m, private_log_since($c, 0);
			splice @lines, 0, @lines - 40 if @lines > 40;
			Test::More::diag("---- last lines of the private server's log ($c->{log}) ----\n"
				  . join('', @lines));
		}
		_owner_run([ "$c->{bindir}/pg_ctl", '-D', $c->{pgdata}, '-m', 'immediate', '-w', 'stop' ]);
	}
	remove_tree($workdir) if $workdir && -d $workdir;
	$? = $status;
}

# Run a command, its output into a log file; die with the log's tail.
sub _run
{
	my ($cmd, $what, %opt) = @_;
	my $log = upgrade_workdir() . '/' . ($opt{log} // 'commands.log');
	open my $fh, '>>', $log or die "open $log: $!\n";
	print $fh "\$ @$cmd\n";
	close $fh;
	my $ok = IPC::Run::run($cmd, '<', \undef, '>>', $log, '2>>', $log);
	return 1 if $ok;
	my @lines = do { open my $in, '<', $log; <$in> };
	die "$what failed (exit " . ($? >> 8) . "): @$cmd\n"
	  . join('', @lines[ ($#lines > 40 ? $#lines - 40 : 0) .. $#lines ]);
}

sub _owner_run
{
	my ($cmd) = @_;
	my @cmd = $> == 0 ? ('runuser', '-u', $OWNER, '--', @$cmd) : @$cmd;
	my ($out, $err) = ('', '');
	return IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
}

sub _capture
{
	my (@cmd) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err) or return undef;
	chomp $out;
	return $out;
}

# The commit of a release: its tag, else the commit id given.  Fails with
# what to fetch when the checkout has neither (a shallow clone, most often).
sub release_commit
{
	my ($tag, $commit) = @_;
	my $git = sub { _capture('git', '-c', 'safe.directory=*', '-C', $ROOT, @_) };
	defined $git->('rev-parse', '--git-dir')
	  or die "$ROOT is not a git checkout: the release $tag cannot be built from it\n";
	for my $ref ("refs/tags/$tag", $commit)
	{
		my $id = $git->('rev-parse', '--verify', '--quiet', "$ref^{commit}");
		return $id if $id;
	}
	my $shallow = ($git->('rev-parse', '--is-shallow-repository') // '') eq 'true'
	  ? ' This clone is shallow: run "git fetch --unshallow --tags" (or "git fetch origin tag '
		. "$tag\")."
	  : " Fetch the tags: git fetch origin tag $tag.";
	die "neither the tag $tag nor the commit $commit is in this checkout.$shallow\n";
}

# A private copy of the PostgreSQL installation that $pg_config describes,
# under the work directory: every directory keeps its absolute path below
# the new root, so the copied pg_config and server find their share, lib
# and include directories relative to themselves (as /work/envs/mkenv.sh
# relies on too).  Any mailer already installed there is removed.  Returns
# a hash: root, pg_config, bindir, sharedir, pkglibdir.
sub private_pg_install
{
	my ($pg_config) = @_;
	my %dir;
	for my $what (qw(bindir pkglibdir sharedir includedir pkgincludedir includedir-server))
	{
		$dir{$what} = _capture($pg_config, "--$what")
		  // die "$pg_config --$what failed: is PG_CONFIG right?\n";
	}
	my $home = dirname($dir{bindir});
	my @trees = index("$dir{pkglibdir}/", "$home/") == 0
	  ? ($home) : ($dir{bindir}, $dir{pkglibdir});
	push @trees, @dir{qw(sharedir includedir pkgincludedir includedir-server)};
	# Copy each tree once, and none that lies inside another.
	my %seen;
	@trees = grep { !$seen{$_}++ } @trees;
	@trees = grep {
		my $t = $_;
		!grep { $_ ne $t && index("$t/", "$_/") == 0 } @trees
	} @trees;

	# Hard links where the file system allows them (a copy is slow on a busy
	# disk): no file of the copy is ever written to, and the mailer files
	# that get installed are unlinked first, below.
	my $root = upgrade_workdir() . '/pg';
	for my $t (@trees)
	{
		my $to = $root . dirname($t);
		make_path($to);
		next if IPC::Run::run([ 'cp', '-al', $t, "$to/" ], '<', \undef, '>', \my $out, '2>', \my $err);
		remove_tree("$to/" . basename($t));
		_run([ 'cp', '-a', $t, "$to/" ], "copying $t");
	}
	my %pg = (root => $root, pg_config => "$root$dir{bindir}/pg_config");
	for my $what (qw(bindir sharedir pkglibdir))
	{
		$pg{$what} = _capture($pg{pg_config}, "--$what");
		$pg{$what} eq "$root$dir{$what}"
		  or die "the copied pg_config reports $what $pg{$what}, not $root$dir{$what}: "
		  . "this PostgreSQL installation does not relocate\n";
	}
	my @mailer = grep { -e } ("$pg{pkglibdir}/mailer.so", glob("$pg{sharedir}/extension/mailer[.-]*"),
		"$pg{pkglibdir}/bitcode/mailer", "$pg{pkglibdir}/bitcode/mailer.index.bc");
	remove_tree(@mailer) if @mailer;
	!grep { -e } @mailer or die "could not remove mailer from the copy of PostgreSQL: @mailer\n";
	return \%pg;
}

# Build a commit of this repository (git archive into the work directory)
# and install it into the private installation.
sub build_release
{
	my ($commit, $pg) = @_;
	my $src = upgrade_workdir() . "/src-$commit";
	make_path($src);
	my $err = '';
	IPC::Run::run([ 'git', '-c', 'safe.directory=*', '-C', $ROOT, 'archive', '--format=tar', $commit ], '2>', \$err,
		'|', [ 'tar', '-x', '-C', $src ], '2>>', \$err)
	  or die "git archive $commit into $src failed: $err\n";
	_run([ 'make', '-C', $src, '-s', '-j2', "PG_CONFIG=$pg->{pg_config}" ], "building $commit",
		log => 'build-release.log');
	_run([ 'make', '-C', $src, '-s', 'install', "PG_CONFIG=$pg->{pg_config}" ],
		"installing $commit", log => 'build-release.log');
}

# Build this tree as the suite does (with the PG_CONFIG it was copied
# from, so that the objects stay valid for the next ordinary build and
# are not rebuilt when they are current), then install it into the
# private installation.
sub install_current_tree
{
	my ($pg, $pg_config) = @_;
	_run([ 'make', '-C', $ROOT, '-s', '-j2', "PG_CONFIG=$pg_config" ], 'building this tree',
		log => 'build-current.log');
	_run([ 'make', '-C', $ROOT, '-s', 'install', "PG_CONFIG=$pg->{pg_config}" ],
		'installing this tree into the private PostgreSQL', log => 'build-current.log');
}

# A cluster in the work directory with the settings of
# test/services/pg.sh: mailer preloaded, its launcher serving database
# 'mailer'; only a Unix socket, in a directory of its own, so its port
# cannot clash with another server's.  Returns a hash for the functions
# below and for %ENV (host, port, pgdata).
sub private_cluster_init
{
	my ($pg, %opt) = @_;
	my $dir = upgrade_workdir() . '/cluster';
	my %c = (bindir => $pg->{bindir}, pgdata => "$dir/pgdata", host => "$dir/sock",
		log => "$dir/postgresql.log", port => $opt{port} // 55092,
		database => $opt{database} // 'mailer');
	make_path($c{pgdata}, $c{host});
	open my $fh, '>', $c{log} or die "open $c{log}: $!\n";
	close $fh;
	if ($> == 0)
	{
		my (undef, undef, $uid, $gid) = getpwnam($OWNER) or die "no user $OWNER to own the cluster\n";
		chown $uid, $gid, $dir, $c{pgdata}, $c{host}, $c{log} or die "chown $dir: $!\n";
	}
	my @initdb = ("$c{bindir}/initdb", '-D', $c{pgdata}, '-U', 'postgres', '--auth=trust', '--encoding=UTF8',
		'--no-instructions');
	unshift @initdb, 'runuser', '-u', $OWNER, '--' if $> == 0;
	_run(\@initdb, 'initdb of the private cluster', log => 'initdb.log');
	my $settings = MailerTest::shared_settings($c{database});
	open $fh, '>>', "$c{pgdata}/postgresql.conf" or die "open postgresql.conf: $!\n";
	print $fh <<CONF;

# ---- mailer upgrade test cluster (settings of test/services/pg.sh) ----
port = $c{port}
listen_addresses = ''
unix_socket_directories = '$c{host}'
$settings
shared_buffers = 128MB
CONF
	close $fh;
	push @clusters, \%c;
	return \%c;
}

# Start the cluster (making its database the first time); returns once
# the mailer launcher is connected.
sub private_cluster_start
{
	my ($c) = @_;
	_owner_run([ "$c->{bindir}/pg_ctl", '-D', $c->{pgdata}, '-l', $c->{log}, '-w', '-t', '60', 'start' ])
	  or die "the private server did not start:\n" . private_log_since($c, 0);
	local $ENV{PGHOST} = $c->{host};
	local $ENV{PGPORT} = $c->{port};
	local $ENV{PGUSER} = 'postgres';
	{
		local $ENV{PGDATABASE} = 'postgres';
		psql("CREATE DATABASE $c->{database}")
		  if psql("SELECT count(*) FROM pg_database WHERE datname = '$c->{database}'") eq '0';
	}
	local $ENV{PGDATABASE} = $c->{database};
	wait_until('the private server\'s mailer launcher to connect', sub {
		psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer launcher'") eq '1';
	}, 60);
}

# Point psql (and every MailerTest helper) at the cluster from now on.
sub private_cluster_env
{
	my ($c) = @_;
	$ENV{PGHOST} = $c->{host};
	$ENV{PGPORT} = $c->{port};
	$ENV{PGDATA} = $c->{pgdata};
	$ENV{PGUSER} = 'postgres';
	$ENV{PGDATABASE} = $c->{database};
}

# Stop the cluster (fast: the job workers get SIGTERM, as at any shutdown).
sub private_cluster_stop
{
	my ($c) = @_;
	_owner_run([ "$c->{bindir}/pg_ctl", '-D', $c->{pgdata}, '-m', 'fast', '-w', 'stop' ])
	  or die "the private server did not stop:\n" . private_log_since($c, 0);
}

# The private server's log: its size now, and what was written after a
# size (MailerTest's functions, pointed at this cluster's log).
sub private_log_size
{
	my ($c) = @_;
	local $ENV{MAILER_RUN_DIR} = dirname($c->{log});
	return pg_log_size();
}

sub private_log_since
{
	my ($c, $from) = @_;
	local $ENV{MAILER_RUN_DIR} = dirname($c->{log});
	return pg_log_since($from);
}

# Run several test/services/kafka.sh commands at once, in the background
# (each starts a JVM for a few seconds): kafka_start returns a handle for
# kafka_finish, which waits for them and dies if one failed:
# kafka_finish(kafka_start(['delete-records', $t, 0, 10], ...)).
sub kafka_start
{
	my (@cmds) = @_;
	my @runs;
	for my $cmd (@cmds)
	{
		my %r = (cmd => $cmd, out => '');
		$r{h} = IPC::Run::start([ "$ROOT/test/services/kafka.sh", @$cmd ], '<', \undef,
			'>', \$r{out}, '2>&1');
		push @runs, \%r;
	}
	return \@runs;
}

sub kafka_finish
{
	my ($runs) = @_;
	my @failed;
	for my $r (@$runs)
	{
		push @failed, "kafka.sh @{ $r->{cmd} }: $r->{out}" unless $r->{h}->finish;
	}
	die join('', @failed) if @failed;
}

1;
