# Timers share a bucket per granule of due time (65.5 ms), so a watermark
# step can fall inside a granule: the timers due by then fire, the later
# ones of the same granule wait for the step that reaches them, and a
# timer set again inside a granule already part taken fires too.  Sessions
# of a 3 ms gap, on events 2 ms apart (every session ends on an odd
# millisecond, every watermark is an even one), checked after each step
# against plain SQL: exactly the sessions that ended by the job's
# watermark are in the sink, none early, none missing.  Key x's session
# is extended after its timer was set, so at its first due time the timer
# is set again 2 ms later, in the granule being taken.  Both backends.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my $topic = unique_name('t177');
kafka('create-topic', $topic, 1);
window_tables(qw(granules_r granules_m));
my %jobs = (granules_r => 'rocksdb', granules_m => 'memory');
for my $job (sort keys %jobs)
{
	create_window_job($job, $topic, table => $job, backend => $jobs{$job}, ooo => '0 seconds',
		window => '{"type": "session", "gap": "3 milliseconds"}');
}

# Ten keys, each every 20 ms (a session per event); t in ms after 1000 s.
sub keyed { my ($from, $to) = @_; return map { { k => 'k' . ($_ / 2 % 10), t => $_ } } grep { $_ % 2 == 0 } $from .. $to }
my @steps = (
	[ keyed(0, 20), { k => 'x', t => 22 } ],
	[ { k => 'x', t => 24 } ],				# x's session now ends at 27; its timer is at 25
	[ { k => 'k3', t => 26 } ],				# x's timer due: set again at 27
	[ keyed(28, 80) ],
	[ { k => 'k2', t => 84 } ],
	[ { k => 'k3', t => 86 } ],
	[ keyed(88, 130) ],
	[ { k => 'end', t => 400 } ],			# every session but end's
);

my @produced;
my $step = 0;
for my $events (@steps)
{
	$step++;
	my @batch = map { { p => 0, k => $_->{k}, t => 1000 + $_->{t} / 1000, a => $_->{t} } } @$events;
	push @produced, @batch;
	events_table('ev177', \@produced);
	produce_events($topic, \@batch);
	for my $job (sort keys %jobs)
	{
		wait_watermark($job, ev_time($batch[-1]{t}));
		is(wait_job($job), 'running', "$job: step $step committed");
		my $wm = psql("SELECT watermark FROM mailer.metrics WHERE name = '$job'");
		same_rows("SELECT k, window_start, window_end, n, total FROM $job",
			"SELECT * FROM (" . want_sessions('ev177', '3 milliseconds') . ") s WHERE window_end <= '$wm'",
			"$job: step $step, the sessions ended by the watermark ($wm), no other");
	}
}
is(psql("SELECT count(*) FROM granules_r WHERE k = 'x'"), '1', 'x: one session, fired at its extended end');
is(psql("SELECT window_end - window_start FROM granules_r WHERE k = 'x'"), '00:00:00.005', "x's session: 22 ms to 27 ms");
cmp_ok(psql('SELECT count(*) FROM granules_r'), '>=', 60, 'all but the last session fired');
is(psql('SELECT count(*) FROM mailer.dead_letters'), '0', 'no dead letters');
is(job_metric($_, 'records_late'), '0', "$_: no record late") for sort keys %jobs;

done_testing();
