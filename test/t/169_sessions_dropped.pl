# A session taken from its key's list, purged or merged into another, is
# freed at once when its values own no memory out of line (counts, integer
# and float aggregates, a numeric sum while it fits its scaled form), and
# left to a rebuild of the cache when they do (the minimum of a text);
# deleted entries of such values bring no rebuild either
# (operators/keyed_cache.c, keyed_drop_session).  A session freed while
# still reachable would give wrong rows or end the worker.  So sessions are
# merged and purged where it counts: each key's first two sessions fire,
# then two records that come 18 s late (within the allowed lateness of 20
# s) join them, which deletes the second's row and rewrites the first's; a
# session is purged 20 s after its end while its key holds the next one;
# and one of two keys' joining records fails after its merge (a flat_map
# output of key 'boom' overflows a float sum), so that its undo restores
# the sessions it had merged.  First with a cache of 10 entries (rebuilt
# at nearly every checkpoint), then of 100,000 (never rebuilt: freed
# sessions' memory is taken again, and a burst of keys grows the table,
# made smaller once they go), in three parts, each with a SIGKILL of one
# job's worker and a stop and start of the other; emit final on RocksDB
# and update on memory.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
my $log_from = pg_log_size();
state_cache_entries_until_exit(10);

my $topic = unique_name('t169');
kafka('create-topic', $topic, 1);

# Key i's cycles begin at 100 + 1.3 i + 40 c.  A cycle's records, with a
# gap of 3 s: at +0 and +1 (a session to +4), at +9 and +10 (one from +9 to
# +13), at +3.5 and +6.2, which arrive 18 s late and join the four into one
# session from +0 to +13, and at +31 (a session of its own, alive when the
# cycle's is purged at +33).  The +6.2 records of keys 0 and 1 (1.3 s
# apart) are flagged: each also gives boom a record with f = 1e308, and
# key 1's overflows boom's float sum, so that its record fails whole: key
# 1's cycles keep two sessions, and boom has one a cycle, of key 0's.
my (@events, @ok, @boom);
for my $i (0 .. 29)
{
	for (my $c = 100 + 1.3 * $i; $c < 380; $c += 40)
	{
		my $a = 1 + ($i + int($c)) % 7;
		for my $d (0, 1, 9, 10, 31, 3.5, 6.2)
		{
			my $late = $d == 3.5 || $d == 6.2;
			my %e = (p => 0, k => "k$i", t => sprintf('%.1f', $c + $d), a => $late ? $a + 1 : $a,
				arrive => $c + $d + ($late ? 18 : 0));
			$e{flag} = 1 if $d == 6.2 && $i <= 1;
			push @events, \%e;
			push @ok, \%e unless $e{flag} && $i == 1;
			push @boom, { p => 0, k => 'boom', t => $e{t}, a => 0 } if $e{flag} && $i == 0;
		}
	}
}
# At 330 s, under the larger cache, a session each for 10,000 keys seen
# once: the cache's table grows to 16,384 slots, and is made smaller, its
# entries kept, once they are purged (keyed_cache.c, shrink_table).
my @burst = map { { p => 0, k => "x$_", t => '330.0', a => 1 } } 0 .. 9999;
push @ok, @burst;
@events = sort { $a->{arrive} <=> $b->{arrive} } @events;
$_->{a} = -$_->{a} for grep { $_->{flag} } @events;	# what the flat_map tells by
my $flagged = grep { $_->{flag} } @events;
my $failing = grep { $_->{flag} && $_->{k} eq 'k1' } @events;
my $end = { p => 0, k => 'zz', t => 2000, a => 1 };
events_table('t169_events', [ (map { { %$_, a => abs($_->{a}) } } @ok), @boom, $end ]);

# A flagged record (a < 0) comes out as itself (its amount made positive)
# and as boom's, with f = 1e308.
my $flat = q{{"flat_map": "jsonb_array_elements(CASE WHEN (value->>'a')::numeric < 0 THEN jsonb_build_array(jsonb_set(value, '{a}', to_jsonb(-(value->>'a')::numeric)), jsonb_build_object('k', 'boom', 'ts', value->'ts', 'a', 0, 'f', 1e308)) ELSE jsonb_build_array(value) END)"}};
my %aggs = (
	t169_plain => ['"top": "max((value->>\'a\')::float8)"', 'max(a::float8) AS top', 'top float8'],
	t169_owned => ['"top": "min((value->>\'k\') || (value->>\'a\'))"', 'min(k || a::text) AS top', 'top text']);
for my $j (['t169_plain', '"final"', 'rocksdb'], ['t169_owned', '"update"', 'memory'])
{
	my ($name, $emit, $backend) = @$j;
	psql("DROP TABLE IF EXISTS $name; CREATE TABLE $name (k text, window_start timestamptz,
	        window_end timestamptz, n bigint, total numeric, $aggs{$name}[2], f float8, PRIMARY KEY (k, window_start))");
	psql(qq{SELECT mailer.create_job('$name', \$spec\$
{"source": {"type": "kafka", "brokers": "$ENV{KAFKA_BROKERS}", "topic": "$topic", "start": "earliest"},
 "event_time": "(value->>'ts')::timestamptz",
 "watermark": {"max_out_of_orderness": "1 second"},
 "steps": [$flat, {"key_by": {"k": "value->>'k'"}},
   {"window": {"type": "session", "gap": "3 seconds", "allowed_lateness": "20 seconds", "emit": $emit}},
   {"aggregate": {"n": "count(*)", "total": "sum((value->>'a')::numeric)", $aggs{$name}[0],
                  "f": "sum((value->>'f')::float8)"}}],
 "sink": {"type": "table", "table": "$name"},
 "checkpoint": {"interval": "200 milliseconds"},
 "state": {"backend": "$backend"}}\$spec\$)});
}

# The events to 240 s under a cache of 10, the rest under one of 100,000
# (the burst goes out whole at 330 s).
my @parts = ([ grep { $_->{arrive} < 240 } @events ],
	[ grep { $_->{arrive} >= 240 && $_->{arrive} < 330 } @events ],
	[ grep { $_->{arrive} >= 330 } @events ]);
produce_chunks_kill_restart($topic, $parts[0], undef, 60, 't169_plain', 't169_owned');
psql("ALTER SYSTEM SET mailer.state_cache_entries = 100000");
psql("SELECT pg_reload_conf()");
produce_chunks_kill_restart($topic, $parts[1], undef, 60, 't169_owned', 't169_plain');
produce_events($topic, \@burst);
is(wait_job($_), 'running', "$_ read the burst") for ('t169_plain', 't169_owned');
produce_chunks_kill_restart($topic, $parts[2], $end, 60, 't169_plain', 't169_owned');

for my $table ('t169_plain', 't169_owned')
{
	my $want = want_sessions("(SELECT * FROM t169_events WHERE k <> 'zz') e", '3 seconds',
		"count(*) AS n, sum(a) AS total, $aggs{$table}[1]");
	same_rows("SELECT k, window_start, window_end, n, total, top FROM $table WHERE k <> 'zz'",
		$want, "$table: every session merged and purged as SQL's, across kills and restarts");
	is(job_metric($table, 'records_late'), '0', "$table: no record was late");
	is(scalar(grep { $_->{stage} eq 'aggregate' } @{ dead_letters($table) }), $failing,
		"$table: key 1's $failing flagged records, whose boom output overflowed, are the dead letters");
	is(psql("SELECT count(*) FROM $table WHERE k = 'boom' AND f = 1e308 AND n = 1"), $flagged - $failing,
		"$table: boom has one session a cycle, of key 0's flagged record alone");
}
# Each cycle of a key is a session of six records and one of one; key 1's
# failed records left its first two sessions apart.
is(psql("SELECT count(*) FROM t169_plain WHERE k ~ '^k([02-9]|[1-2][0-9])\$' AND n NOT IN (6, 1)"), '0',
	'every session of keys but 1 holds its six records, or the one at +31');
is(psql("SELECT count(*) FROM t169_plain WHERE k = 'k1' AND n = 3"), $failing,
	"key 1's undone records left a first session of three records a cycle");
cmp_ok(psql("SELECT count(*) FROM t169_plain WHERE k ~ '^k' AND n = 1"), '>=', 180, 'thirty keys made a session at +31 each cycle');
is(psql("SELECT count(*) FROM t169_owned WHERE k LIKE 'x%'"), '10000', 'the burst made 10,000 sessions');
cmp_ok(pg_log_size(), '>', $log_from, 'the server log grew: there is something to read');
unlike(pg_log_since($log_from), qr/TRAP:|terminated by signal (6|11)\b/,
	'no worker crashed but those the test killed');
psql("SELECT mailer.stop_job('$_')") for ('t169_plain', 't169_owned');
done_testing();
