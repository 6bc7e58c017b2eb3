# The Pulsar source, exactly once, against a real Pulsar standalone
# (test/services/pulsar.sh): orders produced to a 4-partition topic, a keyed
# totals job (orders = count(*), total = sum(amount) per customer) killed
# with SIGKILL three times inside a checkpoint, with orders read past the
# last one (each a crash and restart of the server's backends), and the
# table compared with SQL's GROUP BY over exactly the orders produced. A second job over the same topic writes
# each record's fields (key, topic, partition, offset, timestamp,
# properties as headers). Then every bad field of the source's spec is
# refused with its SQLSTATE, JSON path and hint.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MIME::Base64 ();
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();

my $N = 8000;
my $CUSTOMERS = 400;
my $PARTS = 4;
my $url = pulsar_url();

fresh_extension();
my $name = unique_name('t182');
my $topic = "public/default/$name";
pulsar('create-topic', $topic, $PARTS);

orders_source('orders_182');
orders_insert('orders_182', 1, $N, $CUSTOMERS);

totals_sink('totals_182');
psql(qq{SELECT mailer.create_job('totals_182', \$\${
  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$topic", "format": "json"},
  "steps": [
    {"key_by": {"customer_id": "value->>'customer_id'"}},
    {"aggregate": {"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}}
  ],
  "sink": {"type": "table", "table": "totals_182"},
  "checkpoint": {"interval": "2 seconds"}
}\$\$)});

psql("DROP TABLE IF EXISTS fields_182, latest_182, later_182, bad_182, trim_182");
psql('CREATE TABLE fields_182 (key text, topic text, partition int, "offset" bigint, ts timestamptz, '
	  . 'headers jsonb, order_id bigint)');
psql(qq{SELECT mailer.create_job('fields_182', \$\${
  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$topic", "format": "json"},
  "steps": [{"map": {"ts": "timestamp", "order_id": "(value->>'order_id')::bigint"}}],
  "sink": {"type": "table", "table": "fields_182", "mode": "append"},
  "state": {"backend": "memory"}
}\$\$)});

# Four quarters, each produced while the job reads. Before each, the job
# has committed every earlier order (its checkpoint holds message ids
# inside the partitions). During each of the first three, the totals
# worker is held inside a checkpoint, before its commit, that covers
# orders read past the last one, and killed there with SIGKILL (the
# server's backends restart): it must resume after the stored ids, and
# replay exactly what it had not committed. The hold comes from a test
# point, not from timing: a fast machine can read and commit a whole
# quarter between two looks, a slow one none of it. A checkpoint with
# nothing new is let through to its commit and held again at the next, so
# none is missed.
my $q = $N / 4;
my $mid_stream_kills = 0;
for my $k (0 .. 3)
{
	wait_until("totals_182 to commit the first $k quarters", sub {
		committed_records('totals_182') >= $k * $q;
	}, 60);
	my ($from, $pid);
	if ($k < 3)
	{
		wait_job_running('totals_182');
		$pid = job_worker_pid('totals_182');
		$from = test_point_hold('checkpoint_after_ext_check');
	}
	my $running = orders_produce_start('orders_182', $topic, $k * $q + 1, ($k + 1) * $q, $PARTS,
		key => 'k182', property => 'src=t182');
	if ($k < 3)
	{
		my ($read, $committed);
		for (;;)
		{
			test_point_wait_reached('checkpoint_after_ext_check', $from, 60, $pid);
			$read = job_metric('totals_182', 'records_in');
			$committed = committed_records('totals_182');
			last if $read > $committed;
			die "totals_182 committed quarter " . ($k + 1) . " with no checkpoint held past its last\n"
			  if $committed >= ($k + 1) * $q;
			$from = test_point_hold('checkpoint_after_commit');
			test_point_wait_reached('checkpoint_after_commit', $from, 60, $pid);
			$from = test_point_hold('checkpoint_after_ext_check');
		}
		$mid_stream_kills++ if $committed > 0;
		ok(kill('KILL', $pid) == 1,
			"SIGKILL " . ($k + 1) . " of the totals worker in a checkpoint, $read orders read, $committed committed");
		wait_until('the server to restart after the crash', sub {
			my $now = eval { job_worker_pid('totals_182') };
			return defined $now && $now != $pid;
		}, 60);
		test_point_release();
	}
	orders_produce_finish($running);
}
cmp_ok($mid_stream_kills, '>=', 2,
	'at least 2 kills came after a checkpoint with message ids, with records read past it');

for my $job (qw(totals_182 fields_182))
{
	wait_job_running($job);
	is(psql("SELECT mailer.wait_job('$job', '2 minutes')"), 'running', "$job: wait_job returns, running");
}
totals_check('orders_182', 'totals_182', 'after 3 SIGKILLs');
is(job_metric('totals_182', 'records_in'), $N, 'records_in counts every order once');
is(psql("SELECT count(*), sum(records_in) FROM mailer.partition_metrics WHERE name = 'totals_182'"),
	"$PARTS|$N", 'partition_metrics: the 4 partitions, their records_in adding up to the orders');
is(psql("SELECT count(*) FROM mailer.dead_letters"), 0, 'no dead letters');

# The fields: each order once, the key, the topic as the spec names it,
# the partition it was produced to, offsets 0..n-1 per partition, the
# publish time, the property as a header.
is(psql("SELECT count(*), count(DISTINCT order_id) FROM fields_182"), "$N|$N", 'fields: each order once');
is(psql("SELECT count(*) FROM fields_182 WHERE key IS DISTINCT FROM 'k182' "
	  . "OR topic IS DISTINCT FROM 'persistent://$topic' OR partition IS DISTINCT FROM (order_id % $PARTS)::int "
	  . "OR headers IS DISTINCT FROM '{\"src\": \"t182\"}' "
	  . "OR ts NOT BETWEEN now() - interval '10 minutes' AND now() + interval '1 minute'"),
	0, 'fields: key, topic, partition, publish time and property header of every record');
is(psql("SELECT count(*) FROM (SELECT partition, min(\"offset\") AS lo, max(\"offset\") AS hi, count(*) AS n, "
	  . "bool_and(rank = \"offset\") AS ordered FROM (SELECT *, rank() OVER (PARTITION BY partition ORDER BY order_id) - 1 AS rank "
	  . "FROM fields_182) r GROUP BY partition) s WHERE lo = 0 AND hi = n - 1 AND ordered"),
	$PARTS, 'fields: offsets 0..n-1 per partition, in the order produced');

# Idle, the worker sleeps on its latch and the readers' sockets: it does
# not spin (under 0.2 s of CPU in 2 s; a spinning worker takes all 2).
{
	my $pid = job_worker_pid('totals_182');
	my $cpu = sub { open my $f, '<', "/proc/$pid/stat" or die "$pid: $!"; my @f = split ' ', (split /\) /, <$f>)[1]; return $f[11] + $f[12]; };
	my $before = $cpu->();
	sleep 2;
	cmp_ok($cpu->() - $before, '<', 20, 'idle, the worker takes no CPU to speak of (clock ticks in 2 s)');
}

# A restart resumes after the stored message ids: nothing read twice.
is(psql("SELECT mailer.stop_job('totals_182')"), 'stopped', 'stopped');
psql("SELECT mailer.start_job('totals_182')");
wait_job_running('totals_182');
is(psql("SELECT mailer.wait_job('totals_182', '2 minutes')"), 'running', 'running again');
totals_check('orders_182', 'totals_182', 'after a stop and start');
is(job_metric('totals_182', 'records_in'), $N, 'records_in unchanged by the restart');
like(psql("SELECT positions::text FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) "
	  . "WHERE j.name = 'totals_182' ORDER BY epoch DESC LIMIT 1"),
	qr/^\{"persistent:\/\/\Q$topic\E": \{"0": "[A-Za-z0-9+\/=]+", "1": "[A-Za-z0-9+\/=]+", "2": "[A-Za-z0-9+\/=]+", "3": "[A-Za-z0-9+\/=]+"\}\}$/,
	'the checkpoint holds a message id per partition');

# "start": "latest" reads only what is produced after the job started.
my $latest = unique_name('t182l');
pulsar('create-topic', "public/default/$latest", 2);
pulsar_produce_lines("public/default/$latest-partition-0", "old1\nold2\n");
psql('CREATE TABLE latest_182 (value text)');
psql(qq{SELECT mailer.create_job('latest_182', \$\${
  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://public/default/$latest",
             "format": "text", "start": "latest"},
  "steps": [],
  "sink": {"type": "table", "table": "latest_182", "mode": "append"}
}\$\$)});
wait_job_running('latest_182');
wait_until('latest_182 to pin its positions', sub { job_epoch('latest_182') > 0 }, 60);
pulsar_produce_lines("public/default/$latest-partition-$_", "new$_\n") for 0, 1;
is(psql("SELECT mailer.wait_job('latest_182', '1 minute')"), 'running', 'latest_182: wait_job');
is(psql("SELECT string_agg(value, ',' ORDER BY value) FROM latest_182"), 'new0,new1',
	'start latest: only the messages produced after the start');

# A topic that does not exist yet: the job waits, saying why, and reads
# it once it is created.
my $later = 'public/default/' . unique_name('t182w');
psql('CREATE TABLE later_182 (value text)');
psql(qq{SELECT mailer.create_job('later_182', \$\${
  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$later", "format": "text"},
  "steps": [],
  "sink": {"type": "table", "table": "later_182", "mode": "append"}
}\$\$)});
wait_for_sql('later_182 to wait for its topic',
	"SELECT state || ': ' || (last_error LIKE '%waiting for Pulsar: topic \"persistent://$later\": GET %: HTTP 404: %not found%') "
	  . "FROM mailer.jobs WHERE name = 'later_182'", 'waiting: true', 30);
pulsar('create-topic', $later, 2);
pulsar_produce_lines("$later-partition-1", "x\n");
is(psql("SELECT mailer.wait_job('later_182', '1 minute')"), 'running', 'later_182 runs once the topic exists');
is(psql('SELECT string_agg(value, \',\') FROM later_182'), 'x', 'and reads it');

# A position whose ledger retention deleted is reported, not skipped in
# silence: a namespace without retention or deduplication (whose cursor
# would keep the ledgers), a job that read "a" and stopped, "b" and "c"
# written to the same ledger, a new ledger (unload) with "d", and a trim
# that deletes the first ledger, "b" and "c" unread.
pulsar('admin', 'PUT', '/admin/v2/namespaces/public/trim182') unless pulsar('admin', 'GET', '/admin/v2/namespaces/public') =~ m{public/trim182};
pulsar('admin', 'POST', '/admin/v2/namespaces/public/trim182/retention', '{"retentionTimeInMinutes":0,"retentionSizeInMB":0}');
pulsar('admin', 'POST', '/admin/v2/namespaces/public/trim182/deduplication', 'false');
my $trim = 'public/trim182/' . unique_name('t182t');
pulsar('create-topic', $trim, 0);
pulsar_produce_lines($trim, "a\n");
psql('CREATE TABLE trim_182 (value text)');
psql(qq{SELECT mailer.create_job('trim_182', \$\${
  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$trim", "format": "text"},
  "steps": [],
  "sink": {"type": "table", "table": "trim_182", "mode": "append"}
}\$\$)});
wait_job_running('trim_182');
is(psql("SELECT mailer.wait_job('trim_182', '1 minute')"), 'running', 'trim_182 read "a"');
is(psql("SELECT mailer.stop_job('trim_182')"), 'stopped', 'trim_182 stopped');
pulsar_produce_lines($trim, "b\nc\n");
pulsar('admin', 'PUT', "/admin/v2/persistent/$trim/unload");
pulsar_produce_lines($trim, "d\n");
pulsar('admin', 'POST', "/admin/v2/persistent/$trim/trim");
wait_until('the trim to delete the first ledger', sub {
	my ($first) = pulsar('stats', $trim) =~ /"ledgers":\[\{"ledgerId":(\d+)/;
	my ($pos) = psql("SELECT positions::text FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) "
		  . "WHERE j.name = 'trim_182' ORDER BY epoch DESC LIMIT 1") =~ /"0": "([^"]+)"/;
	return 0 unless defined $first && defined $pos;
	# The id's first field: its ledger, a protobuf varint after the tag byte.
	my @b = unpack('C*', MIME::Base64::decode_base64($pos));
	my ($ledger, $shift) = (0, 0);
	for my $c (@b[ 1 .. $#b ])
	{
		$ledger |= ($c & 0x7f) << $shift;
		$shift += 7;
		last unless $c & 0x80;
	}
	return $ledger < $first;
}, 30);
psql("SELECT mailer.start_job('trim_182')");
wait_job_running('trim_182');
is(psql("SELECT mailer.wait_job('trim_182', '1 minute')"), 'running', 'trim_182 started again');
is(psql("SELECT string_agg(value, ',' ORDER BY value) FROM trim_182"), 'a,d',
	'after the trim: "b" and "c" are gone, "d" read');
like(psql("SELECT last_error FROM mailer.jobs WHERE name = 'trim_182'"),
	qr/partition 0 of Pulsar topic "persistent:\/\/\Q$trim\E": ledger \d+ of the job's position \d+:0 was deleted \(retention\) before the job read on; messages after it, up to ledger \d+, may have been deleted unread/,
	'last_error says the position\'s ledger was deleted, messages may be lost');

for my $job (qw(totals_182 fields_182 latest_182 later_182 trim_182))
{
	psql("SELECT mailer.drop_job('$job')");
}

# Spec validation: SQLSTATE, JSON path and hint for each bad field.
my $ok_source = qq("type": "pulsar", "service_url": "$url", "topic": "persistent://$topic");
my @bad = (
	[ qq("type": "pulsar", "topic": "persistent://$topic"), '22023', 'source.service_url', 'required field is missing' ],
	[ qq("type": "pulsar", "service_url": "$url"), '22023', 'source.topic', 'required field is missing' ],
	[ qq("type": "pulsar", "service_url": "pulsar://127.0.0.1:6650", "topic": "persistent://$topic"),
		'22023', 'source.service_url', 'is not an http:// or https:// URL' ],
	[ qq("type": "pulsar", "service_url": "wss://127.0.0.1:8443", "topic": "persistent://$topic"),
		'22023', 'source.service_url', 'is not an http:// or https:// URL' ],
	[ qq("type": "pulsar", "service_url": "https://127.0.0.1:8443/admin", "topic": "persistent://$topic"),
		'22023', 'source.service_url', 'give https://host:port and nothing after it' ],
	[ qq("type": "pulsar", "service_url": "http://127.0.0.1:8080/admin", "topic": "persistent://$topic"),
		'22023', 'source.service_url', 'nothing after it' ],
	[ qq("type": "pulsar", "service_url": "$url", "topic": "non-persistent://$topic"),
		'42602', 'source.topic', 'is not a persistent Pulsar topic' ],
	[ qq("type": "pulsar", "service_url": "$url", "topic": "persistent://public/$name"),
		'42602', 'source.topic', 'is not a Pulsar topic name' ],
	[ qq("type": "pulsar", "service_url": "$url", "topic": "persistent://$topic-partition-1"),
		'42602', 'source.topic', 'names one partition' ],
	[ qq($ok_source, "start": "middle"), '22023', 'source.start', 'unknown value "middle"' ],
	[ qq($ok_source, "brokers": "localhost:9092"), '22023', 'source.brokers', 'unknown field' ],
	[ qq("type": "pulsar", "service_url": 8080, "topic": "persistent://$topic"),
		'22023', 'source.service_url', 'expected a string' ],
);
psql('CREATE TABLE bad_182 (value text)');
for my $b (@bad)
{
	my ($source, $state, $path, $msg) = @$b;
	my $spec = '{"source": {' . $source . '}, "steps": [], '
	  . '"sink": {"type": "table", "table": "bad_182", "mode": "append"}}';
	my $err = psql_fails("SELECT mailer.create_job('bad_182', \$\$$spec\$\$)");
	like($err, qr/ERROR:  $state:.*\Q$path\E.*\Q$msg\E/s, "refused: $path: $msg");
	like($err, qr/HINT:  \S/, "  with a hint");
}

done_testing();
