# MailerHttp: what the tests of the HTTP endpoint (test/t/14x_http_*.pl)
# share: requests to the server's "mailer http" worker, the Prometheus
# text format read back into samples, the worker's pid and memory, and a
# free TCP port for a server of a test's own.  Requests use HTTP::Tiny
# (Perl core); raw_request speaks to the socket directly for requests
# HTTP::Tiny would not send.
package MailerHttp;

use strict;
use warnings;
use Exporter 'import';
use HTTP::Tiny;
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use Time::HiRes qw(time);
use MailerTest qw(psql);

our @EXPORT = qw(http_port http_get http_json raw_request parse_metrics
  metric_value server_processes http_worker_pid proc_status_kb free_port artifacts_dir);

# The port the server's HTTP worker listens on (mailer.http_port), asked of
# the server itself, so that a test follows the cluster's setting.
sub http_port
{
	my $port = psql("SHOW mailer.http_port");
	die "the server has no HTTP endpoint (mailer.http_port = $port)\n" unless $port > 0;
	return $port;
}

# GET (or another method, $opt{method}) a path of the endpoint on
# 127.0.0.1; $opt{token} sends it as a bearer token, $opt{port} picks the
# port (default http_port()).  Returns HTTP::Tiny's response hash
# (status 599 when no answer came in $opt{timeout} seconds).
sub http_get
{
	my ($path, %opt) = @_;
	my $port = $opt{port} // http_port();
	my %headers;
	$headers{Authorization} = "Bearer $opt{token}" if defined $opt{token};
	my $http = HTTP::Tiny->new(timeout => $opt{timeout} // 10, keep_alive => 0);
	return $http->request($opt{method} // 'GET', "http://127.0.0.1:$port$path",
		{ headers => \%headers, (defined $opt{content} ? (content => $opt{content}) : ()) });
}

# GET a JSON answer and decode it (dies unless it is 200 and JSON).
sub http_json
{
	my ($path, %opt) = @_;
	my $r = http_get($path, %opt);
	die "GET $path: $r->{status} $r->{reason}: $r->{content}\n" unless $r->{status} == 200;
	return JSON::PP::decode_json($r->{content});
}

# Send raw bytes to the endpoint and read until the server closes the
# connection or $timeout seconds pass.  Returns (what came back, how it
# ended: 'closed' or 'timeout').  The server may close while the request is
# still being sent (a refused oversized header): that is not an error here.
sub raw_request
{
	my ($port, $bytes, $timeout) = @_;
	$timeout //= 15;
	local $SIG{PIPE} = 'IGNORE';
	my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp')
	  or die "could not connect to 127.0.0.1:$port: $!\n";
	$sock->blocking(0);
	my $sel = IO::Select->new($sock);
	my ($got, $sent) = ('', 0);
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		if ($sent < length $bytes)
		{
			my $n = syswrite($sock, $bytes, 65536, $sent);
			if (defined $n)
			{
				$sent += $n;
			}
			elsif (!$!{EAGAIN} && !$!{EWOULDBLOCK})
			{
				$sent = length $bytes;	# the server closed: read what it said
			}
		}
		next unless $sel->can_read(0.05);
		my $n = sysread($sock, $got, 65536, length $got);
		return ($got, 'closed') if !defined $n && !$!{EAGAIN} && !$!{EWOULDBLOCK};	# reset
		return ($got, 'closed') if defined $n && $n == 0;
	}
	return ($got, 'timeout');
}

# The samples of a Prometheus text exposition: a list of
# { name, labels => {..}, value }, plus the TYPE of each family.
sub parse_metrics
{
	my ($text) = @_;
	my (@samples, %type, %help);
	for my $line (split /\n/, $text)
	{
		if ($line =~ /^# TYPE (\S+) (\S+)$/)
		{
			$type{$1} = $2;
			next;
		}
		if ($line =~ /^# HELP (\S+) /)
		{
			$help{$1} = 1;
			next;
		}
		next if $line =~ /^#/ || $line eq '';
		my ($name, $labels, $value) = $line =~ /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/
		  or die "not a sample line: $line\n";
		my %l;
		while (defined $labels && $labels =~ /\G([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/gc)
		{
			my ($k, $v) = ($1, $2);
			$v =~ s/\\(["\\n])/$1 eq 'n' ? "\n" : $1/ge;
			$l{$k} = $v;
		}
		push @samples, { name => $name, labels => \%l, value => $value };
	}
	return { samples => \@samples, type => \%type, help => \%help };
}

# The value of the sample of $name whose labels include %want (undef when
# there is none).
sub metric_value
{
	my ($parsed, $name, %want) = @_;
	for my $s (@{ $parsed->{samples} })
	{
		next unless $s->{name} eq $name;
		next if grep { ($s->{labels}{$_} // "\0") ne $want{$_} } keys %want;
		return $s->{value};
	}
	return undef;
}

# The server's processes (the postmaster of $PGDATA and its children), as
# { pid => process title }.
sub server_processes
{
	open my $fh, '<', "$ENV{PGDATA}/postmaster.pid" or return {};
	chomp(my $postmaster = <$fh> // '');
	close $fh;
	my %procs;
	for my $dir (glob '/proc/[0-9]*')
	{
		my ($pid) = $dir =~ m{(\d+)$};
		open my $st, '<', "$dir/stat" or next;
		my $stat = <$st> // '';
		close $st;
		my ($ppid) = $stat =~ /\) \S+ (\d+)/ or next;
		next unless $pid == $postmaster || $ppid == $postmaster;
		open my $cl, '<', "$dir/cmdline" or next;
		my $title = do { local $/; <$cl> } // '';
		close $cl;
		$title =~ s/\0+$//;
		$title =~ s/\0/ /g;
		$procs{$pid} = $title;
	}
	return \%procs;
}

# The pid of the server's "mailer http" worker ('' when there is none):
# by its process title, which it has from its start (pg_stat_activity
# shows it only once it has connected to its database).
sub http_worker_pid
{
	my $procs = server_processes();
	my ($pid) = grep { $procs->{$_} =~ /^postgres: (?:\S+: )?mailer http\b/ } keys %$procs;
	return $pid // '';
}

# A field of /proc/<pid>/status in kB (VmRSS, VmHWM).
sub proc_status_kb
{
	my ($pid, $field) = @_;
	open my $fh, '<', "/proc/$pid/status" or die "no process $pid: $!\n";
	while (<$fh>)
	{
		return $1 if /^\Q$field\E:\s+(\d+) kB/;
	}
	die "no $field in /proc/$pid/status\n";
}

# A TCP port nothing listens on now, for a server of the test's own.
sub free_port
{
	my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1, Proto => 'tcp')
	  or die "could not bind a free port: $!\n";
	my $port = $sock->sockport;
	close $sock;
	return $port;
}

# Where tests leave files for a person to look at (a screenshot):
# $MAILER_ARTIFACTS, by default tmp_check/artifacts in the source tree
# (ignored by git, beside the TAP logs of pg_regress).
sub artifacts_dir
{
	my $dir = $ENV{MAILER_ARTIFACTS} // "$MailerTest::ROOT/tmp_check/artifacts";
	require File::Path;
	File::Path::make_path($dir);
	require Cwd;
	return Cwd::realpath($dir);
}

1;
