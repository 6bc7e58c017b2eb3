# A flat_map before an aggregate (issue 16's two-pass pipeline, from its
# hostile review): a chunk of the first pass ends once its messages have
# made a chunk's worth of outputs, and a group key takes its size, not a
# 1 kB buffer.  When a chunk held 64 messages' outputs whatever their
# number, 200 messages of 8000 outputs each (well under
# mailer.max_outputs_per_record) took the worker to 767 MB (43 MB before
# the two passes).  The answer is compared with SQL too.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
my $topic = unique_name('t191');
kafka('create-topic', $topic, 1);
psql("DROP TABLE IF EXISTS t191_out");
psql("CREATE TABLE t191_out (k bigint PRIMARY KEY, n bigint)");
my $msgs = 200;
my $per = 8000;
kcat_produce($topic, [ map { "m$_\t$per" } 1 .. $msgs ]);
create_totals_job('j191', $topic, table => 't191_out', source => '"format": "text"', backend => undef,
	extra_steps => '{"flat_map": "generate_series(1, value::int)"}', key => '{"k": "value::bigint % 100"}');
is(wait_job('j191'), 'running', 'j191 caught up');
is(psql("SELECT count(*) || '|' || sum(n) FROM t191_out"), '100|' . ($msgs * $per), 'every output counted once');
my $pid = worker_pid('j191');
open(my $fh, '<', "/proc/$pid/status") or die "no status of $pid: $!";
my ($hwm) = map { /^VmHWM:\s+(\d+)/ ? $1 : () } <$fh>;
close $fh;
diag("worker peak RSS: $hwm kB for $per outputs a message");
cmp_ok($hwm, '<', 300 * 1024, "the worker's peak memory stays within one message's outputs (VmHWM $hwm kB)");
psql("SELECT mailer.drop_job('j191')");
done_testing();
