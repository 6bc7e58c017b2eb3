# Stops, restarts and rewinds of parallel jobs at barrier cuts (issue 17,
# item 5, after the hostile review): a job that checkpoints only at cuts
# takes no checkpoint between cuts however its subtasks are stopped.
#
# - A SIGTERM to subtask 1 alone between cuts ends the run (subtask 0
#   decides, as for any parallel job) without an epoch, and the launcher
#   starts the job again: the last checkpoint is still the one at the last
#   cut.
# - A server restart between cuts (every subtask gets a SIGTERM, in
#   whatever order) takes no checkpoint either.
# - Six cuts in a row learned of late rewind the whole job six times: it
#   stays running, counts no restart, and has a checkpoint at each cut and
#   none between (a subtask of the run that ended must not ask the next
#   run for a last epoch).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use Test::More;

my $fresh = bt_fresh('t175', 6);
my $topic = $fresh->{topics}[0];
my ($bt, $group) = @$fresh{qw(barrier group)};
my %job = (t175_p2 => 2, t175_p3 => 3);
for my $j (sort keys %job)
{
	totals_sink($j);
	my $spec = totals_spec($topic, $j, backend => ($job{$j} == 2 ? 'memory' : 'rocksdb'), start => 'earliest',
		interval => '200 milliseconds', source => $fresh->{source});
	$spec =~ s/^\{/{"parallelism": $job{$j},/;
	psql("SELECT mailer.create_job('$j', \$\$$spec\$\$)");
}
my @jobs = sort keys %job;
my $n = 0;

# Orders $n+1.. into the topic; every job has read them.
sub produce_and_read
{
	my ($count) = @_;
	kcat_produce($topic, bt_order_lines($n + 1, $n + $count, 60));
	$n += $count;
	for my $j (@jobs)
	{
		wait_until("$j to read $n orders", sub {
			psql("SELECT sum(position) FROM mailer.partition_metrics WHERE name = '$j' AND topic = '$topic'") >= $n });
	}
}

produce_and_read(400);
bt_cut_at_ends($bt, $group, 1, [$topic]);
wait_cut_checkpoint($_, 1) for @jobs;
produce_and_read(400);

# SIGTERM to subtask 1 of t175_p2 between cuts.
my $sub0 = psql("SELECT pid FROM mailer.subtasks WHERE name = 't175_p2' AND subtask = 0");
my $sub1 = psql("SELECT pid FROM mailer.subtasks WHERE name = 't175_p2' AND subtask = 1");
like($sub1, qr/^\d+$/, 't175_p2 has a subtask 1');
psql("SELECT pg_terminate_backend($sub1)");
wait_until('t175_p2 to run again', sub {
	psql("SELECT count(*) FROM mailer.subtasks WHERE name = 't175_p2' AND pid IS NOT NULL AND pid NOT IN ($sub0, $sub1)") == 2 });
wait_job_running('t175_p2');
is(cut_epochs('t175_p2'), '1', 't175_p2: no checkpoint taken when a SIGTERM to subtask 1 ended the run between cuts');

# A server restart between cuts.
produce_and_read(300);
my $launcher = launcher_pid();
pg_service('restart');
wait_server_ready(not_launcher => $launcher);
wait_job_running($_) for @jobs;
is(cut_epochs($_), '1', "$_: no checkpoint taken by a server restart between cuts") for @jobs;

# Six cuts learned of late, one after another.
my %rewinds = map { $_ => job_metric($_, 'cut_rewinds') } @jobs;
my %restarts = map { $_ => job_info($_)->{restarts} } @jobs;
for my $cut (2 .. 7)
{
	produce_and_read(240);
	my $m = bt_markers_at_ends([$topic])->{$topic};
	produce_and_read(60);
	bt_cut($bt, $group, $cut, { $topic => $m });
	wait_cut_checkpoint($_, $cut) for @jobs;
}
for my $j (@jobs)
{
	my $info = job_info($j);
	is("$info->{state} " . ($info->{restarts} - $restarts{$j}), 'running 0', "$j: running after the rewinds, none counted as a restart");
	is(cut_epochs($j), join(',', 1 .. 7), "$j: a checkpoint at each cut, none between");
	cmp_ok(job_metric($j, 'cut_rewinds') - $rewinds{$j}, '>=', 6, "$j: each late cut taken by a rewind");
}

bt_load_records($topic, 't175_rec');
for my $j (@jobs)
{
	totals_check('t175_rec_orders', $j, "$j at cut 7 equals the GROUP BY below it",
		"\"offset\" < (SELECT (p.value)::bigint FROM mailer.checkpoints c JOIN mailer.job jj USING (job_id), "
		  . "jsonb_each_text(c.positions->'$topic') p WHERE jj.name = '$j' AND c.cut_epoch = 7 "
		  . "AND p.key::int = t175_rec_orders.partition)");
}

psql("SELECT mailer.drop_job('$_')") for @jobs;
kafka('delete-topic', $_) for $topic, $bt;
done_testing();
