# The sink buffer is bounded by bytes, not only by rows (hardening review,
# M6).  Two bounded generator jobs write 8000 rows of 10 KB each (80 MB)
# with a checkpoint interval of an hour, far below mailer.max_buffered_rows:
#   - every row under its own key: the worker checkpoints early, each time
#     its buffer holds 64 MB, so the job ends with more than one checkpoint;
#   - every row under one key (an upsert replaces the buffered row): the
#     rows replaced are freed, the buffer stays small, and the only
#     checkpoint is the last one.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t103');

psql(<<'SQL');
CREATE TABLE t103_many (k int PRIMARY KEY, payload text);
CREATE TABLE t103_one (k int PRIMARY KEY, payload text, n int);
SQL

sub job
{
	my ($name, $table, $key) = @_;
	psql(qq{SELECT mailer.create_job('$name', \$\${"source": {"type": "generator", "events": 8000},
		"steps": [{"map": {"k": "$key", "n": "(value->>'order_id')::int",
			"payload": "repeat(md5((value->>'order_id')), 320)"}}],
		"sink": {"type": "table", "table": "$table"}, "checkpoint": {"interval": "1 hour"}}\$\$)});
}

sub checkpoints
{
	my ($name) = @_;
	return psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = '$name')");
}

job('j103_many', 't103_many', "(value->>'order_id')::int");
is(wait_job('j103_many', 120), 'finished', 'j103_many finishes');
is(psql("SELECT count(*) || ' ' || min(length(payload)) FROM t103_many"), '8000 10240', 'every row written');
cmp_ok(checkpoints('j103_many'), '>', 1, '80 MB of rows under distinct keys: an early checkpoint came before the last');

job('j103_one', 't103_one', '1');
is(wait_job('j103_one', 120), 'finished', 'j103_one finishes');
is(psql("SELECT count(*) || ' ' || max(n) FROM t103_one"), '1 7999', 'one row, the last one');
is(checkpoints('j103_one'), '1', 'rows replaced under one key are freed: no early checkpoint');

done_testing();
