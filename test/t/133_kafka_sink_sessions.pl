# A session-window job (emit "update") writing to a Kafka topic: when an
# event bridges two sessions whose rows were already published, the
# replaced part becomes a tombstone (its key, a null value), so that the
# topic read as a compacted topic would keep it (the latest record per key,
# a tombstone deleting the key) equals the sessions computed in plain SQL.
# The default key holds the key field and window_start, the default value
# the output row as a JSON object with numbers as numbers.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my $in = unique_name('t133_in');
my $out = unique_name('t133_out');
kafka('create-topic', $in, 1);
kafka('create-topic', $out, 1);

my $spec = sprintf(<<'JSON', $BROKERS, $in, $BROKERS, $out);
{"source": {"type": "kafka", "brokers": "%s", "topic": "%s"},
 "event_time": "(value->>'ts')::timestamptz",
 "watermark": {"max_out_of_orderness": "5 seconds"},
 "steps": [{"key_by": {"k": "value->>'k'"}},
           {"window": {"type": "session", "gap": "10 seconds", "emit": "update"}},
           {"aggregate": {"n": "count(*)", "total": "sum((value->>'a')::numeric)"}}],
 "sink": {"type": "kafka", "brokers": "%s", "topic": "%s"},
 "checkpoint": {"interval": "200 milliseconds"}}
JSON
psql("SELECT mailer.create_job('s133', \$spec\$$spec\$spec\$)");

# y: two sessions, [1000,1010) and [1012,1022), published as they are;
# then 1008 bridges them.  x: one session, untouched.
my @first = ({ p => 0, k => 'y', t => 1000, a => 10 }, { p => 0, k => 'y', t => 1012, a => 20 },
	{ p => 0, k => 'x', t => 1001, a => 1 });
my @bridge = ({ p => 0, k => 'y', t => 1008, a => 30 });
events_table('ev133', [ @first, @bridge ]);

produce_events($in, \@first);
wait_job('s133');
my $before = kcat_consume($out, format => "%k\t%S\n");
is(scalar(@$before), 3, 'three session rows published before the bridge');

produce_events($in, \@bridge);
wait_job('s133');

# Every record read_committed: key, value (or NULL for a tombstone), in order.
my $records = kcat_consume($out, format => "%k\t%S\t%s\n");
my @tombstones = grep { (split /\t/)[1] eq '-1' } @$records;
is(scalar(@tombstones), 1, 'one tombstone, for the replaced part');
like($tombstones[0], qr/^\{"k": "y", "window_start": "[^"]+"\}\t-1/, 'the tombstone has the replaced session\'s key');

# The topic as compaction keeps it: the last record per key, tombstones deleting.
my %latest;
for my $r (@$records)
{
	my ($k, $size, $v) = split /\t/, $r, 3;
	if ($size eq '-1') { delete $latest{$k} } else { $latest{$k} = $v }
}
psql("DROP TABLE IF EXISTS got133; CREATE TABLE got133 (v jsonb)");
psql("INSERT INTO got133 VALUES " . join(', ', map { "('$_')" } values %latest));
same_rows(q{SELECT v->>'k', (v->>'window_start')::timestamptz, (v->>'window_end')::timestamptz,
			(v->>'n')::bigint, (v->>'total')::numeric FROM got133},
	want_sessions('ev133', '10 seconds'),
	'the compacted topic holds exactly the sessions SQL computes');
is(psql(q{SELECT count(*) FROM got133 WHERE jsonb_typeof(v->'total') = 'number' AND jsonb_typeof(v->'n') = 'number'}),
	scalar(keys %latest), 'numbers are JSON numbers');

psql("SELECT mailer.drop_job('s133')");
done_testing();
