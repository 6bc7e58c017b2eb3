# Positions the broker no longer has are reported, never skipped in
# silence (README, "Reading Apache Pulsar"):
#  - retention deletes the ledger a slow job reads, and the job is stopped,
#    or its worker killed, as soon as it reads on from the next ledger: the
#    loss is reported (WARNING, last_error) all the same, counted in
#    offsets_skipped when the ledger's length was known, and the rows are
#    exact through the restart (the review's finding B: never reported);
#  - the same on a topic of 130 ledgers, whose internalStats is longer than
#    8 kB (finding C: never reported);
#  - a stored position whose ledger id is past every ledger of the
#    partition (another cluster's): the job fails loudly, restarts counted,
#    and wait_job does not say it is done (finding D: every new message
#    dropped as already read, wait_job satisfied).
use strict;
use warnings;
use FindBin;
use MIME::Base64 ();
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();
my $url = pulsar_url();
my $N = 6000;
fresh_extension();
psql('DROP TABLE IF EXISTS r193');
psql('CREATE TABLE r193 (job text, i int)');

# A topic that nothing holds: no retention, no deduplication (whose cursor
# would hold its ledgers).
sub bare_topic
{
	my ($prefix) = @_;
	my $topic = 'public/default/' . unique_name($prefix);
	pulsar('create-topic', $topic, 0);
	pulsar('admin', 'POST', "/admin/v2/persistent/$topic/deduplicationEnabled", 'false');
	pulsar('admin', 'POST', "/admin/v2/persistent/$topic/retention", '{"retentionTimeInMinutes":0,"retentionSizeInMB":0}');
	sleep 2;	# topic policies apply asynchronously
	return $topic;
}

# A job reading $topic into r193, slowly (2 ms a message) unless $fast.
sub slow_job
{
	my ($job, $topic, $fast) = @_;
	my $i = $fast ? "(value->>'i')::int" : "(value->>'i')::int + 0 * length(pg_sleep(0.002)::text)";
	psql(qq{SELECT mailer.create_job('$job', \$\${
	  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$topic"},
	  "steps": [{"map": {"job": "'$job'", "i": "$i"}}],
	  "sink": {"type": "table", "table": "r193", "mode": "append"}, "state": {"backend": "memory"},
	  "checkpoint": {"interval": "300 milliseconds"}
	}\$\$)});
}

my $report = qr/ledger \d+ of the job's position \d+:\d+ was deleted \(retention\) before the job read on; messages after it, up to ledger \d+, (?:were deleted unread: at least (\d+) entries|may have been deleted unread: how many is not known)/;

sub warnings_about
{
	my ($topic, $from) = @_;
	my @w = pg_log_since($from) =~ /WARNING:.*partition 0 of Pulsar topic "persistent:\/\/\Q$topic\E": ledger \d+ of the job's position/g;
	return scalar @w;
}

# B: stop, or SIGKILL, right after the reader's switch to the next ledger.
for my $mode ('stop', 'kill')
{
	my $job = "b193_$mode";
	my $topic = bare_topic("t193$mode");
	pulsar_java('BatchProduce', "persistent://$topic", 1, $N, 1);
	pulsar('admin', 'PUT', "/admin/v2/persistent/$topic/unload");
	my $log = pg_log_size();
	slow_job($job, $topic);
	wait_until("$job to read some of the first ledger", sub { psql("SELECT count(*) FROM r193 WHERE job = '$job'") >= 300 }, 60);
	pulsar('admin', 'POST', "/admin/v2/persistent/$topic/trim");
	pulsar_java('BatchProduce', "persistent://$topic", 100001, 200, 1);
	wait_until("$job to read on from the next ledger", sub {
		psql("SELECT count(*) FROM r193 WHERE job = '$job' AND i > 100000") > 0;
	}, 60);
	# The switch was checked before its first message was handed out.
	my $error = psql("SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = '$job'");
	my $skipped = psql("SELECT sum(offsets_skipped) FROM mailer.partition_metrics WHERE name = '$job'");
	if ($mode eq 'stop')
	{
		is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$mode: stopped right after the switch");
		psql("SELECT mailer.start_job('$job')");
	}
	else
	{
		my $pid = worker_pid($job);
		ok($pid && kill('KILL', $pid) == 1, "$mode: SIGKILL of the worker right after the switch");
		wait_until("$job to run again", sub { my $p = worker_pid($job); $p && $p != $pid }, 60);
	}
	wait_job_running($job);
	is(psql("SELECT mailer.wait_job('$job', '1 minute')"), 'running', "$mode: read on after the restart");
	my ($old, $new, $distinct) = split /\|/, psql("SELECT count(*) FILTER (WHERE i <= $N), count(*) FILTER (WHERE i > 100000), count(DISTINCT i) FROM r193 WHERE job = '$job'");
	cmp_ok($old, '<', $N, "$mode: retention deleted messages under the reader ($old of $N read)");
	is($new, 200, "$mode: the next ledger read whole");
	is($distinct, $old + $new, "$mode: no row twice");
	like($error, qr/partition 0 of Pulsar topic "persistent:\/\/\Q$topic\E": $report/,
		"$mode: last_error reported the loss before the stop: $error");
	is(warnings_about($topic, $log), 1, "$mode: one WARNING in the server log, none again after the restart");
	# I: the first ledger's length was noted when the job entered it, so the loss is counted.
	my ($lost) = $error =~ /at least (\d+) entries/;
	is($lost, $N - $old, "$mode: the report counts the entries lost");
	is($skipped, $N - $old, "$mode: offsets_skipped counts them");
	psql("SELECT mailer.drop_job('$job')");
}

# C: 130 ledgers (internalStats ~11 kB), the first one deleted under the
# reader.
{
	my $job = 'c193';
	my $topic = bare_topic('t193c');
	# A subscription at the start holds every ledger while the 130 roll
	# (the broker's periodic trim would delete them, the first one too);
	# moved to the second ledger, it lets the trim delete the first only.
	pulsar('admin', 'PUT', "/admin/v2/persistent/$topic/subscription/hold", '{"ledgerId":-1,"entryId":-1,"partitionIndex":-1}');
	pulsar_java('BatchProduce', "persistent://$topic", 1, $N, 1);
	for my $l (1 .. 130)
	{
		pulsar('admin', 'PUT', "/admin/v2/persistent/$topic/unload");
		pt_produce($topic, 'c193', 100000 + $l - 1, [ '{"i":' . (100000 + $l) . '}' ]);
	}
	my $stats = pulsar('stats', $topic);
	my @ledgers = $stats =~ /"ledgerId":(\d+)/g;
	cmp_ok(length($stats), '>', 8192, sprintf('internalStats is %d bytes, %d ledgers', length($stats), scalar @ledgers));
	my $log = pg_log_size();
	slow_job($job, $topic);
	wait_until("$job to read some of the first ledger", sub { psql("SELECT count(*) FROM r193 WHERE job = '$job'") >= 300 }, 60);
	my ($second) = $stats =~ /"ledgers":\[\{"ledgerId":\d+[^}]*\},\{"ledgerId":(\d+)/;
	pulsar('admin', 'POST', "/admin/v2/persistent/$topic/subscription/hold/resetcursor", qq({"ledgerId":$second,"entryId":0,"partitionIndex":-1}));
	pulsar('admin', 'POST', "/admin/v2/persistent/$topic/trim");
	wait_until("$job to read the 130 later ledgers", sub {
		psql("SELECT count(*) FROM r193 WHERE job = '$job' AND i > 100000") >= 130;
	}, 120);
	my $old = psql("SELECT count(*) FROM r193 WHERE job = '$job' AND i <= $N");
	cmp_ok($old, '<', $N, "many ledgers: retention deleted messages under the reader ($old of $N read)");
	like(psql("SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = '$job'"),
		qr/partition 0 of Pulsar topic "persistent:\/\/\Q$topic\E": $report/, 'many ledgers: last_error reports the loss');
	is(warnings_about($topic, $log), 1, 'many ledgers: a WARNING in the server log');
	psql("SELECT mailer.drop_job('$job')");
}

# D: the checkpoint's position moved to ledger 10^9 (what another cluster's
# id looks like here), then new messages (seen at the first one), or none
# (seen when the idle reader's position is looked up at a refresh).
for my $mode ('messages', 'idle')
{
	my $job = "d193_$mode";
	my $topic = 'public/default/' . unique_name('t193d');
	pulsar('create-topic', $topic, 0);
	pulsar_produce_lines($topic, join('', map { qq({"i":$_}\n) } 1 .. 5));
	slow_job($job, $topic, 1);
	wait_job_running($job);
	is(psql("SELECT mailer.wait_job('$job', '1 minute')"), 'running', "foreign, $mode: the first 5 read");
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "foreign, $mode: stopped");
	# A message id: field 1 (ledger) 10^9, field 2 (entry) 4, protobuf varints.
	my $id = MIME::Base64::encode_base64(pack('C', 1 << 3) . varint(1_000_000_000) . pack('C', 2 << 3) . varint(4), '');
	psql("UPDATE mailer.checkpoints c SET positions = jsonb_build_object('persistent://$topic', jsonb_build_object('0', '$id')) "
		  . "FROM mailer.job j WHERE j.job_id = c.job_id AND j.name = '$job'");
	psql("SELECT mailer.start_job('$job')");
	pulsar_produce_lines($topic, join('', map { qq({"i":$_}\n) } 6 .. 10)) if $mode eq 'messages';
	my $info = wait_job_state($job, qr/^failed$/, 60);
	like($info->{last_error},
		qr/partition 0 of Pulsar topic "persistent:\/\/\Q$topic\E" ends at (?:message \d+:\d+|ledger \d+ \(its newest\)), before the job's position 1000000000:4/,
		"foreign, $mode: the job failed, last_error names the partition, its end and the position");
	like($info->{last_error}, qr/mailer\.restore_job.*drop the job and create it again/, "foreign, $mode: last_error says how to go on");
	is($info->{restarts}, 0, "foreign, $mode: failed, not retried (as a Kafka position past the log's end)");
	isnt(psql("SELECT mailer.wait_job('$job', '10 s')"), 'running', "foreign, $mode: wait_job does not report success");
	is(psql("SELECT count(*) FROM r193 WHERE job = '$job'"), 5, "foreign, $mode: nothing read past the foreign position");
	psql("SELECT mailer.drop_job('$job')");
}

sub varint
{
	my ($v) = @_;
	my $b = '';
	do
	{
		my $c = $v & 0x7f;
		$v >>= 7;
		$b .= pack('C', $c | ($v ? 0x80 : 0));
	} while ($v);
	return $b;
}

done_testing();
