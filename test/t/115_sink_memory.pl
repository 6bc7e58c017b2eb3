# The sink's buffer gives its memory back after every checkpoint (final
# hostile review): a flush that kept the rows it wrote grew a worker by the
# size of all its output, until sink_buffer_full() asked for a checkpoint on
# every round and the worker ran out of memory.  A job writes some 80 MB in
# small checkpoints; then the worker's memory contexts (logged with
# pg_log_backend_memory_contexts) show the sink's rows context small.
# And the last checkpoint of a bounded source whose every row the table
# refuses for the same reason dead-letters them (no later checkpoint could
# ever hold a good row): the job finishes instead of retrying for good.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t115');
psql("CREATE TABLE t115_rows (order_id bigint, pad text)");

psql(q{SELECT mailer.create_job('j115', $${
	"source": {"type": "generator", "events": 80000, "rate": 20000},
	"steps": [{"map": {"order_id": "(value->>'order_id')::bigint", "pad": "repeat(md5(key), 32)"}}],
	"sink": {"type": "table", "table": "t115_rows"},
	"checkpoint": {"interval": "50 milliseconds"}}$$)});
wait_until('j115 is a quarter of the way', sub { psql("SELECT count(*) FROM t115_rows") >= 20000 });
my $pid = worker_pid('j115');

# The rows context's size, as the worker logs it, and the rows written by then.
sub rows_context
{
	return (memory_context_bytes($pid, 'mailer sink rows'), psql("SELECT count(*) FROM t115_rows"));
}

# A leak holds every row written, 20 MB and more, at each look.  A
# checkpoint that a loaded machine delays holds its interval's rows for a
# while: up to three looks, the smallest counts.
my ($bytes, $written) = rows_context();
for (1 .. 2)
{
	last if $bytes < 8 * 1024 * 1024;
	my ($b, $w) = rows_context();
	($bytes, $written) = ($b, $w) if $b < $bytes;
}
cmp_ok($bytes, '<', 8 * 1024 * 1024,
	"the sink's rows context holds little after $written rows of 1 kB ($bytes bytes)");
is(wait_job('j115'), 'finished', 'j115 finishes');
is(psql("SELECT count(*) || ' ' || count(DISTINCT order_id) FROM t115_rows"), '80000 80000', 'every row once');

psql("CREATE TABLE t115_refused (order_id bigint CHECK (order_id < 0))");
psql(q{SELECT mailer.create_job('j115_refused', $${
	"source": {"type": "generator", "events": 5},
	"steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}}],
	"sink": {"type": "table", "table": "t115_refused"},
	"checkpoint": {"interval": "1 hour"}}$$)});
is(wait_job('j115_refused', 60), 'finished', 'a bounded job whose every row is refused finishes');
is(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.jobs j USING (job_id) WHERE j.name = 'j115_refused' AND d.stage = 'sink'"),
	'5', 'its five rows are dead letters of stage sink');
is(psql("SELECT restarts FROM mailer.jobs WHERE name = 'j115_refused'"), '0', 'never restarted');

psql("SELECT mailer.drop_job('j115'); SELECT mailer.drop_job('j115_refused')");
done_testing();
