# A user's aggregate whose transition function accepts an input only after
# others (a state machine: "start" first), under ORDER BY, so that the order
# the records arrive in does not matter.  Its inputs are kept and replayed
# in order when the result is made; no input may be judged on its own when
# it arrives (only a built-in transition function is run ahead so).  The
# records arrive out of order; the job's answer is SQL's, with no dead
# letter, before and after a restart of the job.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t167');
psql(q{DROP AGGREGATE IF EXISTS t167_fsm(text);
	CREATE OR REPLACE FUNCTION t167_step(s text, ev text) RETURNS text LANGUAGE plpgsql AS $$
	BEGIN
		IF s IS NULL AND ev <> 'start' THEN RAISE EXCEPTION 'must start first, got %', ev; END IF;
		RETURN coalesce(s || '>', '') || ev;
	END $$;
	CREATE AGGREGATE t167_fsm(text) (sfunc = t167_step, stype = text);
	CREATE TABLE t167_out (k text PRIMARY KEY, f text)});

my $topic = unique_name('t167');
kafka('create-topic', $topic, 1);
my @events = ([ 'a', 2, 'go' ], [ 'b', 1, 'start' ], [ 'a', 1, 'start' ], [ 'a', 3, 'stop' ],
	[ 'b', 3, 'stop' ], [ 'b', 2, 'go' ]);
kcat_produce($topic, [ map { "$_->[0]\t{\"seq\": $_->[1], \"ev\": \"$_->[2]\"}" } @events ]);
psql(qq{SELECT mailer.create_job('j167', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	"steps": [{"key_by": {"k": "key"}}, {"aggregate": {"f": "t167_fsm(value->>'ev' ORDER BY (value->>'seq')::int)"}}],
	"sink": {"type": "table", "table": "t167_out"}, "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
is(wait_job('j167', 60), 'running', 'the job runs');
my $want = psql(q{SELECT string_agg(k || '=' || f, ' ' ORDER BY k) FROM (SELECT k, t167_fsm(ev ORDER BY seq) f
	FROM (VALUES ('a', 2, 'go'), ('b', 1, 'start'), ('a', 1, 'start'), ('a', 3, 'stop'), ('b', 3, 'stop'), ('b', 2, 'go')) v(k, seq, ev)
	GROUP BY k) s});
is($want, 'a=start>go>stop b=start>go>stop', 'SQL orders the events');
is(psql("SELECT string_agg(k || '=' || f, ' ' ORDER BY k) FROM t167_out"), $want, 'the job gives SQL\'s answer');
is(psql("SELECT count(*) FROM mailer.dead_letters"), '0', 'no event is a dead letter');

# After a restart, the kept inputs come back from the state.
psql("SELECT mailer.stop_job('j167')");
kcat_produce($topic, [ "a\t{\"seq\": 0, \"ev\": \"start\"}" ]);
psql("SELECT mailer.start_job('j167')");
is(wait_job('j167', 60), 'running', 'restarted, it reads the rest');
is(psql("SELECT f FROM t167_out WHERE k = 'a'"), 'start>start>go>stop', 'the new event takes its place by order');
psql("SELECT mailer.drop_job('j167')");
kafka('delete-topic', $topic);
done_testing();
