# Faults on a real broker and a real server, each followed by exact output:
# the broker stopped for 20 seconds in the middle of consumption; the server
# restarted fast and immediate; a job worker killed and terminated; the sink
# table renamed away and back; sink rows a constraint rejects (dead letters,
# skip, fail); and a job whose state directory was deleted while stopped.
#
# Three jobs read one topic: running totals per customer on RocksDB and on
# the memory backend (upsert sinks), and every record as a row (append sink).
# "Exact" means the totals equal those computed by SQL over what was
# produced, and the rows are each record once: none lost, none twice.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerCluster;
use MailerTest;
use Test::More;
use Time::HiRes qw(time sleep);

# On a server of its own (MailerCluster): it restarts it, crashes it and
# kills a worker (which restarts every backend).
mailer_node();
fresh_extension();
drop_tables('t061');
my $log_start = pg_log_size();

my $topic = unique_name('t061');
kafka('create-topic', $topic, 4);
my $produced = 0;
# What a fault interrupts: a few seconds of work for the jobs.
my $backlog = 300000;

# Orders $produced .. $produced + $n - 1: customer c(i % 50), amount
# i % 100; every 1000th (i % 1000 = 999) is not JSON: a dead letter, which
# must appear once whatever the fault.
sub produce
{
	my ($n) = @_;
	my @lines = map {
		$_ % 1000 == 999 ? "c" . ($_ % 50) . "\t{\"seq\": $_, oops"
		  : "c" . ($_ % 50) . "\t{\"seq\": $_, \"customer_id\": \"c" . ($_ % 50) . "\", \"amount\": " . ($_ % 100) . "}"
	} $produced .. $produced + $n - 1;
	kcat_produce($topic, \@lines);
	$produced += $n;
}

for my $t (qw(t061_totals t061_totals_mem))
{
	psql("CREATE TABLE $t (customer_id text PRIMARY KEY, orders bigint, total numeric)");
}
psql("CREATE TABLE t061_rows (partition int, \"offset\" bigint, seq bigint)");

# Totals per customer, the part of the specs that j061_agg, j061_mem and
# j061_check_agg share; no start (undef): each reads from the default one.
my %totals = (start => undef, key => q({"customer_id": "value->>'customer_id'"}),
	aggregates => q({"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}));
my %jobs = (
	j061_agg => totals_job_spec($topic, %totals, table => 't061_totals', backend => 'rocksdb',
		interval => '300 milliseconds'),
	j061_mem => totals_job_spec($topic, %totals, table => 't061_totals_mem', backend => 'memory',
		interval => '300 milliseconds'),
	j061_rows => qq({"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	  "steps": [{"map": {"seq": "(value->>'seq')::bigint"}}],
	  "sink": {"type": "table", "table": "t061_rows"},
	  "checkpoint": {"interval": "300 milliseconds"}}),
);
my @jobs = sort keys %jobs;

sub wait_all
{
	my ($timeout) = @_;
	wait_until('the server accepts connections', sub { psql("SELECT 1") }, 60);
	is(wait_job($_, $timeout // '180 seconds'), 'running', "$_ has committed all its input") for @jobs;
}

# The rows of the records up to $checked were found exact before: what a
# fault may have lost or repeated is after them (a job resumes from a
# checkpoint of the current phase), so only those rows are compared one by
# one; counts and sums cover the rest.
my $checked = 0;

sub exact
{
	my ($label) = @_;
	my $n = $produced;
	my $good = "SELECT i FROM generate_series(0, $n - 1) i WHERE i % 1000 <> 999";
	my $npoison = psql("SELECT count(*) FROM generate_series(0, $n - 1) i WHERE i % 1000 = 999");
	my $expected = "SELECT 'c' || (i % 50), count(*), sum(i % 100)::numeric FROM ($good) g GROUP BY 1";
	for my $t (qw(t061_totals t061_totals_mem))
	{
		is(psql("SELECT count(*) FROM (($expected EXCEPT SELECT * FROM $t) UNION ALL (SELECT * FROM $t EXCEPT $expected)) d"),
			'0', "$label: $t holds the exact totals of the $n orders");
	}
	my $new_good = "SELECT i FROM generate_series($checked, $n - 1) i WHERE i % 1000 <> 999";
	my $new_rows = "SELECT seq FROM t061_rows WHERE seq >= $checked";
	is(psql("SELECT count(*) || ' ' || sum(seq) FROM t061_rows"), psql("SELECT count(*) || ' ' || sum(i) FROM ($good) g"),
		"$label: t061_rows has as many rows as good records, and the same sum of seq");
	is(psql("SELECT count(*) FROM (($new_rows EXCEPT ALL $new_good) UNION ALL ($new_good EXCEPT ALL $new_rows)) d")
		  . ' ' . psql("SELECT count(*) - count(DISTINCT (partition, \"offset\")) FROM t061_rows WHERE seq >= $checked"),
		'0 0', "$label: t061_rows holds each good record from seq $checked on once");
	$checked = $n;
	for my $j (@jobs)
	{
		my $m = accounting_ok($j, "$label: $j");
		is($m->{records_in}, $n, "$label: $j read each record once (records_in)");
		is($m->{records_dead_lettered}, $npoison, "$label: $j counted the $npoison bad records once");
		is(psql("SELECT count(*) || ' ' || count(DISTINCT (partition, \"offset\")) || ' ' || count(*) FILTER (WHERE stage = 'decode')
		           FROM mailer.dead_letters WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = '$j')"),
			"$npoison $npoison $npoison", "$label: $j has one dead letter for each of the $npoison bad records");
	}
}

# Produce $n more orders and return once every job has processed some of
# them: the fault that follows finds the jobs in the middle of their input
# (or, on a very fast machine, just past it: the checks hold either way).
sub records_in
{
	return { map { $_ => job_metrics($_)->{records_in} } @jobs };
}

sub produce_and_wait_progress
{
	my ($n, $what) = @_;
	my $before = records_in();
	produce($n);
	wait_until("every job processing ($what)", sub {
		for my $j (@jobs)
		{
			return 0 unless job_metrics($j)->{records_in} > $before->{$j};
		}
		return 1;
	});
	my $now = records_in();
	diag("$what: the fault comes with " . join(', ', map { "$_ at $now->{$_}/$produced" } @jobs));
}

produce(2000);
psql("SELECT mailer.create_job('$_', \$spec\$$jobs{$_}\$spec\$)") for @jobs;
wait_all();
exact('start');

# ---------------------------------------------------------------------------
# The broker stopped for 20 seconds in the middle of consumption
# ---------------------------------------------------------------------------

produce_and_wait_progress($backlog, 'broker outage');
my $down_at = time();
kafka('stop');
for my $j (@jobs)
{
	my $info = wait_job_state($j, qr/^waiting$/, 60);
	like($info->{last_error}, qr/Kafka/, "broker down: $j is waiting, last_error says Kafka: $info->{last_error}");
}
sleep(0.5) while time() - $down_at < 20;    # the outage itself: 20 seconds
is(psql("SELECT string_agg(DISTINCT state, ',') FROM mailer.jobs"), 'waiting', 'still waiting after 20 seconds');
kafka('start');
wait_job_state($_, qr/^running$/, 120) for @jobs;
pass('every job runs again once the broker is back');
produce(3000);
wait_all();
exact('after the broker outage');
is(psql("SELECT sum(restarts) FROM mailer.jobs"), '0', 'the outage cost no worker restart');

# ---------------------------------------------------------------------------
# The server restarted: fast, then immediate
# ---------------------------------------------------------------------------

produce_and_wait_progress($backlog, 'fast restart');
pg_service('restart');
wait_all();
exact('after a fast restart');
is(psql("SELECT string_agg(DISTINCT state, ',') FROM mailer.jobs"), 'running', 'every job runs after the fast restart');

produce_and_wait_progress($backlog, 'immediate restart');
pg_service('crash');
pg_service('start');
wait_all();
exact('after an immediate restart');
for my $j (@jobs)
{
	my $info = job_info($j);
	is($info->{state}, 'running', "$j runs after the immediate restart");
	like($info->{last_error} // '', qr/stopped abruptly/, "$j: last_error says it stopped abruptly");
}

# ---------------------------------------------------------------------------
# A job worker killed (SIGKILL: the postmaster restarts every backend), then
# one terminated (SIGTERM: a final checkpoint, and the launcher restarts it)
# ---------------------------------------------------------------------------

produce_and_wait_progress($backlog, 'worker killed');
my $pid = job_info('j061_agg')->{pid};
ok($pid && kill('KILL', $pid), "SIGKILL to the worker of j061_agg (pid $pid)");
wait_until('the killed worker gone', sub { !kill(0, $pid) });
wait_all();
exact('after a worker was killed');

produce_and_wait_progress($backlog, 'worker terminated');
my $rows_info = job_info('j061_rows');
is(psql("SELECT pg_terminate_backend($rows_info->{pid})"), 't', 'pg_terminate_backend of the worker of j061_rows');
wait_until('j061_rows restarted by the launcher',
	sub { my $i = job_info('j061_rows'); $i->{restarts} > $rows_info->{restarts} && $i->{state} eq 'running' });
like(job_info('j061_rows')->{last_error}, qr/terminated/, 'j061_rows: last_error says its worker was terminated');
wait_all();
exact('after a worker was terminated');

# ---------------------------------------------------------------------------
# The sink table renamed away (the job waits for a table of that name, its
# position does not move, its worker neither writes into the renamed table
# nor restarts), then back (it goes on, nothing lost, nothing twice)
# ---------------------------------------------------------------------------

my $ckpt_sql = "SELECT max(epoch) || ' ' || (SELECT positions FROM mailer.checkpoints c2 WHERE c2.job_id = c.job_id ORDER BY epoch DESC LIMIT 1)
                  FROM mailer.checkpoints c WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'j061_rows') GROUP BY job_id";
my $rows_before = job_info('j061_rows');
psql("ALTER TABLE t061_rows RENAME TO t061_rows_away");
my $ckpt_before = psql($ckpt_sql);
produce(3000);
my $info;
wait_until('j061_rows waiting for its table', sub {
	$info = job_info('j061_rows');
	$info->{state} eq 'waiting';
});
like($info->{last_error}, qr/t061_rows.*does not exist/,
	"sink renamed away: state waiting, last_error names the table: $info->{last_error}");
is(psql("SELECT waiting_for FROM mailer.jobs WHERE name = 'j061_rows'"), 'table', 'sink renamed away: waiting_for table');
is(psql($ckpt_sql), $ckpt_before, 'sink renamed away: no checkpoint, the positions do not advance');
is($info->{pid} . ' ' . $info->{restarts}, "$rows_before->{pid} $rows_before->{restarts}",
	'sink renamed away: the same worker waits, no restart');
is(psql("SELECT count(*) FROM t061_rows_away"),
	psql("SELECT count(*) FROM generate_series(0, $produced - 3000 - 1) i WHERE i % 1000 <> 999"),
	'sink renamed away: nothing more written to it');
# The other jobs go on.
is(wait_job($_), 'running', "sink of another job renamed: $_ goes on") for qw(j061_agg j061_mem);
psql("ALTER TABLE t061_rows_away RENAME TO t061_rows");
wait_job_state('j061_rows', qr/^running$/, 120);
wait_all();
exact('after the sink table came back');

# ---------------------------------------------------------------------------
# Sink rows a constraint rejects, per on_error
# ---------------------------------------------------------------------------

my $ctopic = unique_name('t061c');
kafka('create-topic', $ctopic, 2);
kcat_produce($ctopic, [ map { "k$_\t{\"seq\": $_, \"customer_id\": \"c" . ($_ % 5) . "\", \"amount\": " . ($_ % 100) . "}" } 0 .. 199 ]);
my $cat = { map { my ($s, $p, $o) = split /\t/; ($s => [ $p, $o ]) }
	  @{ kcat_consume($ctopic, format => "%k\t%p\t%o\n") } };
for my $t (qw(t061_checked t061_checked_skip t061_checked_fail))
{
	psql("CREATE TABLE $t (seq bigint, amount int CONSTRAINT ${t}_amount_small CHECK (amount < 90))");
}
psql("CREATE TABLE t061_checked_totals (customer_id text PRIMARY KEY CONSTRAINT no_c3 CHECK (customer_id <> 'c3'),
      orders bigint, total numeric)");
my $row_steps = q("steps": [{"map": {"seq": "(value->>'seq')::bigint", "amount": "(value->>'amount')::int"}}]);
for ([ 'j061_check_dlq', 't061_checked', 'dead_letter' ], [ 'j061_check_skip', 't061_checked_skip', 'skip' ],
	[ 'j061_check_fail', 't061_checked_fail', 'fail' ])
{
	my ($name, $table, $policy) = @$_;
	psql(qq(SELECT mailer.create_job('$name', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$ctopic"},
	  $row_steps, "sink": {"type": "table", "table": "$table"}, "on_error": "$policy"}\$\$)));
}
create_totals_job('j061_check_agg', $ctopic, %totals, table => 't061_checked_totals', interval => undef, backend => undef);

wait_job('j061_check_dlq');
is(psql("SELECT count(*) || ' ' || max(amount) FROM t061_checked"), '180 89',
	'constraint, dead_letter: the 180 rows the table accepts are written');
my @rejected = @{ dead_letters('j061_check_dlq') };
is(scalar(@rejected), 20, 'constraint, dead_letter: the 20 rows it refuses are dead letters');
my $bad = 0;
for my $d (@rejected)
{
	my $row = pack('H*', $d->{value_hex});
	my ($seq) = $row =~ /^\{"seq": "(\d+)", "amount": "(\d+)"\}$/;
	my $ok = defined $seq && $row eq sprintf('{"seq": "%d", "amount": "%d"}', $seq, $seq % 100)
	  && $seq % 100 >= 90
	  && $d->{stage} eq 'sink'
	  && $d->{error} =~ /new row for relation "t061_checked" violates check constraint "t061_checked_amount_small"/
	  && $d->{topic} eq $ctopic
	  && "$d->{partition}/$d->{offset}" eq join('/', @{ $cat->{"k$seq"} });
	diag('unexpected dead letter: ' . explain($d)) if !$ok && !$bad++;
}
is($bad, 0, 'constraint, dead_letter: each says stage sink, the constraint, the row, its topic, partition and offset');
my $m = accounting_ok('j061_check_dlq', 'constraint, dead_letter');
is_deeply([ @$m{qw(records_accepted records_dead_lettered)} ], [ 180, 20 ],
	'constraint, dead_letter: 180 accepted, 20 dead-lettered');

wait_job('j061_check_skip');
is(psql("SELECT count(*) FROM t061_checked_skip"), '180', 'constraint, skip: the 180 rows the table accepts are written');
$m = accounting_ok('j061_check_skip', 'constraint, skip');
is_deeply([ @$m{qw(records_accepted records_skipped records_dead_lettered)} ], [ 180, 20, 0 ],
	'constraint, skip: 180 accepted, 20 skipped, no dead letter');

$info = wait_job_state('j061_check_fail', qr/^failed$/);
like($info->{last_error},
	qr/table public\.t061_checked_fail rejected a row: new row for relation "t061_checked_fail" violates check constraint "t061_checked_fail_amount_small": The row: \{"seq": "(\d+)", "amount": "(9\d)"\} \(from \Q$ctopic\E partition \d offset \d+\)/,
	'constraint, fail: state failed; last_error says which row, from where, and why');
my ($fseq) = $info->{last_error} =~ /"seq": "(\d+)"/;
is(psql("SELECT count(*) FROM t061_checked_fail WHERE amount >= 90"), '0', 'constraint, fail: no refused row written');
like($info->{last_error}, qr/partition $cat->{"k$fseq"}[0] offset $cat->{"k$fseq"}[1]\)/,
	'constraint, fail: the position named is that of the row');

wait_job('j061_check_agg');
is(psql("SELECT string_agg(customer_id, ',' ORDER BY customer_id) FROM t061_checked_totals"), 'c0,c1,c2,c4',
	'constraint on an aggregate sink: the other keys are written');
my @agg_rejected = @{ dead_letters('j061_check_agg') };
is(scalar(@agg_rejected), 1, 'constraint on an aggregate sink: one dead letter');
is($agg_rejected[0]{stage}, 'sink', '... stage sink');
like(pack('H*', $agg_rejected[0]{value_hex}), qr/^\{"customer_id": "c3", "orders": "40", "total": "\d+"\}$/,
	'... its value is the refused row');
like($agg_rejected[0]{error}, qr/violates check constraint "no_c3"/, '... its error names the constraint');
is(job_info('j061_check_agg')->{state}, 'running', '... and the job keeps running');

# ---------------------------------------------------------------------------
# stop_job then start_job at once: the job runs again, every time
# ---------------------------------------------------------------------------

for my $round (1 .. 5)
{
	my $old_pid = job_info('j061_mem')->{pid};
	is(psql("SELECT mailer.stop_job('j061_mem'); SELECT mailer.start_job('j061_mem')"), "stopped\nstarting",
		"round $round: stop_job then start_job in one session");
	produce(100);
	wait_until("round $round: j061_mem runs in a new worker", sub {
		my $i = job_info('j061_mem');
		$i->{state} eq 'running' && $i->{pid} && $i->{pid} != $old_pid;
	}, 30);
	is(wait_job('j061_mem', '30 seconds'), 'running', "round $round: and commits its input");
}
wait_all();
exact('after stop and start at once');

# ---------------------------------------------------------------------------
# A job whose state directory was deleted while it was stopped
# ---------------------------------------------------------------------------

is(psql("SELECT mailer.stop_job('j061_agg')"), 'stopped', 'j061_agg stopped');
my $dir = job_state_dir('j061_agg');
ok(-d $dir, "its state directory exists: $dir");
ok(as_cluster_owner('rm', '-rf', $dir) && !-e $dir, 'the state directory deleted');
psql("SELECT mailer.start_job('j061_agg')");
$info = wait_job_state('j061_agg', qr/^failed$/, 60);
like($info->{last_error}, qr/RocksDB state of checkpoint \d+ is missing.*does not exist/,
	"start_job: state failed, last_error names the missing state: $info->{last_error}");
is(psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer launcher'"), '1',
	'the server and the launcher stay up');
is(psql("SELECT 1 FROM mailer.jobs WHERE name = 'j061_mem' AND state = 'running'"), '1', 'the other jobs run on');
my @crashes = pg_log_since($log_start) =~ /(.*terminated by signal.*)/g;
is(scalar(@crashes), 1, 'the log shows no crash but that of the killed worker') or diag(join("\n", @crashes));
my $epochs = psql("SELECT string_agg(epoch::text, ', ' ORDER BY epoch) FROM mailer.checkpoints WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'j061_agg')");
my ($some_epoch) = $epochs =~ /^(\d+)/;
psql("SELECT mailer.stop_job('j061_agg')");
psql("SELECT mailer.restore_job('j061_agg', $some_epoch)");
psql("SELECT mailer.start_job('j061_agg')");
$info = wait_job_state('j061_agg', qr/^failed$/, 60);
like($info->{last_error}, qr/RocksDB state of checkpoint $some_epoch is missing/,
	'restored to an older epoch whose state is gone too: failed again, saying so');
ok(psql("SELECT mailer.drop_job('j061_agg')") > 0, 'the job can still be dropped');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
done_testing();
