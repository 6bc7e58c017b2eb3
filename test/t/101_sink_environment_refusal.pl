# A table that refuses every row is the table's fault, not the rows'
# (hardening review, M3): when every row of a checkpoint (two or more)
# fails alone with the same SQLSTATE, nothing is dead-lettered; the
# checkpoint is retried until the table is fixed, then each row lands once.
#   - row-level security enabled before any policy exists (default deny):
#     the job retries, last_error says why, no dead letter; once a policy
#     lets the rows in, they land exactly once;
#   - a checkpoint that mixes good rows and rows a CHECK refuses
#     dead-letters only the bad ones;
#   - a checkpoint of a single refused row dead-letters it (one row tells
#     nothing about the table).
# A column is read from a table through a function (values with a short
# varlena header, which the halving detoasts) and must survive the halving.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $owner = 't101_owner';
fresh_with_owner('t101', $owner);
psql("CREATE TABLE t101_out (id int, v int CHECK (v <> 5), note text);
      GRANT INSERT ON t101_out TO $owner;
      CREATE TABLE t101_notes (id int, note text);
      INSERT INTO t101_notes SELECT i, 'note ' || i FROM generate_series(1, 30) i;
      GRANT SELECT ON t101_notes TO $owner;
      DROP FUNCTION IF EXISTS t101_note(int);
      CREATE FUNCTION t101_note(int) RETURNS text LANGUAGE sql STABLE AS \$\$SELECT note FROM t101_notes WHERE id = \$1\$\$");

my $topic = unique_name('t101');
kafka('create-topic', $topic, 1);
my $produced = 0;

sub produce
{
	my (@v) = @_;
	kcat_produce($topic, [ map { $produced++; "k$produced\t{\"id\": $produced, \"v\": $_}" } @v ]);
}

psql_as($owner, qq{SELECT mailer.create_job('j101', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	"steps": [{"map": {"id": "(value->>'id')::int", "v": "(value->>'v')::int", "note": "t101_note((value->>'id')::int)"}}],
	"sink": {"type": "table", "table": "t101_out"}, "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
is(wait_job('j101', 30), 'running', 'j101 runs');

# Row-level security without a policy refuses every row.  The ten rows
# must reach the sink in one checkpoint: a checkpoint of one refused row
# dead-letters it, and a worker reading as they are produced may cut a
# checkpoint after the first (seen under load).  Produced while the job is
# stopped, they are all in the topic when it starts, and read at once.
is(psql_as($owner, "SELECT mailer.stop_job('j101')"), 'stopped', 'j101 stops');
psql("ALTER TABLE t101_out ENABLE ROW LEVEL SECURITY");
produce(11 .. 20);
psql_as($owner, "SELECT mailer.start_job('j101')");
my $info;
wait_until('j101 retries its checkpoint', sub {
	$info = job_info('j101');
	$info->{restarts} > 0 && ($info->{last_error} // '') =~ /refused every row/;
}, 60);
like($info->{last_error}, qr/table public\.t101_out refused every row of the checkpoint: new row violates row-level security policy/,
	'last_error says the table refused every row');
is(psql("SELECT count(*) FROM mailer.dead_letters"), '0', 'no row is dead-lettered while the table refuses all');
is(psql("SELECT count(*) FROM t101_out"), '0', 'no row written');

psql("CREATE POLICY t101_in ON t101_out FOR INSERT TO $owner WITH CHECK (true)");
is(wait_job('j101', 120), 'running', 'with a policy the job goes on');
is(psql("SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || min(id) || ' ' || max(id) FROM t101_out"), '10 10 1 10',
	'every row lands, once');
is(psql("SELECT sum(v) FROM t101_out"), '155', '... with its values');
is(psql("SELECT count(*) FROM mailer.dead_letters"), '0', 'still no dead letter');

# Good rows and a bad one in one checkpoint: only the bad one is a dead letter.
my $restarts = job_info('j101')->{restarts};
produce(1, 2, 5, 3, 4, 5, 6);
is(wait_job('j101', 60), 'running', 'a checkpoint with good and bad rows commits');
is(psql("SELECT count(*) || ' ' || count(*) FILTER (WHERE note = 'note ' || id) FROM t101_out WHERE id > 10"), '5 5',
	'the good rows are written, with their values');
my @dl = @{ dead_letters('j101') };
like(pack('H*', $dl[0]{value_hex}), qr/"note": "note 13"/, 'the dead letter holds the row');
is(join(',', map { $_->{offset} } @dl), '12,15', 'the two bad rows are dead letters');
like($dl[0]{error}, qr/violates check constraint/, '... for the CHECK');

# A checkpoint of one refused row: a dead letter.
produce(5);
is(wait_job('j101', 60), 'running', 'a checkpoint of one bad row commits');
is(scalar(@{ dead_letters('j101') }), 3, 'the lone bad row is a dead letter');
is(job_info('j101')->{restarts}, $restarts, 'no restart for bad rows');

done_testing();
