# MailerBarrierTest: what the barrier-cut tests (test/t/17x_barrier_*.pl)
# share, on top of MailerTest.  Apache Kafka writes no barrier markers, so
# the tests play the coordinator: they write cut records, in the binary
# format of the barrier-state topic, to a compacted topic of the test's own
# (one per test, so that the malformed records of one never reach
# another), with marker offsets taken as the partitions' end offsets at
# that moment while producers keep writing.  The expected results are SQL
# over exactly the records below a cut's markers, read back with their
# partitions and offsets.
#
# The format (big-endian; a string is an int16 length, then UTF-8):
#   key:   int16 version 0 | int16 kind (0 group, 1 injection start, 2 cut)
#          | string group | int64 epoch
#   value: int16 version 0 | int64 triggered_at_ms | int64 completed_at_ms
#          | int8 status (0 complete, 1 partial)
#          | int32 n x [string topic | int32 m x (int32 partition | int64 marker)]
#          | int32 k x [string topic | int32 partition]   (missed the marker)
#   an empty value is a tombstone.
package MailerBarrierTest;

use strict;
use warnings;
use Exporter 'import';
use File::Temp ();
use POSIX ();
use Test::More ();
use Time::HiRes qw(time sleep);
use IPC::Run ();
use MailerTest;
use MailerKafkaTest qw(totals_check);
use MailerKafkaSinkTest qw(ks_topic ks_read);

our @EXPORT = qw(bt_topic bt_fresh bt_key bt_cut_value bt_cut bt_raw bt_ends bt_markers_at_ends bt_cut_at_ends
  wait_read_past
  bt_load_records bt_below bt_producer bt_producer_stop bt_order_lines
  cut_checkpoint wait_cut_checkpoint cut_epochs cut_positions_ok cut_totals_check
  cut_metrics wait_holding cuts_of bt_rescaled_cuts bt_restore_replay);

use constant { KIND_GROUP => 0, KIND_INJECTION => 1, KIND_CUT => 2 };
push @EXPORT, qw(KIND_GROUP KIND_INJECTION KIND_CUT);

# test/barrier_tool, built once per test file (make does nothing when it is
# up to date); the path of the program.
my $TOOL;

sub bt_tool
{
	my (@args) = @_;
	unless ($TOOL)
	{
		system('make', '-s', '-C', "$ROOT/test/barrier_tool") == 0
		  or die "could not build test/barrier_tool\n";
		$TOOL = "$ROOT/test/barrier_tool/barrier_tool";
	}
	my ($out, $err) = ('', '');
	IPC::Run::run([ $TOOL, $BROKERS, @args ], '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "barrier_tool @args[0, 1] failed: $err\n";
	return $out;
}

# A barrier-state topic of the test's own: compacted, one partition.
sub bt_topic
{
	my ($prefix) = @_;
	return ks_topic("${prefix}_barrier", 1, '--config', 'cleanup.policy=compact');
}

# The start of a barrier test: a fresh extension, no table named
# $prefix... left by an earlier run, $n topics (1 unless given) of
# $partitions partitions each, a barrier topic and a group of the test's
# own.  Returns { topics => [...], barrier => topic, group => name, source
# => the JSON text of the source fields naming them (totals_spec's source) }.
sub bt_fresh
{
	my ($prefix, $partitions, $n) = @_;
	fresh_extension();
	drop_tables($prefix);
	my %t = (topics => [ map { ks_topic("${prefix}_$_", $partitions) } 1 .. ($n // 1) ],
	  barrier => bt_topic($prefix), group => unique_name("${prefix}_group"));
	$t{source} = qq("barrier_group": "$t{group}", "barrier_topic": "$t{barrier}");
	return \%t;
}

sub bt_string
{
	my ($s) = @_;
	utf8::encode($s);
	return pack('n/a*', $s);
}

# A record key; $kind is a cut's (2) unless given, $version 0 unless given.
sub bt_key
{
	my ($group, $epoch, %opt) = @_;
	return pack('n n', $opt{version} // 0, $opt{kind} // KIND_CUT) . bt_string($group) . pack('q>', $epoch);
}

# A cut's value: $markers is { topic => { partition => marker_offset } };
# %opt: status (0 complete, the default; 1 partial), missed ([[topic,
# partition], ...]), version, triggered_at_ms, completed_at_ms.
sub bt_cut_value
{
	my ($markers, %opt) = @_;
	my $now = int(time() * 1000);
	my $v = pack('n q> q> c', $opt{version} // 0, $opt{triggered_at_ms} // $now - 5,
		$opt{completed_at_ms} // $now, $opt{status} // 0);
	my @topics = sort keys %$markers;
	$v .= pack('N', scalar @topics);
	for my $t (@topics)
	{
		my @parts = sort { $a <=> $b } keys %{ $markers->{$t} };
		$v .= bt_string($t) . pack('N', scalar @parts);
		$v .= pack('N q>', $_, $markers->{$t}{$_}) for @parts;
	}
	my @missed = @{ $opt{missed} // [] };
	$v .= pack('N', scalar @missed);
	$v .= bt_string($_->[0]) . pack('N', $_->[1]) for @missed;
	return $v;
}

# Write one record to the barrier topic, as bytes; an undef value is a
# null value (a tombstone).
sub bt_raw
{
	my ($barrier_topic, $key, $value) = @_;
	bt_tool('send', $barrier_topic, unpack('H*', $key), defined $value ? unpack('H*', $value) : '-');
}

# Publish cut $epoch of $group: markers { topic => { partition => offset } },
# %opt as bt_cut_value's.
sub bt_cut
{
	my ($barrier_topic, $group, $epoch, $markers, %opt) = @_;
	bt_raw($barrier_topic, bt_key($group, $epoch), bt_cut_value($markers, %opt));
}

# { partition => end offset } of a topic now.
sub bt_ends
{
	my ($topic) = @_;
	my %end;
	for (split /\n/, bt_tool('ends', $topic))
	{
		my ($p, $o) = split /\t/;
		$end{$p} = $o;
	}
	return \%end;
}

# { topic => { partition => end offset now } } of @$topics, for the
# partitions $only->{topic} names (all when it names none of a topic).
sub bt_markers_at_ends
{
	my ($topics, $only) = @_;
	my %markers;
	for my $t (@$topics)
	{
		my $end = bt_ends($t);
		my @parts = $only && $only->{$t} ? @{ $only->{$t} } : keys %$end;
		$markers{$t}{$_} = $end->{$_} for @parts;
	}
	return \%markers;
}

# Publish cut $epoch with the topics' end offsets now as its markers;
# returns the markers.  %opt: partitions ({ topic => [partitions] }: name
# only these), plus bt_cut_value's.
sub bt_cut_at_ends
{
	my ($barrier_topic, $group, $epoch, $topics, %opt) = @_;
	my $markers = bt_markers_at_ends($topics, delete $opt{partitions});
	bt_cut($barrier_topic, $group, $epoch, $markers, %opt);
	return $markers;
}

# Wait until a job has read past every marker of $markers (of its topic):
# a cut published then is one it learns of too late, and must go back to
# its last checkpoint to take.
sub wait_read_past
{
	my ($job, $topic, $markers) = @_;
	my $past = join(' OR ', map { "(partition = $_ AND position > $markers->{$_})" } sort keys %$markers);
	eval {
		wait_until("job $job to read past the markers in $topic", sub {
			psql("SELECT count(*) FROM mailer.partition_metrics WHERE name = '$job' AND topic = '$topic' AND ($past)")
			  == keys %$markers;
		}, 60);
		1;
	} or die "$@(markers " . join(' ', map { "$_:$markers->{$_}" } sort keys %$markers) . "; " . cut_diagnosis($job) . ")\n";
}

# Every record of a topic, from the beginning, into a table made anew:
# $table (partition int, "offset" bigint, key text, value text), and the
# view ${table}_orders adding an order's customer_id and amount (the
# records bt_order_lines makes), for totals_check.
sub bt_load_records
{
	my ($topic, $table) = @_;
	my $copy = '';
	for my $line (@{ ks_read($topic, format => "%p\t%o\t%k\t%s\n") })
	{
		my @f = split /\t/, $line, 4;
		$copy .= join("\t", map { !defined $_ || $_ eq 'NULL' ? '\N' : s/\\/\\\\/gr =~ s/\r/\\r/gr } @f) . "\n";
	}
	psql("DROP VIEW IF EXISTS ${table}_orders; DROP TABLE IF EXISTS $table;
		CREATE TABLE $table (partition int, \"offset\" bigint, key text, value text);
		COPY $table FROM STDIN;\n$copy\\.\n
		CREATE VIEW ${table}_orders AS SELECT *, value::jsonb->>'customer_id' AS customer_id,
			(value::jsonb->>'amount')::numeric AS amount FROM $table;");
	return psql("SELECT count(*) FROM $table");
}

# The SQL condition on "partition" and "offset" that holds for exactly the
# records below a topic's markers ({ partition => marker }); a partition
# not named holds none.
sub bt_below
{
	my ($markers) = @_;
	return 'false' unless %$markers;
	return '"offset" < CASE "partition" '
	  . join(' ', map { "WHEN $_ THEN $markers->{$_}" } sort { $a <=> $b } keys %$markers) . ' END';
}

# Order records as "customer<TAB>json" lines: order i goes to customer
# (i * 7919) mod $customers with an amount from 0.00 to 999.99, as
# MailerKafkaTest's orders do.
sub bt_order_lines
{
	my ($from, $to, $customers) = @_;
	return [ map {
		my $c = 'c' . (($_ * 7919) % $customers);
		sprintf("%s\t{\"order_id\": %d, \"customer_id\": \"%s\", \"amount\": %.2f}",
			$c, $_, $c, (($_ * 104729) % 100000) / 100)
	} $from .. $to ];
}

# A producer in a child process writing batches of $opt{batch} orders (50)
# over $opt{customers} customers (300) to each of @$topics, with a pause of
# $opt{pause} seconds (0.05) between batches, until bt_producer_stop (or
# the test ends).  Cuts are published while it writes.
sub bt_producer
{
	my ($topics, %opt) = @_;
	my ($batch, $customers, $pause) = ($opt{batch} // 50, $opt{customers} // 300, $opt{pause} // 0.05);
	# The stop file lives in a directory of the test's own: MAILER_RUN_DIR
	# is not exported when the tests run under CI's empty environment.
	my $stop = File::Temp::tempdir(CLEANUP => 1) . "/bt_producer_stop";
	unlink $stop;
	my $pid = fork() // die "fork: $!\n";
	if ($pid == 0)
	{
		my $n = 0;
		my $deadline = time() + 600;	# never outlive a test that died without stopping it
		while (!-e $stop && getppid() > 1 && time() < $deadline)
		{
			my $lines = bt_order_lines($n + 1, $n + $batch, $customers);
			my $ok = eval { kcat_produce($_, $lines) for @$topics; 1 };
			print STDERR "bt_producer: $@" unless $ok;
			$n += $batch;
			sleep $pause;
		}
		POSIX::_exit(0);	# not the test's END blocks
	}
	return { pid => $pid, stop => $stop };
}

sub bt_producer_stop
{
	my ($producer) = @_;
	return unless $producer->{pid};
	open my $fh, '>', $producer->{stop} or die "$producer->{stop}: $!\n";
	close $fh;
	waitpid $producer->{pid}, 0;
	unlink $producer->{stop};
	delete $producer->{pid};
}

# SQL: $what (over c, the row of mailer.checkpoints) of the newest
# checkpoint a job took at cut $cut.
sub cut_checkpoint_sql
{
	my ($job, $cut, $what) = @_;
	return "SELECT $what FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) "
	  . "WHERE j.name = '$job' AND c.subtask = 0 AND c.cut_epoch = $cut ORDER BY c.epoch DESC LIMIT 1";
}

# The epoch of the checkpoint a job took at cut $cut, or '' when none.
sub cut_checkpoint
{
	my ($job, $cut) = @_;
	return psql(cut_checkpoint_sql($job, $cut, 'c.epoch'));
}

# Wait until a job has a checkpoint at cut $cut newer than epoch $after
# (0 unless given); returns its epoch.
sub wait_cut_checkpoint
{
	my ($job, $cut, $timeout, $after) = @_;
	$after //= 0;
	my $e;
	eval {
		wait_until("job $job to checkpoint at cut $cut", sub {
			$e = cut_checkpoint($job, $cut);
			return $e ne '' && $e > $after;
		}, $timeout // 60);
		1;
	} or die "$@(" . cut_diagnosis($job) . ")\n";
	return $e;
}

# What a job is doing, for a wait that timed out: its mailer.metrics and
# mailer.jobs rows, its partitions' positions and ends, and mailer.cuts.
sub cut_diagnosis
{
	my ($job) = @_;
	return "mailer.metrics: " . psql("SELECT row_to_json(m) FROM mailer.metrics m WHERE name = '$job'")
	  . "; mailer.jobs: " . psql("SELECT row_to_json(j) FROM mailer.jobs j WHERE name = '$job'")
	  . "; partitions (position/end): " . psql("SELECT string_agg(topic || ':' || partition || ' ' || coalesce(position::text, '-')
		|| '/' || coalesce(end_offset::text, '-'), ', ' ORDER BY topic, partition) FROM mailer.partition_metrics WHERE name = '$job'")
	  . "; mailer.cuts: " . cuts_of($job);
}

# The cut epochs of a job's retained checkpoints, oldest first, "-" for an
# ordinary checkpoint: "1,2,3".
sub cut_epochs
{
	my ($job) = @_;
	return psql("SELECT coalesce(string_agg(coalesce(c.cut_epoch::text, '-'), ',' ORDER BY c.epoch), '') "
		  . "FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) WHERE j.name = '$job' AND c.subtask = 0");
}

# The positions of a job's checkpoint at cut $cut are the cut's markers
# (those of $topic, for the partitions the cut names).
sub cut_positions_ok
{
	my ($job, $cut, $topic, $markers, $name) = @_;
	my $got = psql(cut_checkpoint_sql($job, $cut, "c.positions->'$topic'"));
	require JSON::PP;
	my $pos = $got eq '' ? {} : JSON::PP::decode_json($got);
	my @p = sort { $a <=> $b } keys %$markers;
	return Test::More::is(join(' ', map { "$_:" . ($pos->{$_} // 'none') } @p),
		join(' ', map { "$_:$markers->{$_}" } @p),
		$name // "$job: the positions of its checkpoint at cut $cut are the cut's markers");
}

# A totals table ($sink: a job's, or a copy of it taken at the cut) equals
# the GROUP BY over exactly the records of $records (bt_load_records) below
# the positions of the job's checkpoint at cut $cut: the markers for the
# partitions the cut names (cut_positions_ok), where the job was for the
# others.
sub cut_totals_check
{
	my ($records, $sink, $job, $cut, $topic, $name) = @_;
	my $pos = '(' . cut_checkpoint_sql($job, $cut, "c.positions->'$topic'") . ')';
	return totals_check("${records}_orders", $sink, $name // "$job at cut $cut",
		"\"offset\" < ($pos->>\"partition\"::text)::bigint");
}

# A job's barrier-cut columns of mailer.metrics, as a hash.
sub cut_metrics
{
	my ($job) = @_;
	my $m = job_metrics($job);
	return { map { $_ => $m->{$_} } grep { /cut/ } keys %$m };
}

# Wait until a job holds at cut $cut (mailer.metrics' cut_holding_epoch)
# with a worker of a pid other than $not_pid.
sub wait_holding
{
	my ($job, $cut, $not_pid, $timeout) = @_;
	$not_pid //= 0;
	wait_until("job $job to hold at cut $cut", sub {
		psql("SELECT m.cut_holding_epoch = $cut AND j.pid IS NOT NULL AND j.pid <> $not_pid "
			  . "FROM mailer.metrics m JOIN mailer.jobs j USING (name) WHERE name = '$job'") eq 't';
	}, $timeout // 60);
}

# mailer.cuts(job) as "cut_epoch:outcome:restorable" items, oldest first.
sub cuts_of
{
	my ($job) = @_;
	return psql("SELECT coalesce(string_agg(cut_epoch || ':' || outcome || ':' || "
		  . "CASE WHEN restorable THEN 'r' ELSE '-' END, ' ' ORDER BY cut_epoch), '') FROM mailer.cuts('$job')");
}

# The rescale tests' run: keyed totals jobs of every backend (named
# "${prefix}_<backend>") on a fresh barrier group take cuts 1 to 6, 400
# orders before each, and are stopped, set to the next parallelism of
# @$parallelisms and started again before cuts 1, 3 and 5.  Returns the
# jobs, the topic and each cut's markers ({cut => {partition => offset}});
# the records read back are in the table "${prefix}_rec_orders".
sub bt_rescaled_cuts
{
	my ($prefix, $parallelisms, %spec) = @_;
	my $fresh = bt_fresh($prefix, 6);
	my $topic = $fresh->{topics}[0];
	my $job = MailerKafkaTest::backend_jobs($topic, $prefix, start => 'earliest',
		interval => '200 milliseconds', source => $fresh->{source}, %spec);
	my @jobs = map { $job->{$_} } @MailerKafkaTest::BACKENDS;
	MailerKafkaTest::wait_job_running($_) for @jobs;
	my (%markers, $n);
	for my $cut (1 .. 6)
	{
		if ($cut % 2)
		{
			my $p = $parallelisms->[ ($cut - 1) / 2 ];
			for my $j (@jobs)
			{
				Test::More::is(psql("SELECT mailer.stop_job('$j')"), 'stopped', "$j stopped");
				psql("SELECT mailer.alter_job('$j', jsonb_set(spec, '{parallelism}', '$p')) FROM mailer.jobs WHERE name = '$j'");
				psql("SELECT mailer.start_job('$j')");
				MailerKafkaTest::wait_job_running($j);
			}
		}
		$n //= 0;
		kcat_produce($topic, bt_order_lines($n + 1, $n + 400, 60));
		$n += 400;
		$markers{$cut} = bt_cut_at_ends($fresh->{barrier}, $fresh->{group}, $cut, [$topic])->{$topic};
		wait_cut_checkpoint($_, $cut, 90) for @jobs;
	}
	bt_load_records($topic, "${prefix}_rec");
	return { jobs => \@jobs, topic => $topic, barrier => $fresh->{barrier}, markers => \%markers };
}

# restore_job($job, cut_epoch => $back) on the job, stopped first, then a replay
# until it checkpoints at cut $upto again: its table is then the GROUP BY
# of the orders below cut $upto's markers.
sub bt_restore_replay
{
	my ($job, $back, $upto, $run, $what) = @_;
	Test::More::is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job stopped");
	my $at = cut_checkpoint($job, $back);
	my $kept = join(',', grep { $_ <= $back } split /,/, cut_epochs($job));
	Test::More::is(psql("SELECT mailer.restore_job('$job', cut_epoch => $back)"), $at,
		"$job: restore_job to cut $back");
	Test::More::is(cut_epochs($job), $kept, "$job: the checkpoints at cuts after $back are gone, the others kept");
	psql("SELECT mailer.start_job('$job')");
	# Epochs after the restored one are numbered again from it.
	wait_cut_checkpoint($job, $upto, 120, $at);
	my ($prefix) = $job =~ /^(.*)_[^_]+$/;
	MailerKafkaTest::totals_check("${prefix}_rec_orders", $job, "$job, $what", bt_below($run->{markers}{$upto}));
}

1;
