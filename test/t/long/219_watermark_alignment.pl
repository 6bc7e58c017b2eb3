# Watermark alignment (docs/ARCHITECTURE.md, "Watermark alignment"): a
# windowed job stops fetching a partition whose watermark runs more than
# watermark.max_drift ahead of the slowest partition still catching up,
# and fetches it again from where it stopped once that one is near.
#
# Partition 0 holds events of the last 30 s of ten minutes, partition 1
# all ten minutes; both are read from the start, a few kilobytes a fetch,
# each record slowed by a millisecond so that the samples see the turns.
# Partition 0's watermark is ahead from its first batch, so it waits until
# partition 1 is about 9.5 minutes in; then the two take turns, each
# paused while the other catches up.  Every pause drops what librdkafka
# fetched of the partition, and every resume fetches it again from the
# job's position: the results must come out exactly once, through
# pauses, a worker killed while a partition is paused, and with
# alignment turned off.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use Test::More;

fresh_extension();
my $topic = unique_name('t219');
kafka('create-topic', $topic, 2);

my $per_partition = 5000;
my @keys = map { "k$_" } 0 .. 9;
my @events;
for my $i (0 .. $per_partition - 1)
{
	push @events, { p => 0, k => $keys[ $i % 10 ], t => 570 + 30 * $i / $per_partition, a => 1 };
	push @events, { p => 1, k => $keys[ ($i * 7) % 10 ], t => 600 * $i / $per_partition, a => 2 };
}
produce_events($topic, \@events);
events_table('events_219', \@events);

# Batches of 50 records: a paused partition runs at most one past the drift.
setting_until_exit('mailer.batch_size', 50);
my $options = q({"max.partition.fetch.bytes": "4096", "queued.max.messages.kbytes": "64"});

sub start_job
{
	my ($job, $drift, $source_fields, $on_topic) = @_;
	$on_topic //= $topic;
	window_tables("out_$job");
	my $wm = '"max_out_of_orderness": "1 second"';
	$wm .= qq(, "max_drift": $drift) if defined $drift;
	psql("SELECT mailer.create_job('$job', \$spec\$"
		  . qq({"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$on_topic", "start": "earliest",
			  "options": $options@{[ $source_fields ? ", $source_fields" : '' ]}},
			"event_time": "(value->>'ts')::timestamptz",
			"watermark": {$wm},
			"steps": [{"filter": "pg_sleep(0.001)::text = ''"},
					  {"key_by": {"k": "value->>'k'"}},
					  {"window": {"type": "tumbling", "size": "10 seconds"}},
					  {"aggregate": {"n": "count(*)", "total": "sum((value->>'a')::numeric)"}}],
			"sink": {"type": "table", "table": "out_$job"},
			"checkpoint": {"interval": "200 milliseconds"}}) . "\$spec\$)");
}

# Samples of both partitions until the job has read everything: each
# {p => {position, lag, watermark (epoch seconds), ahead}}.
sub sample_until_read
{
	my ($job, $on_sample) = @_;
	my @samples;
	wait_until("$job read both partitions", sub {
		my %s;
		for my $row (split /\n/, psql(qq{
			SELECT partition, position, lag, extract(epoch FROM watermark), ahead
			  FROM mailer.partition_metrics WHERE name = '$job'}))
		{
			my ($p, $pos, $lag, $wm, $ahead) = split /\|/, $row;
			# psql shows NULL (an end or a watermark not known yet) as ''.
			$s{$p} = { position => $pos, lag => ($lag eq '' ? undef : $lag),
				watermark => ($wm eq '' ? undef : $wm), ahead => $ahead eq 't' };
		}
		return 0 unless $s{0} && $s{1};
		push @samples, \%s;
		$on_sample->(\%s) if $on_sample;
		return ($s{0}{lag} // 1) == 0 && ($s{1}{lag} // 1) == 0
		  && $s{0}{position} == $per_partition && $s{1}{position} == $per_partition;
	}, 180);
	return @samples;
}

# The windows a job's sink holds are exactly those the watermark $closed
# closed over all events, and they reach 09:50.  $diag: more to show when
# they are not.
sub closed_windows_exact
{
	my ($job, $closed, $what, $diag) = @_;
	same_rows("SELECT k, window_start, window_end, n, total FROM out_$job",
		"SELECT * FROM (" . want_tumbling('events_219', '10 seconds') . ") w WHERE window_end <= '$closed'",
		"$job: every closed window is exact ($what)")
	  or $diag && diag($diag->());
	cmp_ok(psql("SELECT count(*) FROM out_$job"), '>=', 10 * 59, "$job: the windows up to 09:50 closed");
}

sub results_exact
{
	my ($job, $what) = @_;
	is(wait_job($job), 'running', "$job: wait_job commits everything ($what)");
	# The last windows close once the watermark passes them: a late event would, here
	# the end of both partitions does not, so compare the windows that closed.
	closed_windows_exact($job, psql("SELECT watermark FROM mailer.metrics WHERE name = '$job'"), $what);
	is(psql("SELECT sum(records_in) FROM mailer.partition_metrics WHERE name = '$job'"),
		2 * $per_partition, "$job: each record was read once");
}

# 1. The default drift (10 s): partition 0 waits for partition 1.
my $job = 'align_219';
start_job($job);
my @samples = sample_until_read($job);
my @paused = grep { $_->{0}{ahead} && ($_->{1}{lag} // 0) > 0 } @samples;
# One line per sample: each partition's position, watermark and whether it is paused.
my $trace = join("\n", map { my $s = $_; join('  ', map { "p$_ $s->{$_}{position} " . ($s->{$_}{watermark} || '-')
	. ($s->{$_}{ahead} ? ' paused' : '') } 0, 1) } @samples);
ok(scalar @paused, 'partition 0 was shown ahead while partition 1 had records left to read')
  or diag($trace);
# Before partition 1's watermark came within the drift of partition 0's
# first, partition 0 may have been read by what one batch brings, not a
# quarter of it.
my @early = grep { !defined $_->{1}{watermark} || $_->{1}{watermark} - $MailerTest::EV_BASE < 540 } @samples;
ok(scalar @early, 'samples were taken while partition 1 was far behind');
my $max_early = 0;
$max_early = $_->{0}{position} > $max_early ? $_->{0}{position} : $max_early for @early;
cmp_ok($max_early, '<', $per_partition / 4,
	'partition 0 was not read on while partition 1 was more than the drift behind') or diag($trace);
my @both_read = grep { ($_->{0}{lag} // 1) == 0 && ($_->{1}{lag} // 1) == 0 } @samples;
ok(@both_read && !$both_read[-1]{0}{ahead} && !$both_read[-1]{1}{ahead},
	'once both are read to their end, neither is shown ahead');
results_exact($job, 'aligned');

# 2. A worker killed while partition 0 is paused: the restarted worker
# fetches it from the checkpoint's position, and nothing is lost or twice.
my $killed = 'align_kill_219';
start_job($killed, '"5 seconds"');
wait_until('partition 0 of the second job is paused', sub {
	psql("SELECT ahead FROM mailer.partition_metrics WHERE name = '$killed' AND partition = 0") eq 't' }, 120);
kill_worker($killed);
sample_until_read($killed);
results_exact($killed, 'killed while a partition was paused');

# 3. Alignment off: the same results, and no partition is ever shown ahead.
my $off = 'align_off_219';
start_job($off, 'null');
my @off_samples = sample_until_read($off);
ok(!(grep { $_->{0}{ahead} || $_->{1}{ahead} } @off_samples), 'with max_drift null no partition is paused');
results_exact($off, 'alignment off');

# 4. A barrier cut while partition 0 is paused: the cut's markers lie
# ahead of both partitions' positions, partition 0's far past where it
# was paused.  A partition the cut waits for is not paused for running
# ahead (else partition 0 would stay paused behind partition 1, held at
# its marker, for ever); partition 0 reads on to its marker, and
# librdkafka's prefetch past it is dropped.  Released, partition 0 is still ahead, so it stays
# paused, and when fetched again it must go on from its marker, not from
# where librdkafka's dropped prefetch ended.  A second cut at the ends
# then checkpoints everything.
my $barrier = bt_topic('t219');
my $group = unique_name('t219_group');
my $cut_job = 'align_cut_219';
start_job($cut_job, '"5 seconds"', qq("barrier_group": "$group", "barrier_topic": "$barrier"));
wait_until('partition 0 of the barrier job is paused', sub {
	psql("SELECT ahead FROM mailer.partition_metrics WHERE name = '$cut_job' AND partition = 0") eq 't' }, 120);
my %marker = (0 => 2500, 1 => 4000);
bt_cut($barrier, $group, 1, { $topic => \%marker });
wait_cut_checkpoint($cut_job, 1, 120);
cut_positions_ok($cut_job, 1, $topic, \%marker);
# Released: partition 0 is paused as ahead, until partition 1 nears it;
# then it is fetched again from its marker.  Only then the second cut.
wait_until('partition 0 is paused as ahead after the release', sub {
	psql("SELECT ahead AND position = 2500 FROM mailer.partition_metrics WHERE name = '$cut_job' AND partition = 0") eq 't' }, 120);
wait_until('partition 0 is read on past its marker', sub {
	psql("SELECT NOT ahead AND position > 2600 FROM mailer.partition_metrics WHERE name = '$cut_job' AND partition = 0") eq 't' }, 120);
bt_cut($barrier, $group, 2, { $topic => { 0 => $per_partition, 1 => $per_partition } });
wait_cut_checkpoint($cut_job, 2, 120);
cut_positions_ok($cut_job, 2, $topic, { 0 => $per_partition, 1 => $per_partition });
closed_windows_exact($cut_job, psql(MailerBarrierTest::cut_checkpoint_sql($cut_job, 2, 'c.watermark')), 'at the second cut', sub {
	(psql("SELECT row_to_json(m) FROM mailer.metrics m WHERE name = '$cut_job'"),
	 psql("SELECT json_agg(p) FROM mailer.partition_metrics p WHERE name = '$cut_job'"),
	 psql("SELECT json_agg(c ORDER BY epoch) FROM (SELECT epoch, cut_epoch, positions, counters, watermark FROM mailer.checkpoints c
		JOIN mailer.job j USING (job_id) WHERE j.name = '$cut_job') c"))
});

# 5. A paused partition's lag grows with what its producer writes: no
# fetch tells its end while it waits, so the source asks the broker.
# Partition 0 (200 records at 09:50 to 10:00) waits for partition 1
# (12000 records, at least 12 s at a millisecond each); 300 more records
# of partition 0 must show in its end offset and lag while it still waits.
my $grow_topic = unique_name('t219g');
kafka('create-topic', $grow_topic, 2);
my @grow = ((map { { p => 0, k => $keys[ $_ % 10 ], t => 590 + 10 * $_ / 200 } } 0 .. 199),
	(map { { p => 1, k => $keys[ $_ % 10 ], t => 600 * $_ / 12000 } } 0 .. 11999));
produce_events($grow_topic, \@grow);
my $grow = 'align_lag_219';
start_job($grow, '"5 seconds"', undef, $grow_topic);
wait_until('partition 0 of the lag job is paused', sub {
	psql("SELECT ahead FROM mailer.partition_metrics WHERE name = '$grow' AND partition = 0") eq 't' }, 120);
my $paused_at = psql("SELECT end_offset FROM mailer.partition_metrics WHERE name = '$grow' AND partition = 0");
is($paused_at, 200, 'the paused partition shows the end its last fetch told');
produce_events($grow_topic, [ map { { p => 0, k => $keys[ $_ % 10 ], t => 600 + $_ / 300 } } 0 .. 299 ]);
my $seen = '';
wait_until('the paused partition shows the records written since', sub {
	$seen = psql("SELECT p.ahead, p.end_offset, p.lag, m.consumer_lag FROM mailer.partition_metrics p
		JOIN mailer.metrics m USING (name) WHERE p.name = '$grow' AND p.partition = 0");
	my ($ahead, $end) = split /\|/, $seen;
	return $ahead ne 't' || ($end || 0) >= 500;
}, 60);
like($seen, qr/^t\|500\|/, 'while still paused, its end offset counts the new records');
my (undef, undef, $lag, $job_lag) = split /\|/, $seen;
cmp_ok($lag || 0, '>=', 300, 'and its lag counts them');
cmp_ok($job_lag || 0, '>=', $lag || 1, "the job's consumer_lag counts them too");
# Resumed, partition 0's end offset does not fall back to its last fetch's.
my $lowest_end = 500;
wait_until('the lag job reads everything', sub {
	my $end = psql("SELECT end_offset FROM mailer.partition_metrics WHERE name = '$grow' AND partition = 0");
	$lowest_end = $end if $end ne '' && $end < $lowest_end;
	psql("SELECT sum(records_in) = 12500 AND sum(lag) = 0 FROM mailer.partition_metrics WHERE name = '$grow'") eq 't' }, 180);
is($lowest_end, 500, "partition 0's end offset never went back below 500");
is(wait_job($grow), 'running', 'the lag job commits everything');
is(psql("SELECT sum(records_in) FROM mailer.partition_metrics WHERE name = '$grow'"), 12500,
	'the lag job read each record once');

psql("SELECT mailer.drop_job(name) FROM mailer.job WHERE name IN ('$job', '$killed', '$off', '$cut_job', '$grow')");
kafka('delete-topic', $_) for $topic, $barrier, $grow_topic;
done_testing();
