# Upgrading from the real release 0.1.0: its library, built from the git tag
# v0.1.0, runs jobs on both state backends until they have checkpoints and
# open windows; then the current library is installed over it, ALTER
# EXTENSION mailer UPDATE runs, and the jobs resume from 0.1.0's
# checkpoints (its RocksDB and memory state, Kafka positions and counters)
# exactly: every table equals the same computation in plain SQL over the
# events.  The input read before the upgrade is deleted from Kafka before
# the current library starts, so a job that started over instead of
# resuming would miss it.  If the current library refuses 0.1.0's state, the test says so.
#
# The release runs in a private copy of the PostgreSQL installation and a
# private cluster (MailerUpgradeTest): the shared test cluster and the
# library installed for the other tests are not touched.  The Kafka broker
# is the shared one.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerUpgradeTest;
use Test::More;
use List::Util qw(max min);
use Time::HiRes qw(time);

# Where the time goes (prove -v shows it).
my $T0 = time();
sub phase { note(sprintf('%5.1f s: %s', time() - $T0, $_[0])); }

my $FROM = '0.1.0';
my ($TO) = `grep default_version $ROOT/mailer.control` =~ /'([^']+)'/;
my @BACKENDS = qw(rocksdb memory);
my $PG_CONFIG = $ENV{PG_CONFIG} // '/usr/lib/postgresql/15/bin/pg_config';

# --- the release, in a private installation and cluster ---------------------

my $commit = release_commit("v$FROM", '46191b0');
my %topic = map { $_ => unique_name("t092_$_") } @BACKENDS;
my $topics_made = kafka_start(map { [ 'create-topic', $topic{$_}, 2 ] } @BACKENDS);
my $pg = private_pg_install($PG_CONFIG);
phase("PostgreSQL copied");
build_release($commit, $pg);
pass("release $FROM (commit " . substr($commit, 0, 7) . ") built and installed in a private copy of PostgreSQL");
kafka_finish($topics_made);
phase('topics made');
my $cluster = private_cluster_init($pg);
private_cluster_start($cluster);
phase("server started with $FROM");
private_cluster_env($cluster);
psql("CREATE EXTENSION mailer VERSION '$FROM'");
is(psql("SELECT extversion FROM pg_extension WHERE extname = 'mailer'"), $FROM, "extension $FROM created");

# --- the events ---------------------------------------------------------------

# Per partition, 400 events half a second apart, each up to 3.75 s earlier
# than its slot (max_out_of_orderness is 5 s), keys a..f.  The first 214 of
# each partition (up to about 107 s) are produced before the upgrade, the
# rest after it: no event after the upgrade is behind the watermark the
# first part left, and the windows around 100 s get events from both parts.
my $seed = 92;
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed >> 8; }
my (@part1, @part2);
for my $p (0 .. 1)
{
	for my $i (0 .. 399)
	{
		my $e = { p => $p, k => (qw(a b c d e f))[ rnd() % 6 ], t => $i * 0.5 + $p * 0.25 - (rnd() % 16) * 0.25,
			a => sprintf('%.1f', (rnd() % 1000) / 10) };
		push @{ $i < 214 ? \@part1 : \@part2 }, $e;
	}
}
my @events = (@part1, @part2);
events_table('ev092', \@events);
events_table('ev092_part1', \@part1);
# The watermark after part 1: the smallest partition's largest time, less 5 s.
my $wm1 = min(map { my $p = $_; max(map { $_->{t} } grep { $_->{p} == $p } @part1) } 0 .. 1) - 5;
# End markers (filtered out) move the watermark past every window at last.
my $END = 100000;
my @end_markers = map { { p => $_, k => 'end', t => $END } } 0 .. 1;

my $filter = q[{"filter": "value->>'k' <> 'end'"}];
my (%win, %tot);
for my $b (@BACKENDS)
{
	($win{$b}, $tot{$b}) = ("win092_$b", "tot092_$b");
	psql("CREATE TABLE $win{$b} (k text, window_start timestamptz, window_end timestamptz,
		n bigint, total numeric, PRIMARY KEY (k, window_start));
		CREATE TABLE $tot{$b} (k text PRIMARY KEY, n bigint, total numeric)");
	create_window_job($win{$b}, $topic{$b}, table => $win{$b}, backend => $b,
		window => '{"type": "tumbling", "size": "10 seconds"}', extra_steps => $filter);
	# Running totals: no window, no event time; every key's state lives on.
	psql("SELECT mailer.create_job('$tot{$b}', \$spec\${
		\"source\": {\"type\": \"kafka\", \"brokers\": \"$BROKERS\", \"topic\": \"$topic{$b}\", \"start\": \"earliest\"},
		\"steps\": [$filter, {\"key_by\": {\"k\": \"value->>'k'\"}},
			{\"aggregate\": {\"n\": \"count(*)\", \"total\": \"sum((value->>'a')::numeric)\"}}],
		\"sink\": {\"type\": \"table\", \"table\": \"$tot{$b}\"},
		\"checkpoint\": {\"interval\": \"200 milliseconds\"},
		\"state\": {\"backend\": \"$b\"}}\$spec\$)");
}
my @JOBS = map { ($win{$_}, $tot{$_}) } @BACKENDS;

my $want_windows = q{
	SELECT k, date_bin('10 seconds', ts, '1970-01-01 00:00:00+00') AS window_start,
		   date_bin('10 seconds', ts, '1970-01-01 00:00:00+00') + interval '10 seconds' AS window_end,
		   count(*) AS n, sum(a) AS total
	  FROM %s GROUP BY 1, 2, 3};
my $want_totals = 'SELECT k, count(*) AS n, sum(a) AS total FROM %s GROUP BY k';

# --- part 1 on 0.1.0: checkpoints taken, windows fired and open ---------------

produce_events($topic{$_}, \@part1) for @BACKENDS;
my %epoch1;
for my $b (@BACKENDS)
{
	is(wait_job($_), 'running', "$FROM: $_ committed part 1") for $win{$b}, $tot{$b};
	is(psql("SELECT watermark = '" . ev_time($wm1) . "' FROM mailer.metrics WHERE name = '$win{$b}'"), 't',
		"$FROM: $win{$b}'s watermark is part 1's");
	same_rows("SELECT k, window_start, window_end, n, total FROM $win{$b}",
		"SELECT * FROM (" . sprintf($want_windows, 'ev092_part1') . ") w WHERE window_end <= '" . ev_time($wm1) . "'",
		"$FROM, $b: the windows behind the watermark fired, exactly");
	cmp_ok(psql("SELECT count(*) FROM $win{$b}"), '>', 10, "$FROM, $b: many windows fired");
	cmp_ok(psql("SELECT count(*) FROM (" . sprintf($want_windows, 'ev092_part1') . ") w
		WHERE window_end > '" . ev_time($wm1) . "'"), '>', 0, "$FROM, $b: windows of part 1 are still open");
	cmp_ok(job_metric($win{$b}, 'state_bytes'), '>', 0, "$FROM, $b: the open windows are held in state");
	same_rows("SELECT k, n, total FROM $tot{$b}", sprintf($want_totals, 'ev092_part1'),
		"$FROM, $b: running totals of part 1");
	for my $j ($win{$b}, $tot{$b})
	{
		$epoch1{$j} = psql("SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints JOIN mailer.job USING (job_id) WHERE name = '$j'");
		cmp_ok($epoch1{$j}, '>', 0, "$FROM: $j has checkpoints");
	}
}

# --- the upgrade ----------------------------------------------------------------

# Nothing of part 1 is left to read again: only the checkpoints know it.
# (The jobs have committed positions past it already.)
my %count1;
$count1{ $_->{p} }++ for @part1;
my $deleted = kafka_start(map { my $b = $_; map { [ 'delete-records', $topic{$b}, $_, $count1{$_} ] } 0 .. 1 } @BACKENDS);
private_cluster_stop($cluster);
phase('release stopped');
install_current_tree($pg, $PG_CONFIG);
phase("$TO installed");
kafka_finish($deleted);
phase('part 1 deleted from Kafka');
my $log_from = private_log_size($cluster);
private_cluster_start($cluster);
phase("server started with $TO");
# Until the catalog is updated, the new library starts no job.
wait_until('the launcher to say the jobs wait for ALTER EXTENSION UPDATE', sub {
	private_log_since($cluster, $log_from) =~ /mailer jobs wait: the extension's catalog is version \Q$FROM\E, the library is \Q$TO\E/;
}, 60);
is(psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer job'"), '0',
	'no job runs on the old catalog');
psql('ALTER EXTENSION mailer UPDATE');
is(psql("SELECT extversion FROM pg_extension WHERE extname = 'mailer'"), $TO, "updated to $TO");

# --- part 2 on the current library ------------------------------------------------

produce_events($topic{$_}, [ @part2, @end_markers ]) for @BACKENDS;

# Each job restores its 0.1.0 checkpoint and reads part 2 on top of it.  A
# refusal (a state or checkpoint format the library cannot read) fails or
# restarts the job, at its start or at the first record of a key whose
# state it reads: watch for that until every job has read everything.
my $messages = @events + @end_markers;
my %restarts0 = map { $_ => job_info($_)->{restarts} } @JOBS;
my %done;
my %refused;
wait_until("every job to read part 2 (or one to fail)", sub {
	for my $j (grep { !$done{$_} } @JOBS)
	{
		my $info = job_info($j);
		if ($info->{state} =~ /^(failed|restarting)$/ || $info->{restarts} > $restarts0{$j})
		{
			$refused{$j} = $info;
			next;
		}
		# Done: a checkpoint has committed every message and, for a window
		# job, the watermark past every window.
		$done{$j} = psql("SELECT (c.counters->>'records_in')::bigint = $messages
				AND (j.name NOT LIKE 'win%' OR c.watermark >= '" . ev_time($END - 5) . "')
			FROM mailer.checkpoints c JOIN mailer.job j USING (job_id)
			WHERE j.name = '$j' ORDER BY c.epoch DESC LIMIT 1") eq 't';
	}
	return %refused || !grep { !$done{$_} } @JOBS;
}, 180);
if (%refused)
{
	for my $j (sort keys %refused)
	{
		diag("The $TO library REFUSED the $FROM state or checkpoint of job $j "
			  . "(state $refused{$j}{state}, restarts $refused{$j}{restarts}): "
			  . ($refused{$j}{last_error} // 'no last_error'));
	}
	diag("errors in the server log:\n"
		  . join('', grep { /ERROR|FATAL|PANIC|DETAIL|HINT/ } split /^/m, private_log_since($cluster, $log_from)));
	fail("the $TO library cannot go on from what $FROM wrote (jobs: @{[ sort keys %refused ]}); "
		  . "a format change needs a reader for the $FROM format, or a clear refusal and an upgrade note");
	done_testing();
	exit 1;
}
pass("$TO resumed every job from its $FROM checkpoint and read part 2");

for my $b (@BACKENDS)
{
	is(wait_job($_), 'running', "$TO: $_ committed part 2") for $win{$b}, $tot{$b};
	same_rows("SELECT k, window_start, window_end, n, total FROM $win{$b}", sprintf($want_windows, 'ev092'),
		"$b: every window across the upgrade equals GROUP BY key, date_bin over all events");
	is(psql("SELECT sum(n) FROM $win{$b}"), scalar(@events), "$b: every event in one window, once");
	same_rows("SELECT k, n, total FROM $tot{$b}", sprintf($want_totals, 'ev092'),
		"$b: running totals across the upgrade equal GROUP BY key over all events");
	for my $j ($win{$b}, $tot{$b})
	{
		my $m = job_metrics($j);
		is($m->{records_in}, $messages, "$j: records_in counts each message once, across the upgrade");
		is($m->{records_filtered}, scalar(@end_markers), "$j: the end markers filtered");
		is($m->{records_late}, 0, "$j: no record late");
	}
}
is(psql("SELECT count(*) FROM mailer.dead_letters"), '0', 'no dead letters');
is(psql("SELECT string_agg(name || ' ' || state, ', ' ORDER BY name) FROM mailer.jobs"),
	join(', ', map { "$_ running" } sort @JOBS), 'mailer.jobs: every job running, none failed');

my $topics_gone = kafka_start(map { [ 'delete-topic', $topic{$_} ] } @BACKENDS);
private_cluster_stop($cluster);
kafka_finish($topics_gone);
done_testing();
