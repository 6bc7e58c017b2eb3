# The memory backend keeps each key's row address between checkpoints
# (src/state/memory_rows.c); a rewrite of mailer.memory_state moves every
# row.  Under a running job on the memory backend (running totals and
# sliding windows, whose fired windows delete keys): VACUUM FULL, CLUSTER
# and plain VACUUM of the state table, each between checkpoints.  The job
# never fails (the addresses are taken again after a rewrite: no row goes
# by SQL, as the worker's DEBUG1 line per checkpoint says), its output
# equals SQL's over the events, each key has one row, and an index a DBA
# adds (the table has none) holds an entry for every row (amcheck).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $N = 12_000;

fresh_extension();
test_point_release();
# Every checkpoint folds: the rows (and their addresses) are what this
# tests, and a fold of a longer interval would carry the short-lived
# panes to its redo instead.
setting_until_exit('mailer.memory_fold_checkpoints', 1);
psql(<<'SQL');
DROP TABLE IF EXISTS t160_raw, t160_totals, t160_sliding;
CREATE TABLE t160_raw (key text, value jsonb, "timestamp" timestamptz);
CREATE TABLE t160_totals (customer_id text PRIMARY KEY, n bigint, total numeric);
CREATE TABLE t160_sliding (customer_id text, window_start timestamptz, window_end timestamptz,
	n bigint, total numeric, PRIMARY KEY (customer_id, window_start));
CREATE EXTENSION IF NOT EXISTS amcheck;
SQL
# The workers connect as this role: their checkpoints log what they wrote.
psql("ALTER ROLE CURRENT_USER SET log_min_messages = 'debug1'");

my $gen = qq{"source": {"type": "generator", "events": $N, "keys": 300, "seed": 160,
	"start_time": "2030-01-01 00:00:00+00", "step": "50 milliseconds", "rate": RATE}};
my $agg = q{{"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}};
my $key = q{{"key_by": {"customer_id": "value->>'customer_id'"}}};
psql(qq{SELECT mailer.create_job('t160_raw', \$spec\${@{[ $gen =~ s/RATE/100000/r ]},
	"sink": {"type": "table", "table": "t160_raw"}}\$spec\$)});
psql(qq{SELECT mailer.create_job('t160_totals', \$spec\${@{[ $gen =~ s/RATE/1500/r ]},
	"steps": [$key, $agg], "sink": {"type": "table", "table": "t160_totals"},
	"state": {"backend": "memory"}, "checkpoint": {"interval": "100 milliseconds"}}\$spec\$)});
psql(qq{SELECT mailer.create_job('t160_sliding', \$spec\${@{[ $gen =~ s/RATE/1500/r ]},
	"steps": [$key, {"window": {"type": "sliding", "size": "1 minute", "slide": "20 seconds"}}, $agg],
	"sink": {"type": "table", "table": "t160_sliding"},
	"state": {"backend": "memory"}, "checkpoint": {"interval": "100 milliseconds"}}\$spec\$)});
my %id = map { $_ => psql("SELECT job_id FROM mailer.job WHERE name = '$_'") } qw(t160_totals t160_sliding);
my $epochs = "SELECT min(e) FROM (SELECT max(epoch) AS e FROM mailer.checkpoints "
	. "WHERE job_id IN ($id{t160_totals}, $id{t160_sliding}) GROUP BY job_id HAVING count(*) > 0) c";
wait_for_sql('both jobs checkpoint', "SELECT coalesce(($epochs), 0) >= 3", 't', 30);

my $node = "SELECT pg_relation_filenode('mailer.memory_state')";
my $from = pg_log_size();
# The table has no index: rewritten as it is, then with one a DBA adds,
# which the heap-level writes keep up.
for my $rewrite ('VACUUM FULL mailer.memory_state',
	'CREATE UNIQUE INDEX t160_memory_state_key ON mailer.memory_state (job_id, key)',
	'CLUSTER mailer.memory_state USING t160_memory_state_key',
	'VACUUM mailer.memory_state', 'VACUUM FULL mailer.memory_state')
{
	my $before = psql($epochs);
	my $filenode = psql($node);
	psql($rewrite);
	isnt(psql($node), $filenode, "$rewrite: the rows moved") if $rewrite =~ /FULL|CLUSTER/;
	wait_for_sql("$rewrite: both jobs checkpoint after it", "SELECT ($epochs) > $before + 2", 't', 30);
}

my $w = memory_rows_written([ values %id ], $from);
cmp_ok($w->{updated}, '>', 0, 'the rewrites: rows updated at their address');
cmp_ok($w->{deleted}, '>', 0, 'the rewrites: fired windows\' rows deleted at their address');
is($w->{sql}, 0, 'the rewrites: no row by SQL (the addresses were taken again)');

for my $job (qw(t160_raw t160_totals t160_sliding))
{
	is(wait_job($job, 60), 'finished', "$job ends finished");
	is(psql("SELECT restarts FROM mailer.job_status s JOIN mailer.job j USING (job_id) WHERE j.name = '$job'"),
		'0', "$job never failed");
}
same_rows('SELECT customer_id, n, total FROM t160_totals',
	q{SELECT value->>'customer_id', count(*), sum((value->>'amount')::numeric) FROM t160_raw GROUP BY 1},
	'the totals are SQL\'s');
same_rows('SELECT customer_id, window_start, window_end, n, total FROM t160_sliding',
	q{SELECT value->>'customer_id', s, s + interval '1 minute', count(*), sum((value->>'amount')::numeric)
	  FROM t160_raw, generate_series(date_bin('20 seconds', (value->>'ts')::timestamptz, '1970-01-01 00:00:00+00')
		- interval '40 seconds', (value->>'ts')::timestamptz, interval '20 seconds') AS s GROUP BY 1, 2},
	'the sliding windows are SQL\'s');
is(psql("SELECT count(*) - count(DISTINCT (job_id, key)) FROM mailer.memory_state"), '0', 'no key has two rows');
is(psql("SELECT count(*) FROM mailer.memory_state WHERE job_id = $id{t160_totals}"),
	psql('SELECT count(*) FROM t160_totals'), 'one row per key of the totals');
psql_ok("SELECT bt_index_check('mailer.t160_memory_state_key', true)",
	'every state row has its entry in the index the DBA added (amcheck)');
psql('DROP INDEX mailer.t160_memory_state_key');

psql('ALTER ROLE CURRENT_USER RESET log_min_messages');
psql("SELECT mailer.drop_job('$_')") for qw(t160_raw t160_totals t160_sliding);
psql('DROP TABLE t160_raw, t160_totals, t160_sliding');

done_testing();
