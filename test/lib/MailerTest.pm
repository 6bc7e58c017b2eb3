# MailerTest: what the integration tests share.  The services (the test
# PostgreSQL cluster and the Kafka broker) are started by test/services/*.sh;
# these helpers talk to them and wait on job progress, never on timing.
package MailerTest;

use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use IPC::Run ();
use Test::More ();
use Time::HiRes qw(time sleep);

our @EXPORT = qw(psql psql_ok psql_fails kafka kcat_produce kcat_consume
  wait_until pg_service launcher_pid wait_server_ready fresh_extension drop_extension unique_name $ROOT $BROKERS);
# Helpers of the fault, poison-input and security tests (06x), below.
push @EXPORT, qw(psql_as psql_fails_as kcat_produce_raw topic_offsets_by_key
  job_info job_metrics wait_job wait_job_state accounting_ok dead_letters
  job_state_dir pg_log_size pg_log_since memory_context_bytes as_cluster_owner drop_tables);
# Test points (src/base/test_point.h): hold a process at a named step.
push @EXPORT, qw(test_point_hold test_point_wait_reached test_point_release kill_held drop_roles
  stop_while_launcher_held fresh_topic seq_producer fresh_with_owner);
# The memory backend's checkpoint writes, from the worker's DEBUG1 lines.
push @EXPORT, qw(memory_rows_written);
# A psql session in the background (076, 116).
push @EXPORT, qw(psql_session psql_session_output psql_session_finish);

our $ROOT = File::Spec->rel2abs(dirname(__FILE__) . '/../..');
our $BROKERS = $ENV{KAFKA_BROKERS} // '127.0.0.1:19092';

# Why a test died outside a test: prove shows the message on stderr, mid-run,
# and CI keeps only the tail of the log.  The last uncaught die's message is
# appended, with the test's file, to $MAILER_TEST_DEATHS (set by
# test/run-integration.sh, which prints the file after prove fails).
# MailerCluster's handler of its own calls this one.
our $DIED;
$SIG{__DIE__} = sub { $DIED = $_[0] unless $^S };
END
{
	if ($? != 0 && defined $DIED && $ENV{MAILER_TEST_DEATHS}
		&& open(my $fh, '>>', $ENV{MAILER_TEST_DEATHS}))
	{
		print $fh "$0: $DIED" . ($DIED =~ /\n\z/ ? '' : "\n");
		close $fh;
	}
}

# Run SQL through psql; return its unaligned, tuples-only output without the
# trailing newline.  Dies with psql's message when the SQL fails.
# $opt{user} connects as another role than PGUSER.
sub psql
{
	my ($sql, %opt) = @_;
	my ($out, $err) = ('', '');
	my @cmd = ('psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
		'-F', $opt{sep} // '|', '-f', '-');
	push @cmd, '-U', $opt{user} if defined $opt{user};
	local $SIG{PIPE} = 'IGNORE';	# psql may exit before reading all of $sql (a server restarting)
	my $ok = IPC::Run::run(\@cmd, '<', \$sql, '>', \$out, '2>', \$err);
	die "psql failed: $err\nSQL: $sql\n" unless $ok;
	chomp $out;
	return $out;
}

# Run SQL expected to fail; return the error text (empty when it did not fail).
# $opt{user} connects as another role than PGUSER.
sub psql_fails
{
	my ($sql, %opt) = @_;
	my ($out, $err) = ('', '');
	my @cmd = ('psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
		'-v', 'VERBOSITY=verbose', '-f', '-');
	push @cmd, '-U', $opt{user} if defined $opt{user};
	my $ok = IPC::Run::run(\@cmd, '<', \$sql, '>', \$out, '2>', \$err);
	return $ok ? '' : $err;
}

sub psql_ok
{
	my ($sql, $name) = @_;
	my $res = eval { psql($sql); 1 };
	Test::More::ok($res, $name) or Test::More::diag($@);
}

# Poll a condition (a code ref) until it returns true; fail the test with
# $what if it does not within $timeout seconds.  The condition is the
# progress being waited for; the pause between polls only spares the CPU.
sub wait_until
{
	my ($what, $cond, $timeout) = @_;
	$timeout //= 120;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		my $v = eval { $cond->() };
		return $v if $v;
		sleep 0.1;
	}
	die "timed out after ${timeout}s waiting for: $what\n";
}

# The server of a test that has one of its own (MailerCluster), else undef.
our $NODE;

# The service scripts: pg_service('crash'), kafka('create-topic', 'x', 8).
# In a test with a node of its own, pg_service acts on that node instead:
# start and restart return once the launcher is connected, as pg.sh's do.
sub pg_service
{
	my ($cmd) = @_;
	unless ($NODE)
	{
		system("$ROOT/test/services/pg.sh", @_) == 0
		  or die "pg.sh @_ failed\n";
		return;
	}
	if ($cmd eq 'crash')
	{
		$NODE->stop('immediate');
	}
	elsif ($cmd eq 'stop')
	{
		$NODE->stop('fast');
	}
	elsif ($cmd eq 'start' || $cmd eq 'restart')
	{
		$cmd eq 'start' ? $NODE->start : $NODE->restart;
		wait_server_ready();
	}
	else
	{
		die "pg_service: no '$cmd' for a test's own node\n";
	}
}

# The pid of the mailer launcher ('' when there is none or no server).
sub launcher_pid
{
	my $pid = eval {
		psql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'mailer launcher'");
	};
	return $pid // '';
}

# Wait until the server accepts connections and the mailer launcher is
# connected.  After a process crashed, the postmaster restarts them all:
# pass the launcher's pid from before (launcher_pid()) as $opt{not_launcher}
# to wait for the new one, not to see the old one before the restart.
sub wait_server_ready
{
	my (%opt) = @_;
	wait_until('the server and the mailer launcher to be up',
		sub {
			my $pid = launcher_pid();
			return $pid =~ /^\d+$/
			  && (!defined $opt{not_launcher} || $pid ne $opt{not_launcher});
		},
		$opt{timeout} // 120);
}

sub kafka
{
	my ($out, $err) = ('', '');
	IPC::Run::run(["$ROOT/test/services/kafka.sh", @_], '>', \$out, '2>', \$err)
	  or die "kafka.sh @_ failed: $err$out\n";
	return $out;
}

# Produce lines "key<TAB>value" (or values alone when $opt{keyed} is false)
# to a topic; $opt{partition} pins a partition.
sub kcat_produce
{
	my ($topic, $lines, %opt) = @_;
	my @cmd = ('kcat', '-b', $BROKERS, '-P', '-t', $topic, '-z', 'lz4');
	push @cmd, '-K', "\t" if $opt{keyed} // 1;
	push @cmd, '-p', $opt{partition} if defined $opt{partition};
	my $in = ref $lines ? join('', map { "$_\n" } @$lines) : $lines;
	my $err = '';
	IPC::Run::run(\@cmd, '<', \$in, '2>', \$err)
	  or die "kcat produce to $topic failed: $err\n";
}

# Consume a whole topic from the beginning; return the message values.
sub kcat_consume
{
	my ($topic, %opt) = @_;
	my @cmd = ('kcat', '-b', $BROKERS, '-C', '-t', $topic, '-o', 'beginning',
		'-e', '-q', '-f', $opt{format} // "%s\n");
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat consume from $topic failed: $err\n";
	return [ split /\n/, $out ];
}

# Drop and create the extension: every test file starts from nothing.  Jobs
# left by an earlier test are dropped first, which waits for their workers
# to exit: a worker outliving DROP EXTENSION could write into the new
# extension's catalog, where job ids start at 1 again.
sub fresh_extension
{
	drop_extension();
	psql("CREATE EXTENSION mailer");
}

# Drop every job (waiting for its worker to exit), then the extension.
sub drop_extension
{
	psql("SET client_min_messages = warning;
		DO \$\$ BEGIN
			IF EXISTS (SELECT FROM pg_extension WHERE extname = 'mailer') THEN
				PERFORM mailer.drop_job(name) FROM mailer.jobs;
			END IF;
		END \$\$;
		DROP EXTENSION IF EXISTS mailer CASCADE;");
}

# A name unique to this run, for topics and jobs.
sub unique_name
{
	my ($prefix) = @_;
	return sprintf('%s_%d_%d', $prefix, $$, int(time() * 1000) % 100000000);
}

# ---------------------------------------------------------------------------
# Event-time windows (test/t/05x_*.pl): events with explicit partitions and
# event times, watermarks, job metrics, and comparing a sink table with the
# same computation in plain SQL.  Kept apart from the helpers above.
# ---------------------------------------------------------------------------

require POSIX;
push @EXPORT, qw(produce_thirds_with_kill produce_chunks_kill_restart kill_worker state_cache_entries_until_exit
  setting_until_exit setting_reset memory_state_kinds want_sliding records_in_of_all committed_records);
push @EXPORT, qw(ev_time random_events window_tables want_tumbling want_sessions produce_events events_table create_window_job job_metric
  wait_watermark wait_job wait_for_sql same_rows worker_pid rocksdb_keys);
# Running totals over a topic, create_window_job's sibling without a window.
push @EXPORT, qw(create_totals_job totals_job_spec);

# Event times are seconds after 2030-01-01 00:00:00 UTC (so no window of
# these tests ever meets the wall clock); ev_time(7.25) is its ISO text.
our $EV_BASE = 1893456000;

sub ev_time
{
	my ($s) = @_;
	my $whole = POSIX::floor($s);
	my $ms = sprintf('%03d', int(($s - $whole) * 1000 + 0.5));
	return POSIX::strftime('%Y-%m-%dT%H:%M:%S', gmtime($EV_BASE + $whole)) . ".${ms}Z";
}

# Out-of-order events, the same for a given seed on any machine: in each
# of $o{partitions} partitions, $o{count} events, each $o{step} seconds
# plus 0 to $o{spread} tenths after the one before, and then 0 to 4 s
# early; a key from @{$o{keys}}, and an amount $o{amount}->(random number).
sub random_events
{
	my (%o) = @_;
	my $seed = $o{seed};
	my $rnd = sub { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed >> 8; };
	my @events;
	for my $p (0 .. $o{partitions} - 1)
	{
		my $base = 0;
		for (1 .. $o{count})
		{
			$base += $o{step} + ($rnd->() % ($o{spread} + 1)) / 10;
			my $k = $o{keys}[ $rnd->() % @{ $o{keys} } ];
			my $t = $base - ($rnd->() % 17) * 0.25;
			push @events, { p => $p, k => $k, t => $t, a => $o{amount}->($rnd->()) };
		}
	}
	return @events;
}

# Window sink tables (k, window_start, window_end, n, total), made anew.
sub window_tables
{
	my (@tables) = @_;
	psql("DROP TABLE IF EXISTS " . join(', ', @tables) . ";\n"
		  . join('', map { "CREATE TABLE $_ (k text, window_start timestamptz, window_end timestamptz, "
				  . "n bigint, total numeric, PRIMARY KEY (k, window_start));\n" } @tables));
}

# What a window job over an events table (events_table) must emit, in
# plain SQL: tumbling windows of $size (date_bin), and sessions of gap $gap
# (a new session where the gap to the key's previous event is >= $gap).
# $aggs, the select list of the aggregates, is n and total by default; any
# table with columns k and ts serves (the general aggregates' tests, 16x).
my $WANT_AGGS = 'count(*) AS n, sum(a) AS total';

sub want_tumbling
{
	my ($events, $size, $aggs) = @_;
	$aggs //= $WANT_AGGS;
	return qq{
	SELECT k, date_bin('$size', ts, '1970-01-01 00:00:00+00') AS window_start,
		   date_bin('$size', ts, '1970-01-01 00:00:00+00') + interval '$size' AS window_end,
		   $aggs
	  FROM $events GROUP BY 1, 2, 3};
}

sub want_sessions
{
	my ($events, $gap, $aggs) = @_;
	$aggs //= $WANT_AGGS;
	return qq{
	WITH marked AS (
		SELECT *,
			   CASE WHEN ts - lag(ts) OVER (PARTITION BY k ORDER BY ts) < interval '$gap'
					THEN 0 ELSE 1 END AS starts
		  FROM $events),
	numbered AS (
		SELECT *, sum(starts) OVER (PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING) AS session
		  FROM marked)
	SELECT k, min(ts) AS window_start, max(ts) + interval '$gap' AS window_end,
		   $aggs
	  FROM numbered GROUP BY k, session};
}

# Events: hash refs {p => partition, k => key, t => seconds (ev_time), a =>
# amount}.  Each is produced to its partition as key k, value {"k", "ts",
# "a"}; within a partition in the order given.
sub produce_events
{
	my ($topic, $events) = @_;
	my (%by, @order);
	for my $e (@$events)
	{
		push @order, $e->{p} unless $by{ $e->{p} };
		push @{ $by{ $e->{p} } }, $e;
	}
	for my $p (@order)
	{
		kcat_produce($topic,
			[ map { sprintf("%s\t{\"k\": \"%s\", \"ts\": \"%s\", \"a\": %s}", $_->{k}, $_->{k}, ev_time($_->{t}), $_->{a} // 1) }
				  @{ $by{$p} } ],
			partition => $p);
	}
}

# The same events as a table (k text, ts timestamptz, a numeric, p int), for
# the expected results in SQL.
sub events_table
{
	my ($table, $events) = @_;
	my $sql = "DROP TABLE IF EXISTS $table; CREATE TABLE $table (k text, ts timestamptz, a numeric, p int);\n";
	if (@$events)
	{
		$sql .= "INSERT INTO $table VALUES "
		  . join(",\n", map { sprintf("('%s', '%s', %s, %d)", $_->{k}, ev_time($_->{t}), $_->{a} // 1, $_->{p}) } @$events)
		  . ";\n";
	}
	psql($sql);
}

# Produce the events in three parts, each read by @jobs, with a SIGKILL of
# $victim's worker while the second part is read; $end goes out with the
# last part (a late event that closes the windows before it).
sub produce_thirds_with_kill
{
	my ($topic, $events, $end, $victim, @jobs) = @_;
	my $third = int(@$events / 3);
	produce_events($topic, [ @$events[0 .. $third - 1] ]);
	Test::More::is(wait_job($_), 'running', "$_ read the first third") for @jobs;
	produce_events($topic, [ @$events[$third .. 2 * $third - 1] ]);
	kill_worker($victim);
	produce_events($topic, [ @$events[2 * $third .. $#$events], $end ]);
	Test::More::is(wait_job($_), 'running', "$_ read every event") for @jobs;
}

# Produce the events in chunks of $chunk, each read and committed by both
# jobs before the next goes out (so that windows span checkpoints); SIGKILL
# $killed's worker after a third of the chunks, and stop and start
# $restarted (from its checkpoint) after two thirds.  $end, when given,
# goes out with the last chunk.
sub produce_chunks_kill_restart
{
	my ($topic, $events, $end, $chunk, $killed, $restarted) = @_;
	my $chunks = int((@$events + $chunk - 1) / $chunk);
	for my $c (0 .. $chunks - 1)
	{
		my $last = $c == $chunks - 1;
		my @part = @$events[$c * $chunk .. ($last ? $#$events : ($c + 1) * $chunk - 1)];
		push @part, $end if $last && $end;
		produce_events($topic, \@part);
		for my $job ($killed, $restarted)
		{
			my $state = wait_job($job, 60);
			Test::More::is($state, 'running', "$job read chunk $c") if $c == 0 || $last || $state ne 'running';
		}
		kill_worker($killed) if $c == int($chunks / 3);
		if ($c == int(2 * $chunks / 3))
		{
			Test::More::is(psql("SELECT mailer.stop_job('$restarted')"), 'stopped', "$restarted stopped");
			psql("SELECT mailer.start_job('$restarted')");
		}
	}
}

# SIGKILL $job's worker, and wait until the server, restarted after the
# crash, runs the job in a new one.
sub kill_worker
{
	my ($job) = @_;
	my $pid0 = worker_pid($job);
	# kill() of 0 or less signals a process group: the test's own
	Test::More::ok($pid0 > 0, "$job has a worker") or die "$job has no worker to kill\n";
	Test::More::is(kill('KILL', $pid0), 1, "SIGKILL sent to the worker of $job");
	wait_until('the server restarted after the crash',
		sub { my $p = worker_pid($job); $p != $pid0 && $p > 0 }, 120);
}

# Settings a test set with ALTER SYSTEM that are reset when it exits,
# even by dying: the next test file would otherwise run under them.
my %reset_at_exit;

END
{
	if (%reset_at_exit)
	{
		local $?;				# the test's exit status, whatever psql leaves
		eval { psql("ALTER SYSTEM RESET $_") } for sort keys %reset_at_exit;
		eval { psql('SELECT pg_reload_conf()') };
	}
}

# A server setting (ALTER SYSTEM) for the rest of the test, reset when it
# exits; setting_reset resets it before.
sub setting_until_exit
{
	my ($name, $value) = @_;
	$reset_at_exit{$name} = 1;
	psql("ALTER SYSTEM SET $name = $value");
	psql("SELECT pg_reload_conf()");
}

sub setting_reset
{
	my ($name) = @_;
	psql("ALTER SYSTEM RESET $name");
	psql("SELECT pg_reload_conf()");
	delete $reset_at_exit{$name};
}

# The kinds of a memory-backend job's state keys, their first bytes, sorted
# ("L" panes, "W" windows, ...).
sub memory_state_kinds
{
	my ($job) = @_;
	return psql("SELECT string_agg(DISTINCT chr(get_byte(key, 0)), '') FROM mailer.memory_state
				 WHERE job_id = (SELECT job_id FROM mailer.job WHERE name = '$job')");
}

# mailer.state_cache_entries = $n for the rest of the test (0: the keyed
# cache is let go at every checkpoint), reset when it exits.
sub state_cache_entries_until_exit
{
	my ($n) = @_;
	setting_until_exit('mailer.state_cache_entries', $n);
}

# SQL's answer for sliding windows of $size_s seconds every $slide_s seconds
# over an events table (k, ts, a): k, window_start, window_end, n, total
# (or the select list $aggs).
sub want_sliding
{
	my ($table, $size_s, $slide_s, $where, $aggs) = @_;
	$where //= 'true';
	$aggs //= $WANT_AGGS;
	return qq{
	SELECT k, s AS window_start, s + interval '$size_s seconds' AS window_end, $aggs
	  FROM $table,
		   generate_series(date_bin('$slide_s seconds', ts, '1970-01-01 00:00:00+00') - interval '@{[$size_s - $slide_s]} seconds',
						   date_bin('$slide_s seconds', ts, '1970-01-01 00:00:00+00'), interval '$slide_s seconds') s
	 WHERE $where
	 GROUP BY 1, 2, 3};
}

# The JSON text of a job spec reading $topic from the broker into a table
# sink: what create_window_job and create_totals_job share.  %p: start,
# source (JSON text of more source fields), event_time, watermark (the
# watermark object's fields as JSON text), steps (a list of steps as JSON
# text; undef ones are left out), table, interval (checkpoint), backend.
# A field whose value is undef is left out of the spec, for the job's
# default.
sub kafka_job_spec
{
	my ($topic, %p) = @_;
	my $source = qq("type": "kafka", "brokers": "$BROKERS", "topic": "$topic");
	$source .= qq(, "start": "$p{start}") if defined $p{start};
	$source .= ", $p{source}" if defined $p{source};
	my @fields = ("\"source\": {$source}");
	push @fields, qq("event_time": "$p{event_time}") if defined $p{event_time};
	push @fields, "\"watermark\": {$p{watermark}}" if defined $p{watermark};
	push @fields, '"steps": [' . join(', ', grep { defined } @{ $p{steps} }) . ']';
	push @fields, qq("sink": {"type": "table", "table": "$p{table}"});
	push @fields, qq("checkpoint": {"interval": "$p{interval}"}) if defined $p{interval};
	push @fields, qq("state": {"backend": "$p{backend}"}) if defined $p{backend};
	return '{' . join(",\n ", @fields) . '}';
}

# A job over a topic of such events, keyed by k, aggregating n = count(*)
# and total = sum(a) per window.  %o: window (the window step's object as
# JSON text), ooo, idle, backend, interval, extra_steps (JSON text put
# before key_by), sink table.
sub create_window_job
{
	my ($name, $topic, %o) = @_;
	my $wm = sprintf('"max_out_of_orderness": "%s"', $o{ooo} // '5 seconds');
	$wm .= sprintf(', "idle_timeout": "%s"', $o{idle}) if $o{idle};
	my $spec = kafka_job_spec($topic, start => 'earliest',
		event_time => $o{event_time} // q{(value->>'ts')::timestamptz}, watermark => $wm,
		steps => [ $o{extra_steps}, '{"key_by": {"k": "value->>\'k\'"}}', sprintf('{"window": %s}', $o{window}),
			'{"aggregate": {"n": "count(*)", "total": "sum((value->>\'a\')::numeric)"}}' ],
		table => $o{table}, interval => $o{interval} // '200 milliseconds', backend => $o{backend} // 'rocksdb');
	return psql("SELECT mailer.create_job('$name', \$spec\$$spec\$spec\$)");
}

# The spec of a job of running totals (no window step): key_by, then an
# aggregate per key, upserted into a table.  Not MailerKafkaTest's
# totals_spec, whose records are orders.  %o: table; key (the key_by
# object as JSON text; {"k": "value->>'k'"}, such events' key);
# aggregates (the aggregate object as JSON text; {"n": "count(*)"});
# extra_steps (JSON text put before key_by); source (JSON text of more
# source fields: options, group_id, format); start ('earliest'), interval
# ('200 milliseconds') and backend ('rocksdb'), each left out of the spec
# when given as undef (the job's default), so that a test whose spec never
# named it keeps the same spec.
sub totals_job_spec
{
	my ($topic, %o) = @_;
	my $or = sub { my ($k, $default) = @_; exists $o{$k} ? $o{$k} : $default };
	return kafka_job_spec($topic, start => $or->('start', 'earliest'), source => $o{source},
		steps => [ $o{extra_steps}, sprintf('{"key_by": %s}', $o{key} // q({"k": "value->>'k'"})),
			sprintf('{"aggregate": %s}', $o{aggregates} // '{"n": "count(*)"}') ],
		table => $o{table}, interval => $or->('interval', '200 milliseconds'), backend => $or->('backend', 'rocksdb'));
}

# Create a job of running totals, $name, over $topic: totals_job_spec's,
# into the table $o{table} (by default $name).  Returns its job_id.
sub create_totals_job
{
	my ($name, $topic, %o) = @_;
	my $spec = totals_job_spec($topic, table => $name, %o);
	return psql("SELECT mailer.create_job('$name', \$spec\$$spec\$spec\$)");
}

# Wait until each of @jobs runs and has read $n records (mailer.metrics'
# records_in: after a crash, the checkpoint's count and the records read
# again); $what says when.
sub records_in_of_all
{
	my ($n, $what, @jobs) = @_;
	for my $job (@jobs)
	{
		wait_for_sql("$job read $n records ($what)",
			"SELECT records_in FROM mailer.metrics WHERE name = '$job' AND state = 'running'", $n, 120);
	}
}

# The records_in of a job's newest checkpoint (0 before the first).
sub committed_records
{
	my ($job) = @_;
	return psql("SELECT coalesce((SELECT (counters->>'records_in')::bigint FROM mailer.checkpoints c
		JOIN mailer.job j USING (job_id) WHERE j.name = '$job' ORDER BY epoch DESC LIMIT 1), 0)");
}

# A column of mailer.metrics for a job.
sub job_metric
{
	my ($job, $column) = @_;
	return psql("SELECT $column FROM mailer.metrics WHERE name = '$job'");
}

# Wait until the job's watermark (mailer.metrics) is at least $ts.
sub wait_watermark
{
	my ($job, $ts, $timeout) = @_;
	wait_until("watermark of $job >= $ts",
		sub { psql("SELECT coalesce(watermark >= '$ts'::timestamptz, false) FROM mailer.metrics WHERE name = '$job'") eq 't' },
		$timeout);
}

# mailer.wait_job: every input available now is committed; returns the state.
# mailer.wait_job with a timeout in seconds or as an interval ('2 minutes').
sub wait_job
{
	my ($job, $timeout) = @_;
	$timeout //= 120;
	$timeout .= ' seconds' if $timeout =~ /^[0-9.]+$/;
	return psql("SELECT mailer.wait_job('$job', '$timeout')");
}

# Wait until a query returns $want.
sub wait_for_sql
{
	my ($what, $sql, $want, $timeout) = @_;
	my $last;
	eval {
		wait_until($what, sub { $last = psql($sql); $last eq $want }, $timeout);
		1;
	} or die "$@(last result: " . ($last // 'none') . ", wanted $want)\n";
}

# The rows of two queries, as sorted text, are the same.
sub same_rows
{
	my ($got_sql, $want_sql, $name) = @_;
	my $q = sub { psql("SELECT coalesce(string_agg(r::text, E'\\n' ORDER BY r::text), '') FROM ($_[0]) r") };
	Test::More::is($q->($got_sql), $q->($want_sql), $name);
}

# The pid of a job's worker (0 when it has none).
sub worker_pid
{
	my ($job) = @_;
	return psql("SELECT coalesce(pid, 0) FROM mailer.jobs WHERE name = '$job'");
}

# The keys (hex) of the RocksDB state of a job's newest checkpoint, read
# with ldb (Debian's rocksdb-tools) from a copy of the checkpoint's
# directory; undef when ldb is not installed.
sub rocksdb_keys
{
	my ($job) = @_;
	my $ldb = (grep { -x } map { "$_/ldb" } split /:/, $ENV{PATH} // '')[0];
	return undef unless $ldb;
	my ($id, $ref) = split /\|/, psql("SELECT c.job_id, c.state_ref FROM mailer.checkpoints c JOIN mailer.job j USING (job_id)
		WHERE j.name = '$job' AND c.subtask = 0 ORDER BY c.epoch DESC LIMIT 1");
	my @dirs = glob("$ENV{PGDATA}/mailer/*/job_$id/$ref");
	die "no RocksDB checkpoint $ref for job $job\n" unless @dirs == 1 && -d $dirs[0];
	my $copy = "/tmp/mailer-ldb-$$";
	system('rm', '-rf', $copy) == 0 && system('cp', '-r', $dirs[0], $copy) == 0
	  or die "could not copy $dirs[0]\n";
	my ($out, $err) = ('', '');
	IPC::Run::run([ $ldb, "--db=$copy", '--hex', 'scan' ], '>', \$out, '2>', \$err)
	  or die "ldb scan of $dirs[0] failed: $err\n";
	system('rm', '-rf', $copy);
	return [ map { (split / : /)[0] } split /\n/, $out ];
}

#
# Fault, poison-input and security tests (060_poison_input.pl, 061_faults.pl,
# 062_security.pl).
#

# Drop the tables (of any schema) whose name starts with $prefix, left by
# an earlier run of a test file.
sub drop_tables
{
	my ($prefix) = @_;
	psql("SET client_min_messages = warning;
	DO \$\$DECLARE r record;
	BEGIN
		FOR r IN SELECT c.oid::regclass AS t FROM pg_class c
		          WHERE c.relkind IN ('r', 'p') AND c.relname LIKE '$prefix%'
		            AND c.relnamespace <> 'pg_catalog'::regnamespace LOOP
			EXECUTE format('DROP TABLE IF EXISTS %s CASCADE', r.t);
		END LOOP;
	END\$\$");
}

# A psql session in the background: SQL in, output out; psql_session_finish
# sends $sql, then quits, and returns (output, errors).
sub psql_session
{
	my ($sql) = @_;
	my ($in, $out, $err) = ($sql, '', '');
	my $h = IPC::Run::start(['psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1'],
		'<', \$in, '>', \$out, '2>', \$err);
	return { h => $h, in => \$in, out => \$out, err => \$err };
}

sub psql_session_output
{
	my ($s) = @_;
	$s->{h}->pump_nb if $s->{h}->pumpable;
	return ${ $s->{out} };
}

sub psql_session_finish
{
	my ($s, $sql) = @_;
	${ $s->{in} } .= ($sql // '') . "\\q\n";
	$s->{h}->finish;
	return (${ $s->{out} }, ${ $s->{err} });
}

# psql / psql_fails as another role (the test cluster trusts local logins).
sub psql_as
{
	my ($role, $sql, %opt) = @_;
	local $ENV{PGUSER} = $role;
	return psql($sql, %opt);
}

sub psql_fails_as
{
	my ($role, $sql) = @_;
	local $ENV{PGUSER} = $role;
	return psql_fails($sql);
}

# Produce raw bytes: $data holds messages separated by "\n", each
# "key\tvalue" (keyed, the default) or a value alone; the bytes go as they
# are (no compression, no re-encoding).  $opt{null_empty} sends an empty key
# or value as NULL (a tombstone); $opt{args} adds kcat options (-X ...).
sub kcat_produce_raw
{
	my ($topic, $data, %opt) = @_;
	my @cmd = ('kcat', '-b', $BROKERS, '-P', '-t', $topic);
	push @cmd, '-K', "\t" if $opt{keyed} // 1;
	push @cmd, '-Z' if $opt{null_empty};
	push @cmd, '-p', $opt{partition} if defined $opt{partition};
	push @cmd, @{ $opt{args} } if $opt{args};
	my $err = '';
	IPC::Run::run(\@cmd, '<', \$data, '2>', \$err, IPC::Run::timeout(120))
	  or die "kcat produce to $topic failed: $err\n";
	die "kcat produce to $topic reported: $err\n" if $err =~ /fail|error/i;
}

# { key => [partition, offset] } of every keyed message of a topic.
sub topic_offsets_by_key
{
	my ($topic) = @_;
	my %at;
	for my $line (@{ kcat_consume($topic, format => "%k\t%p\t%o\n") })
	{
		my ($k, $p, $o) = split /\t/, $line;
		$at{$k} = [ $p, $o ];
	}
	return \%at;
}

# A job's row of mailer.jobs as a hash (state, last_error, pid, restarts,
# desired_state), or undef when there is no such job.
sub job_info
{
	my ($name) = @_;
	my $q = $name =~ s/'/''/gr;
	my $out = psql("SELECT row_to_json(j) FROM (SELECT state, last_error, last_error_at, pid, restarts, desired_state FROM mailer.jobs WHERE name = '$q') j");
	return undef if $out eq '';
	require JSON::PP;
	return JSON::PP::decode_json($out);
}

# A job's row of mailer.metrics as a hash.
sub job_metrics
{
	my ($name) = @_;
	my $q = $name =~ s/'/''/gr;
	my $out = psql("SELECT row_to_json(m) FROM mailer.metrics m WHERE name = '$q'");
	die "no metrics for job $name\n" if $out eq '';
	require JSON::PP;
	return JSON::PP::decode_json($out);
}

# mailer.wait_job: returns once a checkpoint covers what the source holds now.
# Poll mailer.jobs until the job's state matches $re; returns job_info.
sub wait_job_state
{
	my ($name, $re, $timeout) = @_;
	my $info;
	wait_until("job $name in a state matching $re",
		sub { $info = job_info($name); $info && $info->{state} =~ $re }, $timeout);
	return $info;
}

# The accounting identity of mailer.metrics, as one test.
sub accounting_ok
{
	my ($name, $label) = @_;
	my $m = job_metrics($name);
	my $sum = $m->{records_accepted} + $m->{records_filtered} + $m->{records_dead_lettered}
	  + $m->{records_skipped} + $m->{records_late};
	Test::More::is($m->{records_in}, $sum,
		($label // $name) . ': records_in = accepted + filtered + dead_lettered + skipped + late')
	  or Test::More::diag(explain_metrics($m));
	return $m;
}

sub explain_metrics
{
	my ($m) = @_;
	return join(', ', map { "$_=$m->{$_}" } grep { /^records_/ } sort keys %$m);
}

# The dead letters of a job, oldest first, as hashes; key and value in hex.
sub dead_letters
{
	my ($name) = @_;
	my $out = psql("SELECT json_agg(d ORDER BY d.topic, d.partition, d.\"offset\", d.stage) FROM (
		SELECT topic, partition, \"offset\", epoch, stage, error,
		       encode(key, 'hex') AS key_hex, encode(value, 'hex') AS value_hex,
		       convert_from(key, 'SQL_ASCII') AS key
		  FROM mailer.dead_letters
		 WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = '$name')) d");
	return [] if $out eq '';
	require JSON::PP;
	return JSON::PP::decode_json($out);
}

# Where a job keeps its RocksDB state: $PGDATA/mailer/<extension oid>/job_<id>.
sub job_state_dir
{
	my ($name) = @_;
	my ($oid, $id) = split /\|/, psql("SELECT (SELECT oid FROM pg_extension WHERE extname = 'mailer'), job_id FROM mailer.jobs WHERE name = '$name'");
	return "$ENV{PGDATA}/mailer/$oid/job_$id";
}

# Run a command as the cluster's owner (postgres when the tests run as root).
sub as_cluster_owner
{
	my @cmd = @_;
	unshift @cmd, 'runuser', '-u', 'postgres', '--' if $> == 0;
	return system(@cmd) == 0;
}

# The server log: its size now, and what was written after a size.
sub pg_log_file
{
	return $ENV{MAILER_PG_LOG}
	  // ($ENV{MAILER_RUN_DIR} // dirname($ENV{PGDATA})) . '/postgresql.log';
}

sub pg_log_size
{
	return -s pg_log_file() // 0;
}

sub pg_log_since
{
	my ($from) = @_;
	open my $fh, '<:raw', pg_log_file() or return '';
	seek $fh, $from, 0;
	local $/;
	my $text = <$fh> // '';
	close $fh;
	return $text;
}

# The bytes of a process's memory contexts named $name, summed, as it logs
# them when asked (pg_log_backend_memory_contexts).
sub memory_context_bytes
{
	my ($pid, $name) = @_;
	my $from = pg_log_size();
	psql("SELECT pg_log_backend_memory_contexts($pid)");
	my $log;
	wait_until("process $pid logged its memory contexts", sub {
		$log = pg_log_since($from);
		$log =~ /\[$pid\][^\n]*\Q$name\E: \d+ total/;
	});
	my $bytes = 0;
	$bytes += $1 while $log =~ /\[$pid\][^\n]*\Q$name\E: (\d+) total/g;
	return $bytes;
}

# What the memory backend's checkpoints of jobs @$job_ids logged since log
# position $from (src/state/state_memory.c, at DEBUG1: the test raises
# log_min_messages for the job owner's role), summed: checkpoints, rows
# updated at their address (hot of them HOT), deleted at their address,
# inserted, and written by SQL.
sub memory_rows_written
{
	my ($job_ids, $from) = @_;
	my $jobs = join('|', @$job_ids);
	my %sum = map { $_ => 0 } qw(checkpoints updated hot deleted inserted sql);
	for my $line (split /\n/, pg_log_since($from))
	{
		next unless $line =~ /mailer memory checkpoint of job (?:$jobs) epoch \d+: (\d+) rows updated at their address \((\d+) HOT\), (\d+) deleted at their address, (\d+) inserted, (\d+) written by SQL/;
		$sum{checkpoints}++;
		$sum{updated} += $1;
		$sum{hot} += $2;
		$sum{deleted} += $3;
		$sum{inserted} += $4;
		$sum{sql} += $5;
	}
	Test::More::diag(join(', ', map { "$_ $sum{$_}" } sort keys %sum));
	return \%sum;
}

# Test points (test_point.h).  test_point_hold names points in
# mailer.test_pause_at and returns the log position to wait from; a process
# reaching one logs it and waits until test_point_release drops the name.
# A test that dies holding points releases them as it exits: the next test
# file would otherwise stop at them.
sub test_point_hold
{
	my (@points) = @_;
	my $from = pg_log_size();
	setting_until_exit('mailer.test_pause_at', "'" . join(',', @points) . "'");
	return $from;
}

# Wait until some process (or the one of pid $only) has reached the point;
# returns the pid that logged it.
sub test_point_wait_reached
{
	my ($point, $from, $timeout, $only) = @_;
	my $who = defined $only ? $only : '\d+';
	my $pid;
	eval {
		wait_until("test point $point reached" . (defined $only ? " by $only" : ''), sub {
			($pid) = pg_log_since($from) =~ /\[($who)\] [^\n]*mailer test point \Q$point\E reached/;
			return defined $pid;
		}, $timeout);
		1;
	} or do { my $err = $@; server_diagnosis(); die $err; };
	return $pid;
}

# What the server's processes and the jobs are doing, as test output: a
# wait that timed out says where things stood.
sub server_diagnosis
{
	for my $sql ("SELECT pid, backend_type, state, wait_event_type, wait_event, left(query, 100) "
		  . "FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type <> 'walwriter' ORDER BY pid",
		"SELECT name, desired_state, state, waiting_for, pid, restarts, last_error FROM mailer.jobs ORDER BY job_id")
	{
		my $rows = eval { psql($sql) } // "(could not read: $@)";
		Test::More::diag("$sql:\n$rows");
	}
}

# SIGKILL the process $pid a test point holds ($name: the assertion's),
# wait until the server restarted after the crash, then release the
# points, so that the restarted workers go on.
sub kill_held
{
	my ($pid, $name) = @_;
	my $launcher = launcher_pid();
	Test::More::is(kill('KILL', $pid), 1, $name);
	wait_server_ready(not_launcher => $launcher);
	test_point_release();
}

# Release every held point (or keep the ones named).
sub test_point_release
{
	my (@keep) = @_;
	if (@keep)
	{
		setting_until_exit('mailer.test_pause_at', "'" . join(',', @keep) . "'");
	}
	else
	{
		setting_reset('mailer.test_pause_at');
	}
}

# stop_job while the launcher is held at test point $point on its way to
# start a new job's worker (079, 105): stop_job must return 'stopped' and no
# worker may start afterwards.  Any worker is held before it claims its
# slot, so that one started too late is seen.  Then the job starts when
# asked.  $held_test names the launcher's step in the test's name.
sub stop_while_launcher_held
{
	my ($point, $job, $table, $steps, $held_test) = @_;
	my $from = test_point_hold($point, 'worker_before_claim');
	my $job_id = psql(qq{SELECT mailer.create_job('$job', \$\${
		"source": {"type": "generator", "events": 1000, "rate": 100},
		"steps": [$steps],
		"sink": {"type": "table", "table": "$table"},
		"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
	my $launcher = test_point_wait_reached($point, $from);
	Test::More::is($launcher, launcher_pid(), $held_test);

	Test::More::is(psql("SELECT mailer.stop_job('$job', '1 minute')"), 'stopped',
		'stop_job returns: no worker runs');
	my $worker_from = pg_log_size();
	test_point_release('worker_before_claim');

	# Either a worker gets started (held before it claims its slot), or the
	# launcher records the stop: whichever comes first.
	my $seen = wait_until('a worker starts, or the job is recorded stopped', sub {
		return 'worker' if pg_log_since($worker_from) =~ /mailer test point worker_before_claim reached/;
		# The launcher's own record (mailer.jobs says 'stopped' as soon as stop_job commits).
		return psql("SELECT state FROM mailer.job_status WHERE job_id = $job_id") eq 'stopped' ? 'stopped' : undef;
	});
	Test::More::is($seen, 'stopped', 'no worker is started after stop_job returned');
	test_point_release();

	Test::More::is(psql("SELECT state, desired_state FROM mailer.jobs WHERE name = '$job'"), 'stopped|stopped',
		'the job is stopped');
	Test::More::is(psql("SELECT count(*) FROM mailer.checkpoints WHERE job_id = $job_id"), '0',
		'no checkpoint was taken');

	# It starts and runs when asked.
	psql("SELECT mailer.start_job('$job')");
	wait_until('the job runs', sub { psql("SELECT count(*) > 0 FROM $table") eq 't' });
	psql("SELECT mailer.drop_job('$job')");
}

# The start of a test on a topic of its own: a fresh extension, no table
# named $prefix... left by an earlier run, and a new topic of $partitions
# partitions named after $prefix.  Returns the topic.
sub fresh_topic
{
	my ($prefix, $partitions) = @_;
	fresh_extension();
	drop_tables($prefix);
	my $topic = unique_name($prefix);
	kafka('create-topic', $topic, $partitions);
	return $topic;
}

# The start of a test whose jobs belong to a role of their own: a fresh
# extension, no table named $prefix... left by an earlier run, and the
# login role $role made anew.
sub fresh_with_owner
{
	my ($prefix, $role) = @_;
	fresh_extension();
	drop_tables($prefix);
	drop_roles($role);
	psql("SET client_min_messages = warning; CREATE ROLE $role LOGIN");
}

# A producer of numbered records to $topic: each call $produce->($n) sends
# the next $n, "k<seq mod $keys><TAB>{"seq": seq}", seq counting from 1,
# and returns the last seq sent so far.
sub seq_producer
{
	my ($topic, $keys) = @_;
	my $produced = 0;
	return sub {
		my ($n) = @_;
		kcat_produce($topic, [ map { "k" . ($_ % $keys) . "\t{\"seq\": $_}" } $produced + 1 .. $produced + $n ]);
		return $produced += $n;
	};
}

# Drop these roles, if they exist, with everything they own.
sub drop_roles
{
	my (@roles) = @_;
	my $names = join(', ', map { "'$_'" } @roles);
	psql("SET client_min_messages = warning;
		DO \$\$DECLARE r name;
		BEGIN
			FOR r IN SELECT rolname FROM pg_roles WHERE rolname = ANY (ARRAY[$names]) LOOP
				EXECUTE format('DROP OWNED BY %I CASCADE', r);
			END LOOP;
		END\$\$;
		DROP ROLE IF EXISTS " . join(', ', @roles));
}


# The settings test/services/pg.sh gives the shared cluster, read from it
# so that the two cannot drift apart, less where it listens.
sub shared_settings
{
	my ($database) = @_;
	my $script = "$ROOT/test/services/pg.sh";
	open my $fh, '<', $script or die "could not read $script: $!\n";
	my $text = do { local $/; <$fh> };
	my ($block) = $text =~ /^# ---- mailer test cluster ----\n(.*?)^CONF$/ms
	  or die "no settings block in $script\n";
	my @lines = grep { !/^(port|listen_addresses|unix_socket_directories|mailer\.http_port)\b/ } split /\n/, $block;
	s/\$PGDATABASE/$database/g for @lines;
	return join("\n", @lines) . "\n";
}

1;
