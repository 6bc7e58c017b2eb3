# Tumbling and sliding event-time windows on a 3-partition topic with
# out-of-order input (within max_out_of_orderness): once the watermark has
# passed every window, the sink holds exactly what the same computation in
# plain SQL gives over the same events (date_bin for tumbling windows, the
# windows generated in SQL for sliding ones).  Tumbling runs on RocksDB,
# sliding on the memory backend; after every window fired and was purged,
# the state is gone.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my $topic = unique_name('t050');
kafka('create-topic', $topic, 3);

# Per partition, 120 events about 1.5 s apart, each up to 4 s earlier than
# its slot (the bound is 5 s), times on a quarter-second grid so that some
# fall exactly on window boundaries; keys a..d spread over all partitions.
my $seed = 50;
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed >> 8; }
my @events;
for my $p (0 .. 2)
{
	for my $i (0 .. 119)
	{
		my $t = $i * 1.5 + $p * 0.25 - (rnd() % 17) * 0.25;
		push @events, { p => $p, k => (qw(a b c d))[ rnd() % 4 ], t => $t, a => sprintf('%.1f', (rnd() % 1000) / 10) };
	}
}
my $last = (sort { $b <=> $a } map { $_->{t} } @events)[0];
ok(scalar(grep { $_->{t} == int($_->{t}) && int($_->{t}) % 10 == 0 } @events) > 0,
	'some events fall exactly on a window boundary');
events_table('ev050', \@events);

window_tables(qw(tumbling_out sliding_out));

# The end markers (far in the future, one per partition) move the
# watermark past every window; the filter keeps them out of the windows.
my $filter = q[{"filter": "value->>'k' <> 'end'"}];
create_window_job('tumbling050', $topic, table => 'tumbling_out', backend => 'rocksdb',
	window => '{"type": "tumbling", "size": "10 seconds"}', extra_steps => $filter);
create_window_job('sliding050', $topic, table => 'sliding_out', backend => 'memory',
	window => '{"type": "sliding", "size": "15 seconds", "slide": "5 seconds"}', extra_steps => $filter);

# Produced in chunks, partition after partition, so that each partition's
# stream reaches the job in several batches interleaved with the others.
for my $chunk (0 .. 3)
{
	for my $p (0 .. 2)
	{
		my @part = grep { $_->{p} == $p } @events;
		produce_events($topic, [ @part[ $chunk * 30 .. $chunk * 30 + 29 ] ]);
	}
}
# Before the end markers, the last windows are still open: state is held.
my %open_bytes;
for my $job ('tumbling050', 'sliding050')
{
	is(wait_job($job), 'running', "$job committed the events");
	$open_bytes{$job} = job_metric($job, 'state_bytes');
	cmp_ok($open_bytes{$job}, '>', 0, "$job holds state for its open windows");
	if ($job eq 'tumbling050')
	{
		my $keys = rocksdb_keys($job);
	  SKIP:
		{
			skip 'ldb (rocksdb-tools) is not installed', 1 unless $keys;
			cmp_ok(scalar(@$keys), '>', 1, "$job: windows and timers in the RocksDB checkpoint");
		}
	}
	is(psql("SELECT count(*) FROM mailer.partition_metrics WHERE name = '$job' AND watermark IS NOT NULL AND NOT idle"),
		'3', "$job: a watermark for each of the 3 partitions");
}
my $end = 100000;
produce_events($topic, [ map { { p => $_, k => 'end', t => $end } } 0 .. 2 ]);

for my $job ('tumbling050', 'sliding050')
{
	wait_watermark($job, ev_time($end - 5));
	is(wait_job($job), 'running', "$job committed its input");
	is(job_metric($job, 'watermark') eq psql("SELECT '" . ev_time($end - 5) . "'::timestamptz"), 1,
		"$job: the watermark is the smallest partition's largest event time minus 5 s");
	is(job_metric($job, 'records_late'), '0', "$job: no record late");
	is(job_metric($job, 'records_filtered'), '3', "$job: the 3 end markers filtered");
	is(psql("SELECT count(*) FROM mailer.dead_letters"), '0', "$job: no dead letters");
}

my $want_tumbling = want_tumbling('ev050', '10 seconds');
same_rows('SELECT k, window_start, window_end, n, total FROM tumbling_out', $want_tumbling,
	'tumbling windows equal GROUP BY key, date_bin in SQL');
cmp_ok(psql('SELECT count(*) FROM tumbling_out'), '>=', 60, 'many tumbling windows emitted');
is(psql("SELECT count(*) FROM tumbling_out WHERE extract(epoch FROM window_start)::bigint % 10 <> 0 OR window_end - window_start <> interval '10 seconds'"),
	'0', 'tumbling windows are aligned to the epoch, 10 s long');

my $want_sliding = q{
	SELECT k, s AS window_start, s + interval '15 seconds' AS window_end, count(*) AS n, sum(a) AS total
	  FROM ev050,
		   generate_series(date_bin('5 seconds', ts, '1970-01-01 00:00:00+00') - interval '10 seconds',
						   date_bin('5 seconds', ts, '1970-01-01 00:00:00+00'), interval '5 seconds') AS s
	 GROUP BY 1, 2, 3};
same_rows('SELECT k, window_start, window_end, n, total FROM sliding_out', $want_sliding,
	'sliding windows equal the windows generated in SQL');
is(psql('SELECT sum(n) FROM sliding_out'), 3 * scalar(@events), 'each event in size/slide = 3 sliding windows');

# Purged state is deleted: every window fired (allowed_lateness 0 purges at
# once), so the memory backend's in-memory size is back to its empty key
# map, and once stopped (its final checkpoint folds the rows) it has no row
# left.
my $sliding_id = psql("SELECT job_id FROM mailer.job WHERE name = 'sliding050'");
# RocksDB: the newest checkpoint holds nothing but the epoch it is of.
# (state_bytes, SST files and memtables, need not shrink at once: deletions
# are tombstones until compaction.)
{
	my $keys = rocksdb_keys('tumbling050');
  SKIP:
	{
		skip 'ldb (rocksdb-tools) is not installed', 1 unless $keys;
		is(join(' ', @$keys), '0x0065706F6368', 'RocksDB: only the epoch key is left once every window is purged');
	}
}
# What is left is the key map's table of slots (32 bytes each, never shrunk)
# and the new keys' waiting array (at least 1,024 slots of 8 bytes), which
# state_bytes counts: no key's node or value.
cmp_ok(job_metric('sliding050', 'state_bytes'), '<', 1048576,
	'memory backend: state_bytes is only the empty key map once every window is purged');

for my $job ('tumbling050', 'sliding050')
{
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job stopped");
}
is(psql("SELECT count(*) FROM mailer.memory_state WHERE job_id = $sliding_id"),
	'0', 'memory backend: no state left at the final checkpoint once every window is purged');
cmp_ok(psql("SELECT (SELECT count(*) FROM mailer.memory_redo, unnest(new_values) AS v WHERE job_id = $sliding_id AND v IS NOT NULL) "
	. "+ (SELECT count(*) FROM mailer.memory_undo, unnest(old_values) AS v WHERE job_id = $sliding_id AND v IS NOT NULL)"), '>', 0,
	'memory backend: the state was written (redo, or rows and their undo) before it was purged');

done_testing();
