# MailerKafkaSinkTest: what the Kafka sink tests (test/t/13x_kafka_sink_*.pl)
# share, on top of MailerTest.  A sink's output is read back from its topic
# with kcat, as a consumer would (read_committed by default), loaded into a
# table and compared in SQL with what the same computation gives over the
# input: as multisets, so that a lost record and a duplicate both show.
package MailerKafkaSinkTest;

use strict;
use warnings;
use Exporter 'import';
use IPC::Run ();
use Test::More ();
use MailerTest;

our @EXPORT = qw(ks_topic ks_sink ks_read ks_load ks_read_into ks_same
  ks_sink_row ks_wait_published ks_end_offset ks_epoch ks_hold ks_release ks_wait_job);

# A new topic named after $prefix, with $partitions partitions; @config
# are kafka.sh create-topic options (e.g. '--config', 'max.message.bytes=20000').
sub ks_topic
{
	my ($prefix, $partitions, @config) = @_;
	my $topic = unique_name($prefix);
	kafka('create-topic', $topic, $partitions // 1, @config);
	return $topic;
}

# The JSON text of a Kafka sink to $topic; %o adds fields as they are given
# (JSON text each): key, value, format, headers, options, delivery.
sub ks_sink
{
	my ($topic, %o) = @_;
	my @fields = ('"type": "kafka"', qq("brokers": "$MailerTest::BROKERS"), qq("topic": "$topic"));
	push @fields, map { qq("$_": $o{$_}) } grep { defined $o{$_} } qw(key value format headers options delivery);
	return '{' . join(', ', @fields) . '}';
}

# Every record of a topic, from the beginning, as "key<TAB>value" lines
# (a null key or value reads NULL).  $opt{isolation}: read_committed (the
# default: what a transactional consumer sees) or read_uncommitted (also
# the records of open and aborted transactions).  $opt{format}: kcat's.
sub ks_read
{
	my ($topic, %opt) = @_;
	my $isolation = $opt{isolation} // 'read_committed';
	my @cmd = ('kcat', '-b', $MailerTest::BROKERS, '-C', '-t', $topic, '-o', 'beginning',
		'-e', '-q', '-Z', '-X', "isolation.level=$isolation",
		'-f', $opt{format} // "%k\t%s\n");
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat could not read $topic ($isolation): $err\n";
	return [ split /\n/, $out ];
}

# Load such lines into a table made anew: $table (n serial, k text, v text).
sub ks_load
{
	my ($table, $lines) = @_;
	my $copy = '';
	for my $line (@$lines)
	{
		my ($k, $v) = split /\t/, $line, 2;
		$copy .= join("\t", map {
			!defined $_ || $_ eq 'NULL' ? '\N' : s/\\/\\\\/gr =~ s/\r/\\r/gr
		} ($k, $v)) . "\n";
	}
	psql("DROP TABLE IF EXISTS $table; CREATE TABLE $table (n serial, k text, v text);\n"
		  . "COPY $table (k, v) FROM STDIN;\n$copy\\.\n");
	return scalar @$lines;
}

# ks_read, then ks_load; returns how many records there were.
sub ks_read_into
{
	my ($table, $topic, %opt) = @_;
	return ks_load($table, ks_read($topic, %opt));
}

# Two queries give the same rows, as multisets: nothing missing, nothing
# extra (a duplicate is one extra).  Shows a few differences when not.
sub ks_same
{
	my ($got, $want, $name) = @_;
	my ($missing, $extra, $n_got, $n_want) = split /\|/, psql(
		"SELECT (SELECT count(*) FROM (($want) EXCEPT ALL ($got)) m), "
		  . "(SELECT count(*) FROM (($got) EXCEPT ALL ($want)) x), "
		  . "(SELECT count(*) FROM ($got) g), (SELECT count(*) FROM ($want) w)");
	my $ok = Test::More::is("$missing missing, $extra extra, $n_got records",
		"0 missing, 0 extra, $n_want records", $name);
	unless ($ok)
	{
		Test::More::diag("missing: " . psql("SELECT string_agg(m::text, ' ') FROM (SELECT * FROM (($want) EXCEPT ALL ($got)) m LIMIT 5) m"));
		Test::More::diag("extra: " . psql("SELECT string_agg(x::text, ' ') FROM (SELECT * FROM (($got) EXCEPT ALL ($want)) x LIMIT 5) x"));
	}
	return $ok;
}

# A job's row of mailer.kafka_sinks (subtask $subtask, 0 by default) as a
# hash, or undef.
sub ks_sink_row
{
	my ($job, $subtask) = @_;
	$subtask //= 0;
	my $out = psql("SELECT row_to_json(s) FROM mailer.kafka_sinks s WHERE job = '$job' AND subtask = $subtask");
	return undef if $out eq '';
	require JSON::PP;
	return JSON::PP::decode_json($out);
}

# The newest epoch a job committed (its subtask 0 row: the epoch's decision).
sub ks_epoch
{
	my ($job) = @_;
	return psql("SELECT coalesce(max(c.epoch), 0) FROM mailer.checkpoints c "
		  . "JOIN mailer.job j USING (job_id) WHERE j.name = '$job' AND c.subtask = 0");
}

# Wait until every subtask of a job has nothing pending in its outbox (and,
# when $epoch is given, has published at least that epoch).  Called once
# the epochs a test needs are committed (wait_job): their records entered
# the outbox in their checkpoint's transaction and leave it only once
# their Kafka transaction committed, so then a read_committed consumer
# sees all of them.  (published_epoch moves only with epochs that had
# records.)
sub ks_wait_published
{
	my ($job, $epoch, $timeout) = @_;
	my $want = defined $epoch ? "coalesce(published_epoch, 0) >= $epoch" : 'true';
	my $last = '';
	eval {
		wait_until("job $job to publish its outbox" . (defined $epoch ? " through epoch $epoch" : ''), sub {
			ks_unstick();
			$last = psql("SELECT coalesce(string_agg(subtask || ': published ' || coalesce(published_epoch::text, '-') || ', pending '
				|| pending_records || coalesce(', ' || (to_jsonb(s)->>'last_error'), ''), '; '), 'no row'),
				count(*) > 0 AND bool_and($want AND pending_records = 0)
				FROM mailer.kafka_sinks s WHERE job = '$job'");
			return $last =~ /\|t$/;
		}, $timeout // 120);
		1;
	} or die "$@(mailer.kafka_sinks: $last)\n";
	return 1;
}

# The sum over a topic's partitions of their end offsets (the high
# watermark: the next offset to be written).  Transaction markers take an
# offset too, so a commit or an abort moves it.
sub ks_end_offset
{
	my ($topic, $partitions) = @_;
	my @cmd = ('kcat', '-b', $MailerTest::BROKERS, '-Q', map { ('-t', "$topic:$_:-1") } 0 .. ($partitions // 1) - 1);
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat could not query the offsets of $topic: $err\n";
	my $sum = 0;
	$sum += $1 while $out =~ /offset (-?\d+)/g;
	return $sum;
}

# Holding and releasing test points around a crash.  A worker forked
# while the release's reload is under way can miss its SIGHUP (a
# background worker sets SIGHUP to SIG_IGN while it starts, which drops one
# already pending) and keep the old setting, to be held at a point later,
# maybe much later.  So once released, the waits of this module look for a
# live process that logged reaching a point without leaving it, and reload
# the configuration again for it (ks_unstick).
our $released_from;

# test_point_hold, the waits no longer undoing holds.
sub ks_hold
{
	my (@points) = @_;
	undef $released_from;
	return test_point_hold(@points);
}

# test_point_release; from now on the waits release any process held at a
# point since log position $from.
sub ks_release
{
	my ($from) = @_;
	test_point_release();
	$released_from = $from;
	ks_unstick();
}

sub ks_unstick
{
	return unless defined $released_from;
	my %held;
	my $log = pg_log_since($released_from);
	while ($log =~ /\[(\d+)\] [^\n]*mailer test point (\S+) (reached|released)/g)
	{
		if ($3 eq 'reached') { $held{$1} = 1 } else { delete $held{$1} }
	}
	return unless %held;
	if (psql("SELECT count(*) FROM pg_stat_activity WHERE pid IN (" . join(', ', keys %held) . ")") ne '0')
	{
		Test::More::note("a process still held at a test point after the release: reloading again");
		psql("SELECT pg_reload_conf()");
	}
}

# mailer.wait_job in short calls, releasing held processes in between.
# Returns the job's state.
sub ks_wait_job
{
	my ($job, $timeout) = @_;
	my $state;
	wait_until("job $job to commit its input", sub {
		ks_unstick();
		$state = eval { psql("SELECT mailer.wait_job('$job', '2 seconds')") };
		return defined $state;
	}, $timeout // 180);
	return $state;
}

1;
