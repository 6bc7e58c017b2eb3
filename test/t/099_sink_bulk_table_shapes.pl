# The append path's batches of rows (connectors/sink_table.c, run_bulk)
# on a table whose shape the slots and the insert must get right: a
# dropped column, a column added later with a default (a fast default in
# the catalog), values stored out of line (TOAST), a whole-row expression
# index, an expression index, a partial unique index, an exclusion
# constraint and a whole-row CHECK.  2500 rows go through several batches
# of slots (base/bulk_slot.c), the rows the constraints refuse become dead
# letters with the INSERT's own errors, and every other row is in the
# table with its values and found through every index.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $owner = 't099_owner';
fresh_with_owner('t099', $owner);
psql("CREATE TABLE t099_t (gone int, order_id int NOT NULL, customer text NOT NULL, r int4range, k int,
        EXCLUDE USING gist (r WITH &&));
      ALTER TABLE t099_t ALTER COLUMN customer SET STORAGE EXTERNAL;
      ALTER TABLE t099_t DROP COLUMN gone;
      INSERT INTO t099_t VALUES (-1, 'x', int4range(-10, -9), -1);
      ALTER TABLE t099_t ADD COLUMN extra int DEFAULT 7;
      CREATE FUNCTION t099_double(t099_t) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT \$1.order_id * 2';
      CREATE INDEX t099_whole_row ON t099_t (t099_double(t099_t));
      CREATE UNIQUE INDEX t099_low_k ON t099_t (k) WHERE k < 5;
      CREATE INDEX t099_len ON t099_t (length(customer));
      ALTER TABLE t099_t ADD CONSTRAINT t099_not_77 CHECK ((t099_t).order_id <> 77);
      GRANT INSERT ON t099_t TO $owner");

# Orders 0..2499.  Refused: order_id % 100 = 3 (NOT NULL customer, 25
# rows), 77 (the CHECK), 55 (its range overlaps 54's and 56's: the
# exclusion constraint), k = order_id % 1000 < 5 a second time (1000..1004
# and 2000..2004, less 1003 and 2003 already refused: 8 rows).
my $refused = 25 + 1 + 1 + 8;
my $from = test_point_hold('sink_after_bulk_insert');
psql_as($owner, q{SELECT mailer.create_job('t099_j', $${"source": {"type": "generator", "events": 2500},
	"steps": [{"map": {"order_id": "(value->>'order_id')::int",
	  "customer": "CASE WHEN (value->>'order_id')::int % 100 = 3 THEN NULL ELSE repeat(md5(value->>'order_id'), 200) END",
	  "r": "CASE WHEN (value->>'order_id')::int = 55 THEN int4range(54, 57) ELSE int4range((value->>'order_id')::int, (value->>'order_id')::int + 1) END",
	  "k": "(value->>'order_id')::int % 1000"}}],
	"sink": {"type": "table", "table": "t099_t"}, "on_error": "dead_letter"}$$)});
ok(test_point_wait_reached('sink_after_bulk_insert', $from, 60),
	'the rows go through the append path (table_multi_insert), not the INSERT');
test_point_release();
my $info = wait_job_state('t099_j', qr/^(finished|restarting|failed)$/, 120);
is($info->{state}, 'finished', 'the job finishes') or diag($info->{last_error} // '');

is(psql("SELECT count(*) FROM t099_t WHERE order_id >= 0"), 2500 - $refused,
	'every row the constraints let through is written');
is(psql("SELECT count(*) FROM t099_t WHERE order_id >= 0 AND extra = 7"), 2500 - $refused,
	'the column added later gets its default');
is(psql("SELECT count(*) FROM t099_t WHERE order_id >= 0 AND customer = repeat(md5(order_id::text), 200)"),
	2500 - $refused, 'the values stored out of line read back whole');
is(psql("SELECT count(*) FROM t099_t WHERE order_id = -1 AND extra = 7 AND customer = 'x'"), 1,
	'the row from before is untouched');
is(psql("SET enable_seqscan = off; SELECT count(*) FROM t099_t WHERE t099_double(t099_t) = 20"), 1,
	'the whole-row expression index finds a written row');
is(psql("SET enable_seqscan = off; SELECT count(*) FROM t099_t WHERE length(customer) = 6400"),
	2500 - $refused, 'the expression index holds every written row');
is(psql("SET enable_seqscan = off; SELECT string_agg(order_id::text, ',' ORDER BY order_id) FROM t099_t WHERE k < 5 AND order_id >= 0"),
	'0,1,2,4', 'the partial unique index holds the first of each low k');

my @dl = @{ dead_letters('t099_j') };
is(scalar(@dl), $refused, 'each refused row is a dead letter');
my %error = map { ($_->{offset} => $_->{error}) } @dl;
like($error{3} // '', qr/null value in column "customer".*violates not-null constraint/s,
	'NOT NULL refuses as the INSERT does');
like($error{77} // '', qr/violates check constraint "t099_not_77"/, 'the whole-row CHECK refuses');
like($error{55} // '', qr/conflicting key value violates exclusion constraint/, 'the exclusion constraint refuses');
like($error{1000} // '', qr/duplicate key value violates unique constraint "t099_low_k"/,
	'the partial unique index refuses');
psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
done_testing();
