# A record that fails does not move the watermark (issue 11, item 11).  One
# record with a far-future event time fails a map after its event time was
# taken: it is a dead letter, and the records after it are not late, the
# windows are exact.  A filtered record, by contrast, is valid input: its
# event time moves the watermark as any record's does (a filter decides
# what reaches the results, not what time it is).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my $topic = unique_name('t087');
kafka('create-topic', $topic, 1);
psql("DROP TABLE IF EXISTS t087_out;
      CREATE TABLE t087_out (k text, window_start timestamptz, window_end timestamptz,
        n bigint, total numeric, PRIMARY KEY (k, window_start))");
create_window_job('j087', $topic, table => 't087_out',
	window => '{"type": "tumbling", "size": "10 seconds"}',
	extra_steps => q({"filter": "value->>'k' <> 'skip'"}, {"map": {"amount": "(value->>'a')::numeric"}}));

sub rows
{
	return psql(qq{SELECT string_agg(format('%s %s %s %s %s', k,
		extract(epoch FROM window_start - '2030-01-01 00:00:00+00')::int,
		extract(epoch FROM window_end - '2030-01-01 00:00:00+00')::int, n, total), ', ' ORDER BY k, window_start)
		FROM t087_out});
}

sub produce
{
	produce_events($topic, [ map { { p => 0, k => $_->[0], t => $_->[1], a => $_->[2] } } @_ ]);
}

# Good records, then one whose amount is not a number, a day in the future.
produce([ 'a', 1, 1 ], [ 'b', 2, 2 ], [ 'a', 3, 3 ], [ 'a', 86400, '"oops"' ]);
is(wait_job('j087'), 'running', 'the job committed the bad record');
my $dl = dead_letters('j087');
is(scalar @$dl, 1, 'the bad record is a dead letter');
is($dl->[0]{stage}, 'map', 'of stage map');
is(psql("SELECT watermark - '2030-01-01 00:00:00+00' FROM mailer.metrics WHERE name = 'j087'"),
	'-00:00:02', 'the watermark follows the good records only: 3 s less 5 s');

# The records after it, in later batches, are on time.
produce([ 'a', 4, 4 ], [ 'b', 5, 5 ], [ 'a', 12, 6 ], [ 'b', 25, 7 ]);
is(wait_job('j087'), 'running', 'the job committed the records after it');
is(job_metric('j087', 'records_late'), '0', 'no record after it is late');
is(job_metric('j087', 'records_dead_lettered'), '1', 'one record dead-lettered');
is(psql("SELECT watermark - '2030-01-01 00:00:00+00' FROM mailer.metrics WHERE name = 'j087'"),
	'00:00:20', 'the watermark follows the good records: 25 s less 5 s');
wait_for_sql('windows [0, 10) and [10, 20) written', "SELECT count(*) FROM t087_out", '3', 60);
is(rows(), 'a 0 10 3 8, a 10 20 1 6, b 0 10 2 7', 'the windows the watermark passed, exact');

# A filtered record moves the watermark: window [20, 30) fires.
produce([ 'skip', 40, 1 ]);
is(wait_job('j087'), 'running', 'the job committed the filtered record');
wait_watermark('j087', '2030-01-01 00:00:35+00', 60);
wait_for_sql('window [20, 30) written', "SELECT count(*) FROM t087_out WHERE k = 'b' AND window_start = '2030-01-01 00:00:20+00'", '1', 60);
is(rows(), 'a 0 10 3 8, a 10 20 1 6, b 0 10 2 7, b 20 30 1 7', 'the filtered record\'s event time fired the next window');
is(job_metric('j087', 'records_filtered'), '1', 'and it was filtered');
is(job_metric('j087', 'records_late'), '0', 'still nothing late');

psql("SELECT mailer.drop_job('j087')");
kafka('delete-topic', $topic);
psql("DROP TABLE t087_out");
done_testing();
