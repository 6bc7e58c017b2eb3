# on_error sees the messages in their order, as if each went through whole
# (pipeline.c, ARCHITECTURE "the batch's two passes"; from the hostile
# review of issue 16's two passes): a data error of the first pass ends
# its chunk, so a later record's error that is not the record's (XX000,
# which fails the batch at once) cannot overtake it.  With on_error
# "fail", record 5 (a data error) fails the job, naming offset 5; record
# 10 is never reached.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t190');
psql("SET client_min_messages = warning;
      DROP FUNCTION IF EXISTS t190_f(bigint);
      CREATE FUNCTION t190_f(o bigint) RETURNS bigint LANGUAGE plpgsql STABLE AS \$\$
      BEGIN
        IF o = 5 THEN RAISE EXCEPTION 'bad data in order %', o; END IF;
        IF o = 10 THEN RAISE EXCEPTION 'library failed on order %', o USING ERRCODE = 'XX000'; END IF;
        RETURN o;
      END \$\$;
      CREATE TABLE t190_rows (order_id bigint);");

psql(q{SELECT mailer.create_job('j190', $spec$
  {"source": {"type": "generator", "events": 40, "keys": 3, "seed": 190},
   "steps": [{"map": {"order_id": "t190_f((value->>'order_id')::bigint)"}}],
   "sink": {"type": "table", "table": "t190_rows"},
   "on_error": "fail",
   "checkpoint": {"interval": "100 milliseconds"}}$spec$)});

my $info = wait_job_state('j190', qr/^(failed|restarting)$/, 60);
is($info->{state}, 'failed', "on_error fail: the job fails at the first bad record (state $info->{state})");
like($info->{last_error}, qr/offset 5 failed at map: bad data in order 5/,
	"last_error names the first bad record, offset 5: $info->{last_error}");

psql("SELECT mailer.drop_job('j190')");
drop_tables('t190');
psql("DROP FUNCTION IF EXISTS t190_f(bigint)");
done_testing();
