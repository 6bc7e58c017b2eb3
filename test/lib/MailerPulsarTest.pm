# MailerPulsarTest: what the Pulsar tests (test/t/18x_pulsar_*.pl) share, on
# top of MailerTest. The standalone is started on demand (pulsar.sh start
# is idempotent and a second start only waits until it is healthy); a test
# that cannot start it skips, saying why, rather than fail on a machine
# without Java or the jars. test/run-all.sh stops it at the end.
package MailerPulsarTest;

use strict;
use warnings;
use Exporter 'import';
use IPC::Run ();
use Test::More ();
use MailerTest;

our @EXPORT = qw(pulsar pulsar_start_or_skip pulsar_url pt_produce pt_read);

# pulsar.sh's URL, as env.sh derives it from PGPORT.
sub pulsar_url
{
	return $ENV{PULSAR_URL} // 'http://127.0.0.1:' . (28000 + ($ENV{PGPORT} // 54329) % 1000);
}

sub pulsar
{
	my ($out, $err) = ('', '');
	IPC::Run::run(["$ROOT/test/services/pulsar.sh", @_], '>', \$out, '2>', \$err)
	  or die "pulsar.sh @_ failed: $err$out\n";
	return $out;
}

# Start the standalone, or skip the whole test file with pulsar.sh's reason.
sub pulsar_start_or_skip
{
	my ($out, $err) = ('', '');
	return if IPC::Run::run(["$ROOT/test/services/pulsar.sh", 'start'], '>', \$out, '2>', \$err);
	my ($why) = "$err$out" =~ /ERROR: ([^\n]*)/;
	Test::More::plan(skip_all => 'Pulsar could not start: ' . ($why // 'pulsar.sh start failed'));
}

# test/pulsar_tool, built once per test file (make does nothing when it is
# up to date). Runs it with @args after the URL; returns (exit status,
# stdout lines, stderr).
my $TOOL;

sub pt_run
{
	my (@args) = @_;
	unless ($TOOL)
	{
		system('make', '-s', '-C', "$ROOT/test/pulsar_tool", "PG_CONFIG=" . ($ENV{PG_CONFIG} // 'pg_config')) == 0
		  or die "could not build test/pulsar_tool\n";
		$TOOL = "$ROOT/test/pulsar_tool/pulsar_tool";
	}
	my ($out, $err) = ('', '');
	IPC::Run::run([ $TOOL, pulsar_url(), @args ], '>', \$out, '2>', \$err, IPC::Run::timeout(90));
	return ($? >> 8, [ split /\n/, $out ], $err);
}

# Produce @payloads in order as producer $name from $initial (sequence ids
# $initial + 1, ...); %opt: key, property (NAME=VALUE), both none when
# absent. Returns the lines
# "SEQUENCE_ID<TAB>MESSAGE_ID<TAB>L:E:P:B" or "SEQUENCE_ID<TAB>duplicate";
# dies if the tool fails.
sub pt_produce
{
	my ($topic, $name, $initial, $payloads, %opt) = @_;
	local $ENV{PULSAR_TOOL_KEY} = $opt{key} // '';
	local $ENV{PULSAR_TOOL_PROPERTY} = $opt{property} // '';
	my ($rc, $lines, $err) = pt_run('produce', $topic, $name, $initial, @$payloads);
	die "pulsar_tool produce $topic failed: $err\n" if $rc != 0;
	return $lines;
}

# Read $count messages after $from; returns (exit status, lines
# "MESSAGE_ID<TAB>L:E:P:B<TAB>KEY<TAB>PROPERTIES<TAB>PAYLOAD", stderr).
# Status 2: more than $count arrived; 1: fewer, or an error.
sub pt_read
{
	my ($topic, $from, $count) = @_;
	return pt_run('read', $topic, $from, $count);
}

1;
