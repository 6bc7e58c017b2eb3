# A job held at a barrier cut survives a kill and a crash (issue 17): the
# keyed totals jobs (both state backends) hold at cut 1, first waiting for
# records (partition 0's marker is past the topic's end) when a worker is
# killed with SIGKILL, then with every named partition at its marker (test
# point cut_reached) when the server stops in immediate mode.  After each,
# they hold at cut 1 again, and their first checkpoint is at cut 1 with its
# markers as positions and the GROUP BY below them as their tables.
# Malformed barrier records (a key of another version, a value of another
# version, a truncated value, an unknown kind, a truncated key) are counted
# and logged as WARNINGs, a tombstone and another group's cut are passed
# over, and the jobs keep running and align on the next valid cut.  A
# SIGKILL as a worker is about to go back to its last checkpoint to take a
# cut it read past (test point cut_rewind) loses nothing either.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use MailerKafkaSinkTest qw(ks_hold ks_release);
use Test::More;

my $fresh = bt_fresh('t172', 2);
my ($bt, $group) = @$fresh{qw(barrier group)};
my $topic = $fresh->{topics}[0];
my %job = %{ backend_jobs($topic, 't172', start => 'earliest', interval => '200 milliseconds',
	source => $fresh->{source}) };
my @jobs = map { $job{$_} } @BACKENDS;
test_point_release();
END { eval { test_point_release() } }

kcat_produce($topic, bt_order_lines(1, 400, 100));
my $end = bt_ends($topic);
my %m1 = (0 => $end->{0} + 100, 1 => $end->{1});
bt_cut($bt, $group, 1, { $topic => \%m1 });
wait_holding($_, 1) for @jobs;
for my $j (@jobs)
{
	is(cuts_of($j), '1:holding:-', "$j: mailer.cuts shows it holding at cut 1");
	is(cut_epochs($j), '', "$j: no checkpoint while it waits for partition 0's marker");
}

# SIGKILL of a worker while it waits: the postmaster restarts every process.
my $victim = $job{rocksdb};
my $pid = worker_pid($victim);
my $launcher = launcher_pid();
is(kill('KILL', $pid), 1, "SIGKILL to the worker of $victim held at cut 1");
wait_server_ready(not_launcher => $launcher);
wait_holding($victim, 1, $pid);
wait_holding($job{memory}, 1);
is(cut_epochs($_), '', "$_: after the kill, still no checkpoint, holding at cut 1") for @jobs;

# The records up to partition 0's marker and past both markers; each job
# stops at cut_reached, before its checkpoint.
my $from = ks_hold('cut_reached');
kcat_produce($topic, bt_order_lines(401, 550, 100), partition => 0);
kcat_produce($topic, bt_order_lines(551, 600, 100), partition => 1);
wait_reached_by_both($from);
is(cut_epochs($_), '', "$_: at cut_reached, not checkpointed yet") for @jobs;

# An immediate stop there; after the restart they reach the cut again.
pg_service('crash');
$from = pg_log_size();
pg_service('start');
wait_reached_by_both($from);
release_and_wait($from, 1);
exact_at_cut(1, \%m1, '1', 'after the kill and the crash');
cmp_ok(job_metric($_, 'cut_held_seconds'), '>', 0, "$_: the time held at the cut is counted") for @jobs;

# Malformed records, and records to pass over, then a valid cut 2.
$from = pg_log_size();
my $far = { $topic => { 0 => 1_000_000, 1 => 1_000_000 } };	# would hold the jobs, if taken for a cut
my $value = bt_cut_value($far);
bt_raw($bt, bt_key($group, 2, version => 1), $value);	# key version 1
bt_raw($bt, bt_key($group, 91), bt_cut_value($far, version => 7));			# value version 7
bt_raw($bt, bt_key($group, 92), substr($value, 0, length($value) - 6));		# value cut short in a marker
bt_raw($bt, bt_key($group, 93, kind => 9), $value);							# unknown kind
bt_raw($bt, substr(bt_key($group, 94), 0, 7), $value);						# key cut short in the group
my $MALFORMED = 5;
bt_raw($bt, bt_key($group, 95), undef);										# a tombstone
bt_raw($bt, bt_key("$group-other", 2), $value);								# another group's cut

kcat_produce($topic, bt_order_lines(601, 900, 100));
my $m2 = bt_cut_at_ends($bt, $group, 2, [$topic])->{$topic};
wait_cut_checkpoint($_, 2) for @jobs;
exact_at_cut(2, $m2, '1,2', 'after the malformed records');
my $log = pg_log_since($from);
my @warnings = grep { /WARNING/ && /barrier/i } split /\n/, $log;
cmp_ok(scalar @warnings, '>=', $MALFORMED, 'the malformed barrier records are logged as WARNINGs naming the barrier topic')
  or diag(substr($log, 0, 3000));
note($warnings[0]) if @warnings;
for my $j (@jobs)
{
	is(job_metric($j, 'cut_records_malformed'), $MALFORMED,
		"$j: cut_records_malformed counts the $MALFORMED malformed records, not the tombstone or the other group");
	is(job_info($j)->{state}, 'running', "$j: still running");
	is(cuts_of($j), '1:checkpoint:r 2:checkpoint:r', "$j: mailer.cuts shows cuts 1 and 2 only");
}

# Cut 3 learned of after both jobs read past its markers: a SIGKILL at
# cut_rewind, as a worker is about to go back to its checkpoint at cut 2 to
# take it.  The restarted workers take it from there.
kcat_produce($topic, bt_order_lines(901, 1200, 100));
my $m3 = bt_ends($topic);
kcat_produce($topic, bt_order_lines(1201, 1300, 100));
wait_read_past($_, $topic, $m3) for @jobs;
$from = ks_hold('cut_rewind');
bt_cut($bt, $group, 3, { $topic => $m3 });
$pid = test_point_wait_reached('cut_rewind', $from);
ok(grep({ worker_pid($_) == $pid } @jobs), 'a worker is at cut_rewind, going back for cut 3');
$launcher = launcher_pid();
is(kill('KILL', $pid), 1, 'SIGKILL to it');
wait_server_ready(not_launcher => $launcher);
release_and_wait($from, 3);
exact_at_cut(3, $m3, '1,2,3', 'after the kill at cut_rewind');

psql("SELECT mailer.drop_job('$_')") for @jobs;
kafka('delete-topic', $_) for $topic, $bt;
done_testing();

# Wait until both jobs' workers logged reaching cut_reached since log
# position $from.
sub wait_reached_by_both
{
	my ($from) = @_;
	wait_until('both jobs at test point cut_reached', sub {
		my %reached = map { $_ => 1 } pg_log_since($from) =~ /\[(\d+)\] [^\n]*mailer test point cut_reached reached/g;
		return !grep { !$reached{ worker_pid($_) } } @jobs;
	}, 60);
}

# Release the test points held since log position $from and wait until
# both jobs checkpoint at cut $cut (releasing any worker that missed it).
sub release_and_wait
{
	my ($from, $cut) = @_;
	ks_release($from);
	for my $j (@jobs)
	{
		wait_until("$j to checkpoint at cut $cut", sub {
			MailerKafkaSinkTest::ks_unstick();
			return cut_checkpoint($j, $cut) ne '';
		}, 60);
	}
}

# Both jobs' checkpoints are at the cuts $epochs ("1,2"), the one at cut
# $cut has its markers as positions, and their tables are the GROUP BY
# below them.
sub exact_at_cut
{
	my ($cut, $markers, $epochs, $what) = @_;
	bt_load_records($topic, 't172_rec');
	for my $j (@jobs)
	{
		is(cut_epochs($j), $epochs, "$j: checkpoints at cuts $epochs, $what");
		cut_positions_ok($j, $cut, $topic, $markers);
		cut_totals_check('t172_rec', $j, $j, $cut, $topic, "$j at cut $cut, $what");
	}
}
