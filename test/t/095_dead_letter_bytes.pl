# Dead letters are bounded by bytes, not only by count.  With the test
# setting mailer.test_dead_letter_bytes at 64 kB (16 MB in production) an
# INSERT of dead letters takes at most 64 kB, a key or value is cut to a
# sixteenth of that (4 kB, 1 MB in production) with a note in the error,
# and the worker checkpoints early once 64 kB are buffered, even with a
# checkpoint interval of 2 seconds (the 30 batches take less).  Every bad record is a dead letter
# exactly once, whole but for the one cut.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
psql("ALTER SYSTEM SET mailer.test_dead_letter_bytes = '64kB'");
psql("ALTER SYSTEM SET mailer.batch_size = 20");
psql("SELECT pg_reload_conf()");

my $topic = unique_name('t095');
kafka('create-topic', $topic, 1);

# 300 bad records of about 2 kB (30 batches, 600 kB), one good, one bad of 10 kB.
my $pad = 'y' x 2000;
my @lines = map { qq(k$_\t{"n": "x$_", "pad": "$pad"}) } 0 .. 299;
push @lines, qq(good\t{"n": "7"});
push @lines, qq(big\t{"n": "x-big", "pad": "@{[ 'z' x 10000 ]}"});
kcat_produce($topic, \@lines);

psql("DROP TABLE IF EXISTS t095_out; CREATE TABLE t095_out (n int)");
psql(qq{SELECT mailer.create_job('j095', \$\${
  "source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic", "start": "earliest"},
  "steps": [{"map": {"n": "(value->>'n')::int"}}],
  "sink": {"type": "table", "table": "t095_out"},
  "checkpoint": {"interval": "2 seconds"}}\$\$)});

is(wait_job('j095'), 'running', 'the job committed every record');
is(psql("SELECT count(*) FROM mailer.dead_letters"), '301', 'the bad records are dead letters');
is(psql("SELECT count(*) FROM t095_out WHERE n = 7"), '1', 'the good record is written');
is(psql("SELECT count(*) || ' ' || count(DISTINCT \"offset\") || ' ' || min(\"offset\") || ' ' || max(\"offset\")
	FROM mailer.dead_letters WHERE \"offset\" < 300"), '300 300 0 299', 'each bad record is a dead letter once');
is(psql("SELECT count(*) FROM mailer.dead_letters WHERE \"offset\" < 300
	AND convert_from(value, 'UTF8') = format('{\"n\": \"x%s\", \"pad\": \"%s\"}', \"offset\", repeat('y', 2000))
	AND error NOT LIKE '%cut from%'"), '300', 'whole, with the error as it was');
cmp_ok(psql("SELECT count(DISTINCT epoch) FROM mailer.dead_letters"), '>=', 5,
	'written by several checkpoints: the worker checkpointed early by bytes');

my $big = psql("SELECT length(value) || '|' || convert_from(key, 'UTF8') || '|' || error
	FROM mailer.dead_letters WHERE \"offset\" = 301");
my ($len, $key, $error) = split /\|/, $big, 3;
is($len, 4096, 'the 10 kB value is cut to 4 kB');
is($key, 'big', 'its key is whole');
like($error, qr/^invalid input syntax for type integer: "x-big" \(dead letter value cut from 10\d\d\d to 4096 bytes\)$/,
	'the error says the value was cut');

psql("SELECT mailer.drop_job('j095')");
psql("ALTER SYSTEM RESET mailer.test_dead_letter_bytes");
psql("ALTER SYSTEM RESET mailer.batch_size");
psql("SELECT pg_reload_conf()");
kafka('delete-topic', $topic);
psql("DROP TABLE t095_out");
done_testing();
