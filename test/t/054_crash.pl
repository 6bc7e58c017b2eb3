# Crashes in the middle of open windows, on both state backends: tumbling
# and session windows over a 3-partition topic with out-of-order input, the
# checkpoint interval long enough that the records read before each crash
# are not committed.  First a SIGKILL of one job's worker (the server
# reinitializes, every worker dies), then an immediate shutdown of the
# server.  Each time the jobs resume from their last checkpoint (state,
# watermark, positions) and replay; in the end the sink holds exactly what
# plain SQL computes over the events: nothing lost, nothing counted twice.
# On a server of its own (MailerCluster).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use Test::More;

mailer_node();
fresh_extension();

my $topic = unique_name('t054');
kafka('create-topic', $topic, 3);

my @events = random_events(seed => 54, partitions => 3, count => 90, step => 0.25, spread => 29,
	keys => [qw(a b c d e)], amount => sub { sprintf('%.1f', ($_[0] % 1000) / 10) });
events_table('ev054', \@events);
# Each partition's events in three parts.
my @part;
for my $third (0 .. 2)
{
	$part[$third] = [ map { my $p = $_; my @e = grep { $_->{p} == $p } @events; @e[ $third * 30 .. $third * 30 + 29 ] } 0 .. 2 ];
}

window_tables(qw(tumbling_rocks tumbling_mem sessions_rocks sessions_mem));

my $filter = q[{"filter": "value->>'k' <> 'end'"}];
my %jobs = (
	tumbling_rocks => [ 'rocksdb', '{"type": "tumbling", "size": "10 seconds"}' ],
	tumbling_mem   => [ 'memory',  '{"type": "tumbling", "size": "10 seconds"}' ],
	sessions_rocks => [ 'rocksdb', '{"type": "session", "gap": "4 seconds"}' ],
	sessions_mem   => [ 'memory',  '{"type": "session", "gap": "4 seconds"}' ]);
my @jobs = sort keys %jobs;
for my $job (@jobs)
{
	create_window_job($job, $topic, table => $job, backend => $jobs{$job}[0], window => $jobs{$job}[1],
		extra_steps => $filter, interval => '1 hour');
}

sub records_in_all { records_in_of_all(@_, @jobs) }

# The first third, committed by a stop (its final checkpoint); the windows
# that ended are written, the later ones are open.
produce_events($topic, $part[0]);
records_in_all(90, 'first third');
for my $job (@jobs)
{
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job stopped after the first third");
	psql("SELECT mailer.start_job('$job')");
}
cmp_ok(psql('SELECT count(*) FROM tumbling_rocks'), '>', 0, 'some windows written before the crashes');
is(committed_records($_), 90, "$_: the first third committed") for @jobs;

# The second third, read but not committed, then SIGKILL of one worker.
produce_events($topic, $part[1]);
records_in_all(180, 'second third');
is(committed_records($_), 90, "$_: the second third is not committed") for @jobs;
kill_worker('sessions_mem');
records_in_all(180, 'second third replayed');
is(committed_records($_), 90, "$_: replayed, not committed yet") for @jobs;

# The last third, read but not committed, then an immediate shutdown.
produce_events($topic, $part[2]);
records_in_all(270, 'last third');
pg_service('crash');
pg_service('start');
records_in_all(270, 'last third replayed');

# End markers fire every window; the final checkpoint of stop_job commits.
my $end = 100000;
produce_events($topic, [ map { { p => $_, k => 'end', t => $end } } 0 .. 2 ]);
records_in_all(273, 'end markers');
for my $job (@jobs)
{
	wait_watermark($job, ev_time($end - 5));
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job stopped");
	is(committed_records($job), 273, "$job: every record committed, once");
	is(job_metric($job, 'records_late'), '0', "$job: nothing late");
	is(job_metric($job, 'records_filtered'), '3', "$job: the 3 end markers filtered, once");
}
is(psql('SELECT count(*) FROM mailer.dead_letters'), '0', 'no dead letters');

my $want_tumbling = want_tumbling('ev054', '10 seconds');
my $want_sessions = want_sessions('ev054', '4 seconds');
for my $job (@jobs)
{
	same_rows("SELECT k, window_start, window_end, n, total FROM $job",
		$job =~ /^tumbling/ ? $want_tumbling : $want_sessions,
		"$job: exact results after two crashes");
	is(psql("SELECT sum(n) FROM $job"), scalar(@events), "$job: every event counted once");
}
cmp_ok(psql('SELECT count(*) FROM sessions_mem'), '>=', 20, 'many sessions');

done_testing();
