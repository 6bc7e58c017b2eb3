# A row the sink table refuses for its own data is a dead letter whatever
# the SQLSTATE class a refusal has, and the job goes on (hardening review,
# H1).  Two jobs, each on a Kafka topic of its own:
#   - j100_rows writes each record as a row of an upsert table: a key of
#     3 KB that does not compress (54000, the btree's row size limit) and a
#     value a BEFORE INSERT trigger refuses with RAISE EXCEPTION (P0001);
#   - j100_sess keeps session windows (emit "update") in a table that a
#     child table references ON DELETE RESTRICT, and that a BEFORE DELETE
#     trigger guards: a merged session deletes the rows of its parts, and
#     the refused deletes are dead letters of stage sink while the merged
#     row is written.
# Each job keeps running without a restart, the other rows written once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t100');

my $topic = unique_name('t100');
kafka('create-topic', $topic, 1);
my $sessions = unique_name('t100s');
kafka('create-topic', $sessions, 1);

psql(<<'SQL');
CREATE TABLE t100_rows (k text PRIMARY KEY, v int);
CREATE OR REPLACE FUNCTION t100_check() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN IF NEW.v = 13 THEN RAISE EXCEPTION 't100: % is unlucky', NEW.v; END IF; RETURN NEW; END$$;
CREATE TRIGGER t100_check BEFORE INSERT ON t100_rows FOR EACH ROW EXECUTE FUNCTION t100_check();
CREATE TABLE t100_sess (k text, window_start timestamptz, window_end timestamptz, n bigint, total numeric,
	PRIMARY KEY (k, window_start));
CREATE TABLE t100_child (k text, ws timestamptz, FOREIGN KEY (k, ws) REFERENCES t100_sess ON DELETE RESTRICT);
CREATE OR REPLACE FUNCTION t100_keep() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN IF OLD.k = 'z' THEN RAISE EXCEPTION 't100: session rows of z stay'; END IF; RETURN OLD; END$$;
CREATE TRIGGER t100_keep BEFORE DELETE ON t100_sess FOR EACH ROW EXECUTE FUNCTION t100_keep();
SQL

psql(qq{SELECT mailer.create_job('j100_rows', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	"steps": [{"map": {"k": "value->>'k'", "v": "(value->>'v')::int"}}],
	"sink": {"type": "table", "table": "t100_rows"}, "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
create_window_job('j100_sess', $sessions, table => 't100_sess', ooo => '60 seconds',
	window => '{"type": "session", "gap": "10 seconds", "emit": "update"}');

# 20 rows, v 1..20; v = 7 has a 3000-character key of random hex digits.
srand(100);
my $big = join('', map { sprintf('%x', int(rand(16))) } 1 .. 3000);
kcat_produce($topic, [ map { sprintf("r%d\t{\"k\": \"%s\", \"v\": %d}", $_, $_ == 7 ? $big : "k$_", $_) } 1 .. 20 ]);

# Sessions y [1000, 1010) and [1012, 1022), z [1020, 1030): written at once (emit update).
produce_events($sessions, [ { p => 0, k => 'y', t => 1000 }, { p => 0, k => 'y', t => 1012 },
	{ p => 0, k => 'z', t => 1020 } ]);

sub settled
{
	my ($job, $what) = @_;
	my $state = eval { wait_job($job, 30) } // "not settled: $@";
	is($state, 'running', "$job: $what");
	my $info = job_info($job);
	is($info->{restarts}, 0, "$job: never restarted") or diag('last_error: ' . ($info->{last_error} // ''));
}

settled('j100_rows', 'the refused rows do not stop the job');
is(psql("SELECT count(*) || ' ' || sum(v) FROM t100_rows"), '18 ' . (210 - 7 - 13),
	'every other row is written, once');
my @dl = grep { $_->{stage} eq 'sink' } @{ dead_letters('j100_rows') };
is(scalar(@dl), 2, 'two dead letters of stage sink');
is(join(',', map { $_->{offset} } @dl), '6,12', '... at the records of v = 7 and v = 13');
like($dl[0]{error}, qr/index row size \d+ exceeds btree version 4 maximum/, '... the key too long for the index');
like($dl[1]{error}, qr/t100: 13 is unlucky/, "... the trigger's RAISE");

settled('j100_sess', 'the first sessions are written');
my $hand = q{SELECT string_agg(k || '|' || extract(epoch FROM window_start - '2030-01-01 00:00:00+00')::int || '|'
	|| extract(epoch FROM window_end - '2030-01-01 00:00:00+00')::int || '|' || n, ',' ORDER BY k, window_start) FROM t100_sess};
is(psql($hand), 'y|1000|1010|1,y|1012|1022|1,z|1020|1030|1', 'sessions y, y and z');

# The part y [1012, ...) is referenced; z's rows may not be deleted.
psql(q{INSERT INTO t100_child VALUES ('y', '2030-01-01 00:00:00+00'::timestamptz + interval '1012 seconds')});
# 1008 bridges y's sessions into [1000, 1022); 1016 moves z's start back to 1016.
produce_events($sessions, [ { p => 0, k => 'y', t => 1008 }, { p => 0, k => 'z', t => 1016 } ]);
settled('j100_sess', 'refused deletes do not stop the job');
is(psql($hand), 'y|1000|1022|3,y|1012|1022|1,z|1016|1030|2,z|1020|1030|1',
	'the merged rows are written; the rows whose delete was refused stay');
@dl = @{ dead_letters('j100_sess') };
is(scalar(@dl), 2, 'two dead letters');
is(join(',', map { $_->{stage} } @dl), 'sink,sink', '... of stage sink');
my @errors = sort map { $_->{error} } @dl;
like($errors[0], qr/^could not delete the row a merged session replaced: .*t100: session rows of z stay/,
	"... one for the BEFORE DELETE trigger's RAISE");
like($errors[1], qr/^could not delete the row a merged session replaced: .*violates foreign key constraint/,
	'... one for the restricting foreign key');
is(psql("SELECT count(*) FROM t100_child"), '1', 'the child row stays');

done_testing();
