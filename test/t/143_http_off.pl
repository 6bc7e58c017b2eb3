# mailer.http_port = 0, the default, opens nothing (issue 15, item 4): no
# "mailer http" process, and no process of the server listens on any TCP
# port.  The setting takes effect only at a restart (PGC_POSTMASTER): a
# reload neither starts the worker nor opens the port; a restart does (so
# the checks above can see one), and a restart with it reset closes it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use MailerHttp;
use IO::Socket::INET;
use Test::More;

my $node = mailer_node('off');
psql("CREATE EXTENSION mailer");

# The TCP ports some process of the server listens on (IPv4 and IPv6).
sub server_listening_ports
{
	my %inode_port;
	for my $file ('/proc/net/tcp', '/proc/net/tcp6')
	{
		open my $fh, '<', $file or next;
		<$fh>;
		while (<$fh>)
		{
			my @f = split ' ';
			next unless $f[3] eq '0A';	# LISTEN
			my ($port) = $f[1] =~ /:([0-9A-F]+)$/;
			$inode_port{ $f[9] } = hex $port;
		}
		close $fh;
	}
	my %ports;
	for my $pid (keys %{ server_processes() })
	{
		for my $fd (glob "/proc/$pid/fd/*")
		{
			my $link = readlink $fd // next;
			$ports{ $inode_port{$1} } = 1 if $link =~ /^socket:\[(\d+)\]$/ && exists $inode_port{$1};
		}
	}
	return join(' ', sort { $a <=> $b } keys %ports);
}

sub refused
{
	my ($port) = @_;
	my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 5);
	return !$sock && $!{ECONNREFUSED};
}

is(psql("SHOW mailer.http_port"), '0', 'mailer.http_port is 0 by default');
is(psql("SELECT context FROM pg_settings WHERE name = 'mailer.http_port'"), 'postmaster',
	'it is a postmaster setting');
is(http_worker_pid(), '', 'no "mailer http" process');
is(psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer http'"), '0',
	'... nor in pg_stat_activity');
is(server_listening_ports(), '', 'no process of the server listens on a TCP port');

my $port = free_port();
like(psql_fails("SET mailer.http_port = $port"), qr/cannot be changed without restarting the server/,
	'SET mailer.http_port is refused');

# A reload does not apply it.
my $log = pg_log_size();
psql("ALTER SYSTEM SET mailer.http_port = $port");
psql("SELECT pg_reload_conf()");
wait_until('the reload is logged', sub {
	pg_log_since($log) =~ /parameter "mailer\.http_port" cannot be changed without restarting the server/;
}, 30);
pass('a reload says mailer.http_port needs a restart');
is(psql("SHOW mailer.http_port"), '0', '... and the setting stays 0');
is(http_worker_pid(), '', '... no "mailer http" process');
ok(refused($port), "... and 127.0.0.1:$port refuses connections");

# A restart applies it: the worker starts and the port answers.
pg_service('restart');
is(psql("SHOW mailer.http_port"), $port, 'after a restart the setting is applied');
my $answer;
wait_until('the endpoint answers', sub { ($answer = http_get('/metrics', port => $port, timeout => 5))->{status} == 200 }, 60);
is($answer->{status}, 200, "... GET /metrics on 127.0.0.1:$port answers 200");
like(http_worker_pid(), qr/^\d+$/, '... from a "mailer http" process');
is(server_listening_ports(), $port, '... the only TCP port the server listens on');

# Reset and restarted: closed again.
psql("ALTER SYSTEM RESET mailer.http_port");
pg_service('restart');
is(http_worker_pid(), '', 'reset and restarted: no "mailer http" process');
is(server_listening_ports(), '', '... no TCP port');
ok(refused($port), "... and 127.0.0.1:$port refuses connections");
done_testing();
