# Session windows with a cache of 10 entries (mailer.state_cache_entries)
# give SQL's sessions.  A key's sessions are one state entry, deleted with
# its last session; the stage counts the keys holding one
# (operators/session_keys.c), and a key it does not count is taken for new
# without asking the backend (window.c, lookup_sessions).  A key counted
# too few times would have its sessions taken for none once the cache let
# them go: its session would start again, and the rows below would come
# out short.  So the counts are put to the test where they change: keys
# whose sessions span checkpoints and outlive the cache, keys that go idle
# past the gap (purged, then new), a SIGKILL of one worker (the server
# restarts every backend, the other job's worker too) and a stop and start
# of the other (the counts are made again from the entries), and records
# that fail after making a key's first session: a flat_map gives a flagged
# record a second output, of key 'boom', whose float sum overflows when
# boom's session already holds one, so the record's first output is
# undone, its count with it.  Emit final (RocksDB) and update (memory).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
my $log_from = pg_log_size();
state_cache_entries_until_exit(10);

my $topic = unique_name('t168');
kafka('create-topic', $topic, 1);

# Every 0.1 s of event time: odd records go to 10 steady keys (one each
# 2 s: one session each, the whole run), even ones to 20 bursty keys (9
# records in 1.8 s, then 36 s idle: a new session each burst).  Every 15
# s, a pair of flagged records (amount -1): the first (a bursty key's)
# makes boom's session; the second, 0.4 s later, of a key f0 to f2 idle
# for 45 s, overflows it and fails; its key gets records 0.2, 2.2 and 4.2
# s after (one session, often across a checkpoint).
my (@events, @ok, @boom);
my $n = 0;
for (my $t = 100; $t < 400; $t += 0.1, $n++)
{
	my %e = (p => 0, t => sprintf('%.1f', $t), a => 1 + $n % 13);
	my $pair = int($n / 150) % 3;
	if ($n % 2)
	{
		$e{k} = 's' . (int($n / 2) % 10);
	}
	elsif ($n % 150 == 104)
	{
		@e{qw(k a)} = ("f$pair", -1);
	}
	elsif ($n % 150 == 106 || $n % 150 == 126 || $n % 150 == 146)
	{
		$e{k} = "f$pair";
	}
	else
	{
		$e{k} = 'b' . (int($n / 18) % 20);
		if ($n % 150 == 100)
		{
			$e{a} = -1;
			push @boom, { p => 0, k => 'boom', t => $e{t}, a => 0 };
		}
	}
	push @events, \%e;
	push @ok, \%e unless $n % 150 == 104;
	# At 200 s, a session each for 2,500 keys seen once: the counts' table
	# grows past its first size (2,048 slots, grown at 1,844 hashes), and
	# once they are purged it is made smaller (session_keys_trim) while the
	# steady keys' sessions live on.
	if ($t < 200 && $t + 0.1 >= 200)
	{
		my @burst = map { { p => 0, k => "x$_", t => sprintf('%.1f', $t), a => 1 } } 0 .. 2499;
		push @events, @burst;
		push @ok, @burst;
	}
}
my $failing = grep { $_->{a} == -1 && $_->{k} =~ /^f/ } @events;
my $end = { p => 0, k => 'zz', t => 2000, a => 1 };
# boom's sessions: one per pair, of the first record's output alone (the
# second's was undone with its record).
events_table('t168_events', [ @ok, @boom, $end ]);

my $flat = q{{"flat_map": "jsonb_array_elements(CASE WHEN (value->>'a')::numeric < 0 THEN jsonb_build_array(value, jsonb_build_object('k', 'boom', 'ts', value->'ts', 'a', 0, 'f', 1e308)) ELSE jsonb_build_array(value) END)"}};
for my $j (['t168_final', '{"type": "session", "gap": "4 seconds"}', 'rocksdb'],
	['t168_update', '{"type": "session", "gap": "4 seconds", "emit": "update"}', 'memory'])
{
	my ($name, $window, $backend) = @$j;
	psql("DROP TABLE IF EXISTS $name; CREATE TABLE $name (k text, window_start timestamptz,
	        window_end timestamptz, n bigint, total numeric, f float8, PRIMARY KEY (k, window_start))");
	psql(qq{SELECT mailer.create_job('$name', \$spec\$
{"source": {"type": "kafka", "brokers": "$ENV{KAFKA_BROKERS}", "topic": "$topic", "start": "earliest"},
 "event_time": "(value->>'ts')::timestamptz",
 "watermark": {"max_out_of_orderness": "2 seconds"},
 "steps": [$flat, {"key_by": {"k": "value->>'k'"}}, {"window": $window},
   {"aggregate": {"n": "count(*)", "total": "sum((value->>'a')::numeric)", "f": "sum((value->>'f')::float8)"}}],
 "sink": {"type": "table", "table": "$name"},
 "checkpoint": {"interval": "200 milliseconds"},
 "state": {"backend": "$backend"}}\$spec\$)});
}

# In chunks of 70 records, each read and committed before the next goes
# out, so that sessions span checkpoints.  The final job's worker is
# killed after a third of them; the update job restarts from its
# checkpoint after two thirds.
produce_chunks_kill_restart($topic, \@events, $end, 70, 't168_final', 't168_update');

my $want = want_sessions("(SELECT * FROM t168_events WHERE k <> 'zz') e", '4 seconds');
for my $table ('t168_final', 't168_update')
{
	same_rows("SELECT k, window_start, window_end, n, total FROM $table WHERE k <> 'zz'",
		$want, "$table: every session, across checkpoints, a kill and a restart, as SQL's");
	is(scalar(grep { $_->{stage} eq 'aggregate' } @{ dead_letters($table) }), $failing,
		"$table: the $failing records whose boom output overflowed are the dead letters");
}
is(psql("SELECT count(*) FROM t168_final WHERE k LIKE 'x%'"), '2500', 'the burst made 2,500 sessions');
cmp_ok($failing, '>=', 15, 'the overflowing records number one per 15 s');
cmp_ok(psql("SELECT count(*) FROM t168_final WHERE k ~ '^b[0-9]'"), '>=', 150,
	'the bursty keys made a session per burst');
is(job_metric('t168_final', 'records_late'), '0', 'no record was late');
# A count below 0 raises an error (and an assert build's check of a key
# taken for new, or an Assert, another), and the worker's restart would
# count anew and hide it from the rows above.
cmp_ok(pg_log_size(), '>', $log_from, 'the server log grew: there is something to read');
unlike(pg_log_since($log_from), qr/session key count|TRAP:/, 'no session count went wrong');
psql("SELECT mailer.stop_job('$_')") for ('t168_final', 't168_update');
done_testing();
