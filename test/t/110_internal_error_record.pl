# A record that makes a function raise an internal error (XX000, as a C
# library's elog on bad input does) is not dead-lettered: an internal error
# may as well be a bug or a broken environment, so it fails the batch and
# the job retries with backoff, as any error that is not the record's data.
# What changed: last_error names the record the error met (topic,
# partition, offset) and the step, so an operator knows what to act on,
# and at every retry it is that same record.  The README's remedy works:
# the job's own function, replaced by one that turns the internal error
# into RAISE EXCEPTION, makes the record a dead letter, and the job goes on
# with every other record exactly once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t110');
psql("SET client_min_messages = warning;
      DROP FUNCTION IF EXISTS t110_check(bigint);
      DROP FUNCTION IF EXISTS t110_geo(bigint);
      -- Stands for a C library's function that fails on one input.
      CREATE FUNCTION t110_geo(o bigint) RETURNS bigint LANGUAGE plpgsql STABLE AS \$\$
      BEGIN
        IF o = 13 THEN
          RAISE EXCEPTION 'geometry library failed on order %', o USING ERRCODE = 'XX000';
        END IF;
        RETURN o;
      END \$\$;
      -- The job's own function around it.
      CREATE FUNCTION t110_check(o bigint) RETURNS bigint LANGUAGE plpgsql STABLE AS \$\$
      BEGIN
        RETURN t110_geo(o);
      END \$\$;
      CREATE TABLE t110_rows (order_id bigint);");

my $log_from = pg_log_size();
psql(q{SELECT mailer.create_job('j110', $spec$
  {"source": {"type": "generator", "events": 40, "keys": 3, "seed": 110},
   "steps": [{"map": {"order_id": "t110_check((value->>'order_id')::bigint)"}}],
   "sink": {"type": "table", "table": "t110_rows"},
   "checkpoint": {"interval": "100 milliseconds"}}$spec$)});

my $want = qr/^record at generator partition 0 offset 13 failed at map: geometry library failed on order 13$/;
my $info = wait_until('j110 restarting', sub {
	my $i = job_info('j110');
	return $i->{state} eq 'restarting' ? $i : undef;
}, 60);
like($info->{last_error}, $want, "last_error names the record's position and the step: $info->{last_error}");
my $again = wait_until('j110 failing again', sub {
	my $i = job_info('j110');
	return $i->{restarts} > $info->{restarts} && $i->{last_error_at} ne $info->{last_error_at} ? $i : undef;
}, 60);
like($again->{last_error}, $want, 'the retry met the same record again');
is(scalar @{ dead_letters('j110') }, 0, 'an internal error is not dead-lettered');
is(psql("SELECT count(*) FROM t110_rows WHERE order_id >= 13"), '0',
	'nothing from the record on was written');
like(pg_log_since($log_from), qr/ERROR: .*record at generator partition 0 offset 13 failed at map: geometry library failed/,
	'the server log has the error with the position too');

# The remedy: the job's function turns the internal error into the record's.
psql(q{CREATE OR REPLACE FUNCTION t110_check(o bigint) RETURNS bigint LANGUAGE plpgsql STABLE AS $$
      BEGIN
        RETURN t110_geo(o);
      EXCEPTION WHEN internal_error THEN
        RAISE EXCEPTION 'order % refused: %', o, SQLERRM;
      END $$});
is(wait_job('j110'), 'finished', 'the job finishes once the record is refused as data');
is(psql("SELECT count(*) || '|' || count(DISTINCT order_id) || '|' || sum(order_id) FROM t110_rows"),
	'39|39|' . (780 - 13), 'every other record once');
my $dl = dead_letters('j110');
is(join('|', map { "$_->{offset}|$_->{stage}|$_->{error}" } @$dl),
	'13|map|order 13 refused: geometry library failed on order 13', 'the record is the one dead letter');
accounting_ok('j110');

psql("SELECT mailer.drop_job('j110')");
drop_tables('t110');
psql("DROP FUNCTION IF EXISTS t110_check(bigint); DROP FUNCTION IF EXISTS t110_geo(bigint);");
done_testing();
