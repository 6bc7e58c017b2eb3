# The Pulsar sink publishes each record exactly once, whatever step of its
# protocol a crash interrupts (issue 18; docs/ARCHITECTURE.md, "The Pulsar
# sink", has the table of steps). A passthrough job from a 2-partition
# Pulsar topic to a topic that is not partitioned. For each test point in
# turn (before the checkpoint commits, after it and before the send, after
# the first page of an epoch is acknowledged and before the rest is sent,
# after every acknowledgement and before the progress row, after the
# progress row), the job is stopped, a batch of 2500 messages produced,
# the point held, the job started (its first epoch holds the whole batch,
# more than a page of 1000), the worker killed there (SIGKILL: the server
# reinitializes) and released; then the output topic, read whole, must
# hold each input message once. Then the same with an immediate server
# stop mid-send, and restore_job to an epoch whose records the broker had
# and whose progress the crash lost: the older generation's producer
# finishes them (all dropped as duplicates) before the new one starts.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();
fresh_extension();

my $in = 'public/default/' . unique_name('t200l_in');
my $out = 'public/default/' . unique_name('t200l_out');
pulsar('create-topic', $in, 2);
pulsar('create-topic', $out, 0);

my $BATCH = 2500;
my $produced = 0;
sub produce { psink_produce($in, \$produced, @_) }
sub check_output { psink_check($out, $produced, @_) }

# What the topic holds now.
sub topic_count { return pulsar_entries($out) }

sub restarted
{
	my ($pid) = @_;
	wait_until('the server to restart after the crash', sub {
		my $now = eval { job_worker_pid('j200l') };
		return defined $now && $now != $pid;
	}, 120);
}

psink_passthrough('j200l', $in, $out, interval => '3 seconds');
wait_job_running('j200l');
produce(100);
psink_wait_published('j200l', $produced);
check_output('before any crash');

my @rounds = ((map { [ $_, 'kill' ] } qw(kafka_sink_after_outbox checkpoint_after_commit
  pulsar_sink_mid_send pulsar_sink_after_acks pulsar_sink_after_progress)),
  [ 'pulsar_sink_mid_send', 'immediate' ]);
for my $r (@rounds)
{
	my ($point, $how) = @$r;
	my $what = "$point ($how)";
	is(psql("SELECT mailer.stop_job('j200l', '1 minute')"), 'stopped', "$what: stopped for the batch");
	my $before = $produced;
	produce($BATCH);
	my $from = test_point_hold($point);
	psql("SELECT mailer.start_job('j200l')");
	my $pid = test_point_wait_reached($point, $from, 120);
	my $held = topic_count();
	if ($point eq 'pulsar_sink_mid_send')
	{
		ok($held > $before && $held < $produced, "$what: held with part of the epoch in the topic ($held of $produced)");
	}
	elsif ($point =~ /after_acks|after_progress/)
	{
		ok($held > $before, "$what: held with the epoch in the topic ($held of $produced)");
	}
	else
	{
		is($held, $before, "$what: held with none of the batch in the topic");
	}
	if ($how eq 'kill')
	{
		ok(kill('KILL', $pid) == 1, "$what: SIGKILL of the worker ($pid)");
	}
	else
	{
		pg_service('crash');
		pg_service('start');
	}
	restarted($pid);
	test_point_release();
	psink_wait_published('j200l', $produced, 180);
	check_output("after $what");
}

# restore_job to an epoch whose records the broker holds, with the
# progress row behind it: kill after the acknowledgements, hold the
# restarted launcher before it starts the next worker, stop, restore to
# the newest epoch.
{
	my $what = 'restore_job after a kill between acknowledgements and progress';
	# Held before the batch: the running worker would send a batch it read
	# before the reload reached it without stopping at the point.
	my $from = test_point_hold('pulsar_sink_after_acks', 'launcher_before_start');
	produce(500);
	my $pid = test_point_wait_reached('pulsar_sink_after_acks', $from, 120);
	ok(kill('KILL', $pid) == 1, "$what: SIGKILL of the worker ($pid)");
	test_point_wait_reached('launcher_before_start', $from, 120);
	is(psql("SELECT mailer.stop_job('j200l', '1 minute')"), 'stopped', "$what: stopped");
	test_point_release();
	my $epoch = psql("SELECT max(epoch) FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) WHERE j.name = 'j200l'");
	cmp_ok(psink_row('j200l')->{pending_records}, '>', 0, "$what: the outbox still holds epoch $epoch");
	psql("SELECT mailer.restore_job('j200l', $epoch)");
	is(psink_row('j200l')->{generation}, '2', "$what: a new generation");
	my $start = pg_log_size();
	psql("SELECT mailer.start_job('j200l')");
	psink_wait_published('j200l', $produced, 180);
	check_output($what);
	like(pg_log_since($start), qr/the broker already held (\d+) of the \1 records sent again/,
		"$what: the older generation's producer sent the kept epoch again, all of it dropped");
	is(psql("SELECT sequence_generation FROM mailer.kafka_sink_progress"), '2',
		"$what: the new generation's producer numbers from now on");
	produce(100);
	psink_wait_published('j200l', $produced, 180);
	check_output("$what, then a batch of the new generation");
}

psql("SELECT mailer.drop_job('j200l')");
done_testing();
