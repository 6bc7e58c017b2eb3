# MailerParallelTest: what the parallel-job tests (test/t/12x_parallel_*.pl,
# test/t/long/121_parallel_chaos.pl) share, on top of MailerTest.
#
# The data: orders generated in SQL into a source table (order_id,
# customer_id, amount, ts, p), each produced to its partition p with the
# order id as its Kafka key, while the jobs group by customer_id, taken from
# the value: the group key is never the Kafka key.  Event times grow with
# the order id, up to a few seconds early, so each partition is ordered
# within max_out_of_orderness and no record is ever late.  The expected
# results are GROUP BYs over the very rows the jobs read.
#
# Every test runs its jobs at several parallelisms.  MAILER_TEST_PARALLELISMS
# ("1", "1,2", "1 2 4"...) limits them: a parallelism a test asks for that
# is not in the list becomes the largest listed one below it (or the
# smallest listed), so "1" runs every test at parallelism 1 alone.  The
# assertions about what only parallel jobs have (mailer.subtasks, the
# subtask column of partition_metrics, alter_job, key_groups) are skipped
# only when the build has none of it and the list is "1"; asked for a
# parallelism above 1, a build without parallel jobs fails.
package MailerParallelTest;

use strict;
use warnings;
use Exporter 'import';
use IPC::Run ();
use List::Util qw(max);
use Test::More ();
use MailerTest;

our @EXPORT = qw(@PARALLELISMS par par_list parallel_build par_node_conf
  par_orders par_messages par_send par_produce par_markers par_job par_spec par_sink par_want
  par_same par_subtasks_ok par_partitions_ok par_subtask_pids par_subtask_count alter_parallelism
  %WINDOW EV_BASE_SQL);

# The parallelisms the tests may use.
our @PARALLELISMS = sort { $a <=> $b } grep { /^\d+$/ }
  split /[\s,]+/, ($ENV{MAILER_TEST_PARALLELISMS} // '1,2,4');
die "MAILER_TEST_PARALLELISMS names no parallelism\n" unless @PARALLELISMS;

# The parallelism to run for one a test asks for.
sub par
{
	my ($p) = @_;
	my @below = grep { $_ <= $p } @PARALLELISMS;
	return @below ? $below[-1] : $PARALLELISMS[0];
}

# par() of each, without repeats, in the order given.
sub par_list
{
	my %seen;
	return grep { !$seen{$_}++ } map { par($_) } @_;
}

# Does this build have parallel jobs (the view mailer.subtasks)?  Call it
# after the extension was created.  A build without them can only be run
# at parallelism 1.
sub parallel_build
{
	my $have = psql("SELECT to_regclass('mailer.subtasks') IS NOT NULL") eq 't';
	if (!$have && max(@PARALLELISMS) > 1)
	{
		Test::More::BAIL_OUT('this build has no parallel jobs (no view mailer.subtasks); '
			  . 'MAILER_TEST_PARALLELISMS=1 checks the tests alone');
	}
	return $have;
}

# Settings for a node of a parallel test (MailerCluster's mailer_node):
# a slot per subtask and a prepared transaction per subtask but one.
sub par_node_conf
{
	my ($slots) = @_;
	return "mailer.max_jobs = $slots\n"
	  . 'max_worker_processes = ' . ($slots + 8) . "\n"
	  . "max_prepared_transactions = 64\n";
}

# Event times are seconds after 2030-01-01 00:00:00 UTC, as in MailerTest.
use constant EV_BASE_SQL => "timestamptz '2030-01-01 00:00:00+00'";

# Orders $from..$to into $table (made anew when $o{create}).  %o:
#   customers   how many customers (default 300)
#   start       event time of order $from, in seconds (default 0)
#   step        seconds between consecutive orders (default 0.1)
#   jitter      orders are up to this many seconds late, to the ms (default 4)
#   partitions  order i goes to partition i % partitions (default 8), or
#   in          a list of partitions: order i to the (i mod count)th of them
# The customer comes from a linear congruential sequence of the order id,
# so each customer's orders are irregularly spaced: sessions both merge
# and split.  Amounts run from 0.00 to 999.99.
sub par_orders
{
	my ($table, $from, $to, %o) = @_;
	if ($o{create})
	{
		psql("DROP TABLE IF EXISTS $table; CREATE TABLE $table (order_id bigint PRIMARY KEY, "
			  . "customer_id text NOT NULL, amount numeric(10,2) NOT NULL, ts timestamptz NOT NULL, p int NOT NULL)");
	}
	my $customers = $o{customers} // 300;
	my $start = $o{start} // 0;
	my $step = $o{step} // 0.1;
	my $jitter_ms = int(($o{jitter} // 4) * 1000) || 1;
	my @in = $o{in} ? @{ $o{in} } : (0 .. ($o{partitions} // 8) - 1);
	my $parts = 'ARRAY[' . join(',', @in) . ']';
	psql("INSERT INTO $table SELECT i, "
		  . "'c' || ((((i * 1103515245 + 12345) % 2147483648) / 256) % $customers), "
		  . "((i * 104729) % 100000) / 100.0, "
		  . EV_BASE_SQL . " + ($start + (i - $from) * $step) * interval '1 second' "
		  . "- ((i * 7907) % $jitter_ms) * interval '1 millisecond', "
		  . "($parts)[1 + i % " . scalar(@in) . "] "
		  . "FROM generate_series(${from}::bigint, ${to}::bigint) i");
}

# The orders $from..$to of $table as Kafka messages: { partition =>
# "order_id<TAB>json\n..." } in order id order within each partition.
# Read while the server is up, they can be produced while it is not.
sub par_messages
{
	my ($table, $from, $to) = @_;
	my %by;
	my $out = psql("SELECT p || E'\\t' || order_id || E'\\t' || json_build_object('order_id', order_id, "
		  . "'customer_id', customer_id, 'amount', amount, 'ts', ts)::text "
		  . "FROM $table WHERE order_id BETWEEN $from AND $to ORDER BY order_id");
	for my $line (split /\n/, $out)
	{
		my ($p, $rest) = split /\t/, $line, 2;
		$by{$p} .= "$rest\n";
	}
	return \%by;
}

# Produce messages of par_messages to $topic, each to its partition.
sub par_send
{
	my ($topic, $by) = @_;
	for my $p (sort { $a <=> $b } keys %$by)
	{
		my $err = '';
		IPC::Run::run([ 'kcat', '-b', $MailerTest::BROKERS, '-P', '-t', $topic, '-z', 'lz4', '-K', "\t", '-p', $p ],
			'<', \$by->{$p}, '2>', \$err, IPC::Run::timeout(300))
		  or die "producing to partition $p of $topic failed: $err\n";
	}
	return scalar(keys %$by);
}

# Produce the orders $from..$to of $table to $topic: each to its partition,
# keyed by its order id, in order id order within the partition.  Returns
# how many partitions got some.
sub par_produce
{
	my ($table, $topic, $from, $to) = @_;
	return par_send($topic, par_messages($table, $from, $to));
}

# An end marker at event time $t (seconds) in each of the partitions: the
# jobs filter them out (customer "end"), but they move each partition's
# watermark past every window before $t - max_out_of_orderness.  Returns
# how many were produced.
sub par_markers
{
	my ($topic, $t, @parts) = @_;
	for my $p (@parts)
	{
		kcat_produce($topic, [ sprintf("end-%d\t{\"order_id\": 0, \"customer_id\": \"end\", \"amount\": 0, \"ts\": \"%s\"}",
			$p, ev_time($t)) ], partition => $p);
	}
	return scalar(@parts);
}

# The windows the tests use, by kind ('totals' is no window).
our %WINDOW = (
	tumbling => '{"type": "tumbling", "size": "1 minute"}',
	sliding => '{"type": "sliding", "size": "2 minutes", "slide": "1 minute"}',
	session => '{"type": "session", "gap": "1 minute"}',
);

# A job spec: orders of $o{topic} (one topic, or an array of them), end
# markers filtered out, keyed by customer_id from the value, a window of
# $o{kind} (tumbling, sliding, session; totals: none), orders = count(*)
# and total = sum(amount) (or $o{aggregate}, JSON text) into $o{table}.
# %o also: parallelism, backend, ooo, idle, interval, retain (checkpoints),
# key_groups, extra_steps (JSON text after the filter), on_error.
sub par_spec
{
	my (%o) = @_;
	my $kind = $o{kind} // 'totals';
	my $topics = ref $o{topic} ? $o{topic} : [ $o{topic} ];
	my $topic_json = @$topics == 1 ? qq("topic": "$topics->[0]")
	  : '"topics": [' . join(', ', map { qq("$_") } @$topics) . ']';
	my @steps = (q[{"filter": "value->>'customer_id' IS DISTINCT FROM 'end'"}]);
	push @steps, $o{extra_steps} if $o{extra_steps};
	push @steps, q[{"key_by": {"customer_id": "value->>'customer_id'"}}];
	push @steps, qq({"window": $WINDOW{$kind}}) if $kind ne 'totals';
	push @steps, sprintf('{"aggregate": %s}',
		$o{aggregate} // q[{"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}]);
	my $time = '';
	if ($kind ne 'totals')
	{
		$time = sprintf(qq(,\n "event_time": "(value->>'ts')::timestamptz",\n "watermark": {"max_out_of_orderness": "%s"%s}),
			$o{ooo} // '5 seconds', $o{idle} ? qq(, "idle_timeout": "$o{idle}") : '');
	}
	my $ckpt = sprintf('"interval": "%s"', $o{interval} // '1 second');
	$ckpt .= qq(, "retain": $o{retain}) if $o{retain};
	my $extra = '';
	$extra .= qq(,\n "key_groups": $o{key_groups}) if $o{key_groups};
	$extra .= qq(,\n "on_error": "$o{on_error}") if $o{on_error};
	return sprintf(<<'JSON', $MailerTest::BROKERS, $topic_json, $time, join(",\n   ", @steps), $o{table}, $ckpt, $o{backend} // 'rocksdb', $o{parallelism} // 1, $extra);
{"source": {"type": "kafka", "brokers": "%s", %s, "start": "earliest"}%s,
 "steps": [%s],
 "sink": {"type": "table", "table": "%s"},
 "checkpoint": {%s},
 "state": {"backend": "%s"},
 "parallelism": %d%s}
JSON
}

# The sink table of a job of $kind (made anew): customer_id, the window's
# bounds unless totals, orders and total (or @$cols, "name type" each).
sub par_sink
{
	my ($table, $kind, $cols) = @_;
	my $aggs = join(', ', @{ $cols // [ 'orders bigint', 'total numeric' ] });
	psql("DROP TABLE IF EXISTS $table; "
		  . ($kind eq 'totals'
			? "CREATE TABLE $table (customer_id text PRIMARY KEY, $aggs)"
			: "CREATE TABLE $table (customer_id text, window_start timestamptz, window_end timestamptz, "
			  . "$aggs, PRIMARY KEY (customer_id, window_start))"));
}

# Create the sink and the job; %o as par_spec (table defaults to $name).
sub par_job
{
	my ($name, %o) = @_;
	$o{table} //= $name;
	par_sink($o{table}, $o{kind} // 'totals');
	psql("SELECT mailer.create_job('$name', \$spec\$" . par_spec(%o) . "\$spec\$)");
	return $name;
}

# What a job of $kind must hold, in SQL over the source table's rows (all
# of them, or those matching $where).
sub par_want
{
	my ($kind, $src, $where) = @_;
	$where //= 'true';
	my $rows = "(SELECT * FROM $src WHERE $where) AS e";
	return {
		totals => "SELECT customer_id, count(*) AS orders, sum(amount) AS total FROM $rows GROUP BY 1",
		tumbling => "SELECT customer_id, date_bin('1 minute', ts, '1970-01-01 00:00:00+00') AS window_start, "
		  . "date_bin('1 minute', ts, '1970-01-01 00:00:00+00') + interval '1 minute' AS window_end, "
		  . "count(*) AS orders, sum(amount) AS total FROM $rows GROUP BY 1, 2, 3",
		sliding => "SELECT customer_id, s AS window_start, s + interval '2 minutes' AS window_end, "
		  . "count(*) AS orders, sum(amount) AS total FROM $rows, "
		  . "generate_series(date_bin('1 minute', ts, '1970-01-01 00:00:00+00') - interval '1 minute', "
		  . "date_bin('1 minute', ts, '1970-01-01 00:00:00+00'), interval '1 minute') AS s GROUP BY 1, 2, 3",
		session => "WITH marked AS (SELECT customer_id, ts, amount, "
		  . "CASE WHEN ts - lag(ts) OVER (PARTITION BY customer_id ORDER BY ts) < interval '1 minute' "
		  . "THEN 0 ELSE 1 END AS starts FROM $rows), "
		  . "numbered AS (SELECT *, sum(starts) OVER (PARTITION BY customer_id ORDER BY ts "
		  . "ROWS UNBOUNDED PRECEDING) AS session FROM marked) "
		  . "SELECT customer_id, min(ts) AS window_start, max(ts) + interval '1 minute' AS window_end, "
		  . "count(*) AS orders, sum(amount) AS total FROM numbered GROUP BY customer_id, session",
	}->{$kind} // die "no expected query for $kind\n";
}

# The rows of a sink equal those of a query: nothing in one but not the
# other (EXCEPT both ways; equal numbers compare equal whatever their
# scale), and as many rows.  On a difference, shows some of it.
sub par_same
{
	my ($sink, $want_sql, $name) = @_;
	my $got_sql = "SELECT * FROM $sink";
	my $r = psql("SELECT (SELECT count(*) FROM (($want_sql) EXCEPT ($got_sql)) a), "
		  . "(SELECT count(*) FROM (($got_sql) EXCEPT ($want_sql)) b), "
		  . "(SELECT count(*) FROM $sink), (SELECT count(*) FROM ($want_sql) w)");
	my ($missing, $extra, $got, $want) = split /\|/, $r;
	my $ok = Test::More::is("$missing missing, $extra extra, $got rows",
		"0 missing, 0 extra, $want rows", $name);
	unless ($ok)
	{
		Test::More::diag("missing:\n" . psql("($want_sql) EXCEPT ($got_sql) ORDER BY 1, 2 LIMIT 8")
			  . "\nextra:\n" . psql("($got_sql) EXCEPT ($want_sql) ORDER BY 1, 2 LIMIT 8"));
	}
	return $ok;
}

# The key column of mailer.subtasks naming the job ("job" in the contract;
# "name" as in mailer.metrics is accepted too).
my $subtask_job_column;

sub subtask_job_column
{
	$subtask_job_column //= psql("SELECT column_name FROM information_schema.columns "
		  . "WHERE table_schema = 'mailer' AND table_name = 'subtasks' AND column_name IN ('job', 'name') "
		  . "ORDER BY column_name = 'job' DESC LIMIT 1") || 'job';
	return $subtask_job_column;
}

# How many rows mailer.subtasks has for a job (that match $cond, SQL).
sub par_subtask_count
{
	my ($job, $cond) = @_;
	return psql("SELECT count(*) FROM mailer.subtasks WHERE " . subtask_job_column() . " = '$job'"
		  . ($cond ? " AND ($cond)" : ''));
}

# mailer.subtasks while the job runs: one row per subtask 0..p-1, each
# running with a pid of its own; mailer.metrics says the parallelism.
sub par_subtasks_ok
{
	my ($job, $p, $label) = @_;
	$label //= $job;
	my $col = subtask_job_column();
	my $sql = "SELECT string_agg(subtask::text, ',' ORDER BY subtask) || ' ' || count(DISTINCT pid) "
	  . "|| ' ' || count(*) FILTER (WHERE state = 'running') FROM mailer.subtasks WHERE $col = '$job'";
	my $want = join(',', 0 .. $p - 1) . " $p $p";
	my $last;
	# A restarted subtask may not be registered yet: wait for all of them.
	eval { wait_until("$job shows $p subtasks", sub { ($last = psql($sql)) eq $want }, 60); 1 };
	Test::More::is($last, $want, "$label: mailer.subtasks shows subtasks 0.." . ($p - 1) . " running, each with its pid");
	Test::More::is(psql("SELECT parallelism FROM mailer.metrics WHERE name = '$job'"), $p,
		"$label: mailer.metrics says parallelism $p");
}

# The pids of a job's running subtasks (mailer.subtasks), or the worker's
# pid (mailer.jobs) in a build without parallel jobs.
sub par_subtask_pids
{
	my ($job, $parallel) = @_;
	my $sql = $parallel
	  ? "SELECT pid FROM mailer.subtasks WHERE " . subtask_job_column() . " = '$job' AND pid IS NOT NULL ORDER BY subtask"
	  : "SELECT pid FROM mailer.jobs WHERE name = '$job' AND pid IS NOT NULL";
	return grep { /^\d+$/ } split /\n/, psql($sql);
}

# mailer.partition_metrics: each of the topic's $n partitions listed once,
# and (in a parallel build) with the subtask that owns it: (p + topic
# index) % parallelism.  With $records, after wait_job: the partitions'
# records_in add up to it, and every position is at the end offset.
sub par_partitions_ok
{
	my ($job, $p, $n, $parallel, $label, $records) = @_;
	$label //= $job;
	Test::More::is(psql("SELECT count(DISTINCT (topic, partition)) || ' ' || count(*) "
			  . "FROM mailer.partition_metrics WHERE name = '$job'"), "$n $n",
		"$label: partition_metrics lists the $n partitions once each");
	if (defined $records)
	{
		Test::More::is(psql("SELECT sum(records_in) || ' ' || bool_and(position = end_offset) || ' ' || max(lag) "
				  . "FROM mailer.partition_metrics WHERE name = '$job'"), "$records true 0",
			"$label: partition_metrics: $records records in, every position at its end offset, no lag");
	}
	return unless $parallel;
	Test::More::is(psql("SELECT count(*) FROM mailer.partition_metrics WHERE name = '$job' "
			  . "AND subtask IS NOT DISTINCT FROM partition % $p"), $n,
		"$label: partition_metrics: partition k read by subtask k % $p");
}

# alter_job to parallelism $p: the stored spec with only that changed.
# In a build without parallel jobs (parallelism 1 alone), nothing to do.
sub alter_parallelism
{
	my ($job, $p, $parallel) = @_;
	return 'skipped' unless $parallel;
	psql("SELECT mailer.alter_job('$job', jsonb_set(spec, '{parallelism}', '$p'))
	        FROM mailer.jobs WHERE name = '$job'");
	return psql("SELECT spec->>'parallelism' FROM mailer.jobs WHERE name = '$job'");
}

1;
