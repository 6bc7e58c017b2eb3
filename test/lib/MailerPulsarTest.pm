# MailerPulsarTest: what the Pulsar tests (test/t/18x_pulsar_*.pl, also in
# test/t/long) share, on top of MailerTest. The standalone is started on
# demand (pulsar.sh start is idempotent and a second start only waits until
# it is healthy); a test that cannot start it skips, saying why, rather than
# fail on a machine without Java or the jars. test/run-all.sh stops it at
# the end.
package MailerPulsarTest;

use strict;
use warnings;
use Exporter 'import';
use IO::Socket::INET ();
use IPC::Run ();
use Test::More ();
use MailerTest;

our @EXPORT = qw(pulsar pulsar_start_or_skip pulsar_url pulsar_entries pulsar_lags_sql pulsar_v_job_sql pt_produce pt_read pulsar_produce_lines
  orders_produce_start orders_produce_finish pulsar_java test_port fake_server_start fake_server_stop
  psink_passthrough psink_read psink_wait_published psink_row psink_produce psink_check);

# The SQL giving a job's lag per partition as "0=12,1=null" (in partition order).
sub pulsar_lags_sql
{
	my ($job) = @_;
	return "SELECT string_agg(partition || '=' || coalesce(lag::text, 'null'), ',' ORDER BY partition) "
	  . "FROM mailer.partition_metrics WHERE name = '$job'";
}

# The lag tests' job (210-213): each JSON record's "v" of a Pulsar topic
# (tenant/ns/topic) appended to a table ($opt{table}, by default named as
# the job), on the memory backend, with $opt{checkpoint} as its interval
# if given. Returns the create_job statement.
sub pulsar_v_job_sql
{
	my ($job, $service_url, $topic, %opt) = @_;
	my $table = $opt{table} // $job;
	my $checkpoint = defined $opt{checkpoint} ? qq{,\n  "checkpoint": {"interval": "$opt{checkpoint}"}} : '';
	return qq{SELECT mailer.create_job('$job', \$\${
  "source": {"type": "pulsar", "service_url": "$service_url", "topic": "persistent://$topic", "format": "json"},
  "steps": [{"map": {"v": "value->>'v'"}}],
  "sink": {"type": "table", "table": "$table", "mode": "append"},
  "state": {"backend": "memory"}$checkpoint
}\$\$)};
}

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

# The entries a topic (not partitioned) holds, from the broker's stats: as
# many as its messages when its producers do not batch (the sink's). A read
# of the topic for a few seconds would count what a loaded machine read in
# that time instead.
sub pulsar_entries
{
	my ($topic) = @_;
	my ($n) = pulsar('stats', $topic) =~ /"numberOfEntries":(\d+)/;
	die "no numberOfEntries in the stats of $topic\n" unless defined $n;
	return $n;
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

# Produce each line of $text to $topic (a topic or one partition) through
# pulsar.sh, from a producer of its own; dies if that fails.
sub pulsar_produce_lines
{
	my ($topic, $text) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ "$ROOT/test/services/pulsar.sh", 'produce', $topic ], '<', \$text, '>', \$out, '2>', \$err)
	  or die "producing to $topic failed: $err\n";
}

# A private loopback port for a test's own server ($base 24000, 25000 or
# 27000), following PGPORT as pulsar.sh's ports do.
sub test_port
{
	my ($base) = @_;
	return $base + ($ENV{PGPORT} // 54329) % 1000;
}

# Start a server of the tests' own (a Python script of test/lib and its
# arguments) that listens on $port; returns its handle once the port
# takes connections.
my @FAKE_SERVERS;

sub fake_server_start
{
	my ($port, $script, @args) = @_;
	my $h = IPC::Run::start([ 'python3', "$ROOT/test/lib/$script", @args ], '>', '/dev/null', '2>', '/dev/null');
	push @FAKE_SERVERS, $h;
	MailerTest::wait_until("$script to listen on $port", sub {
		return IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp') ? 1 : 0;
	}, 30);
	return $h;
}

sub fake_server_stop
{
	my ($h) = @_;
	$h->kill_kill if $h->pumpable;
	@FAKE_SERVERS = grep { $_ != $h } @FAKE_SERVERS;
}

# A test that dies leaves no server of its own behind on its port.
END
{
	local $?;
	fake_server_stop($_) for @FAKE_SERVERS;
}

# Run a producer of test/pulsar_java (Pulsar's own Java client, which
# batches and sets what the WebSocket API cannot) as CLASS with the
# broker's binary URL, then @args; compiled once per test file against
# the jars pulsar.sh fetched. Dies if it fails.
my $JAVA_DIR;

sub pulsar_java
{
	my ($class, @args) = @_;
	my $cache = $ENV{MAILER_CACHE_DIR} // (($ENV{XDG_CACHE_HOME} // "$ENV{HOME}/.cache") . '/mailer');
	my $libs = "$cache/pulsar-" . ($ENV{PULSAR_VERSION} // '4.0.7') . '/libs/*';
	my ($out, $err) = ('', '');
	unless ($JAVA_DIR)
	{
		$JAVA_DIR = ($ENV{MAILER_RUN_DIR} // '/tmp') . "/pulsar_java.$$";
		mkdir $JAVA_DIR;
		IPC::Run::run([ 'javac', '-d', $JAVA_DIR, '-cp', $libs, glob("$ROOT/test/pulsar_java/*.java") ],
			'>', \$out, '2>', \$err) or die "javac test/pulsar_java failed: $err$out\n";
	}
	my $binary = 'pulsar://127.0.0.1:' . ($ENV{PULSAR_PORT} // 26000 + ($ENV{PGPORT} // 54329) % 1000);
	IPC::Run::run([ 'java', '-cp', "$libs:$JAVA_DIR", $class, $binary, @args ], '>', \$out, '2>', \$err,
		IPC::Run::timeout(120)) or die "java $class @args failed: $err$out\n";
	return $out;
}

# Start producing the orders $from..$to of $table (MailerKafkaTest's
# orders_source) as JSON to partitions 0..$parts-1 of $topic, order_id
# % $parts to its partition in order, a producer per partition, all at
# once. %opt: key and property (NAME=VALUE) for every message. Returns the
# running producers, for orders_produce_finish.
sub orders_produce_start
{
	my ($table, $topic, $from, $to, $parts, %opt) = @_;
	my @running;
	local $ENV{PULSAR_TOOL_KEY} = $opt{key} // '';
	local $ENV{PULSAR_TOOL_PROPERTY} = $opt{property} // '';
	for my $p (0 .. $parts - 1)
	{
		my $sql = "SELECT json_build_object('order_id', order_id, 'customer_id', customer_id, "
		  . "'amount', amount, 'ts', ts)::text FROM $table "
		  . "WHERE order_id BETWEEN $from AND $to AND order_id % $parts = $p ORDER BY order_id";
		my ($out, $err) = ('', '');
		my $h = IPC::Run::start([ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-c', $sql ],
			'|', [ "$ROOT/test/services/pulsar.sh", 'produce', "$topic-partition-$p", "orders-$from-$to-$p", 0 ],
			'>', \$out, '2>', \$err);
		push @running, [ $h, \$err, "$topic-partition-$p" ];
	}
	return \@running;
}

sub orders_produce_finish
{
	my ($running) = @_;
	for my $r (@$running)
	{
		my ($h, $err, $where) = @$r;
		$h->finish or die "producing orders to $where failed: $$err\n";
	}
}

# The Pulsar sink's tests (200-209): a passthrough job from Pulsar topic
# $in to Pulsar topic $out (both tenant/ns/topic): each message's key,
# payload (text) and property "src" as they came.
sub psink_passthrough
{
	my ($job, $in, $out, %opt) = @_;
	my $url = pulsar_url();
	psql(qq{SELECT mailer.create_job('$job', \$\${
	  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$in", "format": "text"},
	  "sink": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$out",
	           "key": "key", "value": "value", "format": "text", "properties": {"src": "headers->>'src'"}},
	  "checkpoint": {"interval": "@{[ $opt{interval} // '500 milliseconds' ]}"}}\$\$)});
}

# Everything $out holds, read from its start: a reference to the lines
# "MESSAGE_ID<TAB>L:E:P:B<TAB>KEY<TAB>PROPERTIES<TAB>PAYLOAD". Dies unless
# it holds exactly $count (more: the surplus is read too, and reported).
sub psink_read
{
	my ($out, $count) = @_;
	my ($rc, $lines, $err) = pt_read($out, 'earliest', $count);
	die "reading $out: " . scalar(@$lines) . " messages, not $count (status $rc): $err\n" if $rc != 0;
	return $lines;
}

# The job's row of mailer.kafka_sinks (a hash).
sub psink_row
{
	my ($job) = @_;
	my @f = split /\|/, psql("SELECT published_epoch, pending_records, generation FROM mailer.kafka_sinks WHERE job = '$job'"), -1;
	return { published_epoch => $f[0], pending_records => $f[1], generation => $f[2] };
}

# Wait until the job has committed $records input records and published
# every one of its outbox's records.
sub psink_wait_published
{
	my ($job, $records, $timeout) = @_;
	MailerTest::wait_until("$job to commit $records records and publish them", sub {
		return committed_records($job) == $records
		  && psql("SELECT count(*) FROM mailer.kafka_sinks WHERE job = '$job' AND pending_records = 0") eq '1';
	}, $timeout // 120);
}

# Produce the next $n payloads {"n": $$produced + 1} ... to the two
# partitions of $in (n odd to partition 1), keyed "k<partition>", with
# the property src=t200; $$produced counts them.
sub psink_produce
{
	my ($in, $produced, $n) = @_;
	for my $p (0, 1)
	{
		my @payloads = map { qq({"n": $_}) } grep { $_ % 2 == $p } $$produced + 1 .. $$produced + $n;
		pt_produce("$in-partition-$p", "psink-$$produced-$p", 0, \@payloads, key => "k$p", property => 'src=t200');
	}
	$$produced += $n;
}

# $out holds each payload 1..$produced once, each with its key and
# property, on no partition.
sub psink_check
{
	my ($out, $produced, $what) = @_;
	my $lines = eval { psink_read($out, $produced) };
	if (!$lines)
	{
		Test::More::fail("$what: the topic holds $produced records: $@");
		return;
	}
	my (%seen, $bad);
	for (@$lines)
	{
		my (undef, $id, $key, $props, $payload) = split /\t/;
		my ($n) = $payload =~ /^\{"n": (\d+)\}$/;
		$bad++ unless defined $n && $key eq 'k' . ($n % 2) && $props eq 'src=t200' && $id =~ /:-1:-1$/;
		$seen{$n // ''}++;
	}
	Test::More::is(scalar(keys %seen), $produced, "$what: each of the $produced records once");
	Test::More::is($bad // 0, 0, "$what: every record with its key and property, on the topic that is not partitioned");
}

1;
