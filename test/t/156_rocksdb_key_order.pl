# The RocksDB backend sorts a checkpoint's writes by key bytes with a radix
# sort (state_rocksdb.c, radix_sort_writes) before writing them into the
# SST file it ingests, which takes keys only in strictly increasing order.
# What this checks, end to end: over many checkpoints and about a thousand
# keys of varied bytes (a long shared prefix, bytes above 0x7f, a byte
# 0x01, numbers of different lengths, keys of 0 to 89 repeated bytes), no
# SST file is refused (a key out of order fails the checkpoint, and the job
# would restart) and every total read back is what SQL computes.  With
# mailer.state_cache_entries = 0 the keyed cache is emptied after each
# checkpoint, so every later record of a key reads its total back from
# RocksDB.  What it cannot check: the keyed stage's state keys are the
# entry's kind, the key's 4-byte length and its bytes, so no state key is
# a prefix of another (the "empty" key is 5 bytes) and keys of different
# lengths differ by the second byte; and each key is written once per
# checkpoint, so the sort's stability (the last write of a key wins) is not
# exercised here.
# On a server of its own (MailerCluster): the setting is the server's.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use Test::More;

mailer_node();
fresh_extension();
state_cache_entries_until_exit(0);

psql(<<'SQL');
DROP TABLE IF EXISTS t156_raw, t156_totals;
CREATE TABLE t156_raw (key text, value jsonb, "timestamp" timestamptz);
CREATE TABLE t156_totals (k text PRIMARY KEY, n bigint, total numeric);
SQL

my $events = 6000;
my $gen = qq{"source": {"type": "generator", "events": $events, "keys": 7, "seed": 156,
	"start_time": "2030-01-01 00:00:00+00", "step": "250 milliseconds"}};
# The keyed job's events over two seconds: about 40 checkpoints, each key
# written by many of them.
(my $gen_slow = $gen) =~ s/"seed"/"rate": 3000, "seed"/;
# Event n's key, by n % 6.
my $key = q{CASE ((value->>'order_id')::bigint % 6)
	WHEN 0 THEN repeat('x', ((value->>'order_id')::int / 6) % 90)
	WHEN 1 THEN 'shared/' || repeat('p', 60) || ((value->>'order_id')::bigint % 700)::text
	WHEN 2 THEN 'ÿé' || ((value->>'order_id')::bigint % 50)::text
	WHEN 3 THEN ((value->>'order_id')::bigint % 1000)::text
	WHEN 4 THEN 'z' || chr(1) || ((value->>'order_id')::bigint % 40)::text
	ELSE value->>'customer_id' END};
(my $key_json = $key) =~ s/\n\t/ /g;

psql(qq{SELECT mailer.create_job('t156_raw', \$spec\${$gen,
	"sink": {"type": "table", "table": "t156_raw"}}\$spec\$)});
psql(qq{SELECT mailer.create_job('t156', \$spec\${$gen_slow,
	"steps": [{"key_by": {"k": "$key_json"}},
			  {"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}],
	"sink": {"type": "table", "table": "t156_totals"},
	"checkpoint": {"interval": "50 milliseconds"}, "state": {"backend": "rocksdb"}}\$spec\$)});

for my $job (qw(t156_raw t156))
{
	is(wait_job($job), 'finished', "$job ends finished");
}
is(psql(q{SELECT restarts || ' ' || coalesce(last_error, '') FROM mailer.jobs WHERE name = 't156'}), '0 ',
	'the keyed job never failed');
cmp_ok(psql(q{SELECT max(epoch) FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) WHERE j.name = 't156'}),
	'>=', 10, 'over many checkpoints');
my $sql_key = $key =~ s/value->>/r.value->>/gr;
same_rows('SELECT k, n, total FROM t156_totals',
	qq{SELECT $sql_key AS k, count(*), sum((r.value->>'amount')::numeric) FROM t156_raw r GROUP BY 1},
	'every key\'s total is what SQL computes');
cmp_ok(psql('SELECT count(*) FROM t156_totals'), '>=', 900, 'over many distinct keys');
is(psql(q{SELECT count(*) FROM t156_totals WHERE k = ''}), '1', 'the empty key among them');

psql("SELECT mailer.drop_job('t156'); SELECT mailer.drop_job('t156_raw')");
psql('DROP TABLE t156_raw, t156_totals');
done_testing();
