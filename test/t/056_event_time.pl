# Where the event time comes from.  Without "event_time", a Kafka job's
# event time is the message timestamp (kcat gives each message its produce
# time): windows of 1 s over a 2-partition topic equal the same windows
# computed in SQL over the timestamps a non-windowed job recorded for the
# same messages.  With an event_time expression, a record whose event time
# is NULL or does not parse is a dead letter (stage event_time) and does not
# move the watermark.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;
use Time::HiRes qw(time);

fresh_extension();

my $topic = unique_name('t056');
kafka('create-topic', $topic, 2);

psql(<<'SQL');
DROP TABLE IF EXISTS raw056, win056, ts056;
CREATE TABLE raw056 (key text, "partition" int, "timestamp" timestamptz, value jsonb);
CREATE TABLE win056 (k text, window_start timestamptz, window_end timestamptz,
	n bigint, total numeric, PRIMARY KEY (k, window_start));
CREATE TABLE ts056 (LIKE win056 INCLUDING ALL);
SQL

my $filter = q[{"filter": "value->>'k' <> 'end'"}];
psql(qq{SELECT mailer.create_job('raw056', \$spec\${
	"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	"steps": [$filter], "sink": {"type": "table", "table": "raw056"},
	"checkpoint": {"interval": "200 milliseconds"}}\$spec\$)});
create_window_job('ts056', $topic, table => 'ts056', extra_steps => $filter,
	window => '{"type": "tumbling", "size": "10 seconds"}');
# No event_time, no watermark section: the message timestamp, no out-of-orderness.
psql(qq{SELECT mailer.create_job('win056', \$spec\${
	"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	"steps": [$filter, {"key_by": {"k": "value->>'k'"}}, {"window": {"type": "tumbling", "size": "1 second"}},
			  {"aggregate": {"n": "count(*)", "total": "sum((value->>'a')::numeric)"}}],
	"sink": {"type": "table", "table": "win056"},
	"checkpoint": {"interval": "200 milliseconds"}}\$spec\$)});
my @jobs = ('raw056', 'win056', 'ts056');

# 40 events in 4 rounds a few hundred ms of wall clock apart, so that their
# produce times fall in several 1 s windows.
my @events;
for my $round (0 .. 3)
{
	my @these = map { { p => $_ % 2, k => (qw(a b c))[ $_ % 3 ], t => $round * 10 + $_, a => $_ } } 0 .. 9;
	produce_events($topic, \@these);
	push @events, @these;
	my $until = time() + 0.3;
	wait_until('some wall clock between rounds', sub { time() >= $until });
}
# Records whose "ts" is null, missing or not a time: fine for win056 (it
# uses the message timestamp), dead letters for ts056.
kcat_produce($topic, [ "a\t{\"k\": \"a\", \"ts\": null, \"a\": 100}",
	"b\t{\"k\": \"b\", \"a\": 200}",
	"c\t{\"k\": \"c\", \"ts\": \"not a time\", \"a\": 300}" ], partition => 0);
is(wait_job($_), 'running', "$_ committed the events") for @jobs;
is(psql('SELECT count(*) FROM raw056'), '43', 'raw056 recorded every message');

# End markers on both partitions until the message-timestamp watermark has
# passed the last data window (the markers' own times are later still).
my $last_end = psql(q{SELECT date_bin('1 second', max("timestamp"), '1970-01-01 00:00:00+00') + interval '1 second' FROM raw056});
wait_until('win056 watermark past the last window', sub {
	produce_events($topic, [ map { { p => $_, k => 'end', t => 100000 } } 0, 1 ]);
	psql("SELECT watermark >= '$last_end' FROM mailer.metrics WHERE name = 'win056'") eq 't';
}, 60);
wait_watermark('ts056', ev_time(100000 - 5));
is(wait_job($_), 'running', "$_ committed the end markers") for @jobs;

same_rows('SELECT k, window_start, window_end, n, total FROM win056', q{
	SELECT value->>'k' AS k, date_bin('1 second', "timestamp", '1970-01-01 00:00:00+00') AS window_start,
		   date_bin('1 second', "timestamp", '1970-01-01 00:00:00+00') + interval '1 second' AS window_end,
		   count(*) AS n, sum((value->>'a')::numeric) AS total
	  FROM raw056 GROUP BY 1, 2, 3},
	'without event_time, windows follow the Kafka message timestamps');
cmp_ok(psql('SELECT count(DISTINCT window_start) FROM win056'), '>=', 2, 'the messages span several 1 s windows');
is(job_metric('win056', 'records_dead_lettered'), '0', 'win056: no dead letters');

is(psql(q{SELECT string_agg(format('%s %s', d.stage, convert_from(d.value, 'UTF8')::jsonb->>'a'), ', ' ORDER BY d."offset")
		  FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) WHERE j.name = 'ts056'}),
	'event_time 100, event_time 200, event_time 300', 'ts056: NULL, missing and unparseable event times are dead letters');
is(job_metric('ts056', 'records_dead_lettered'), '3', 'ts056: records_dead_lettered = 3');
same_rows('SELECT k, window_start, window_end, n, total FROM ts056', q{
	SELECT value->>'k' AS k, date_bin('10 seconds', (value->>'ts')::timestamptz, '1970-01-01 00:00:00+00') AS window_start,
		   date_bin('10 seconds', (value->>'ts')::timestamptz, '1970-01-01 00:00:00+00') + interval '10 seconds' AS window_end,
		   count(*) AS n, sum((value->>'a')::numeric) AS total
	  FROM raw056 WHERE value->>'ts' ~ '^2030' GROUP BY 1, 2, 3},
	'ts056: the windows of the records with an event time');

is(psql("SELECT mailer.stop_job('$_')"), 'stopped', "$_ stopped") for @jobs;

done_testing();
