# MailerKafkaTest: what the Kafka end-to-end tests (test/t/04x_kafka_*.pl)
# share, on top of MailerTest.  Kept in a module of its own so that it and
# MailerTest grow independently.
#
# The data: order events are generated in SQL into a source table, then
# produced to a topic as "customer_id<TAB>json" lines, so the expected
# result is a GROUP BY over the very rows the job read.
package MailerKafkaTest;

use strict;
use warnings;
use Exporter 'import';
use IPC::Run ();
use Test::More ();
use Time::HiRes qw(time sleep);
use MailerTest;

our @EXPORT = qw(orders_source orders_insert orders_produce totals_spec
  totals_sink totals_check job_epoch wait_epoch_after job_worker_pid
  wait_server_up wait_job_running lock_tables unlock_tables
  set_cluster_setting @BACKENDS orders_topic backend_jobs check_backends
  totals_job orders_feed);

# A source table of order events (made anew; it stays after the test).
sub orders_source
{
	my ($table) = @_;
	psql("DROP TABLE IF EXISTS $table");
	psql("CREATE TABLE $table (order_id bigint PRIMARY KEY, customer_id text NOT NULL, "
		  . "amount numeric(10,2) NOT NULL, ts timestamptz NOT NULL)");
}

# Orders $from..$to over $customers customers.  Deterministic: order i goes
# to customer (i * 7919) mod $customers (7919 is prime, so every customer
# gets its share) with an amount from 0.00 to 999.99.
sub orders_insert
{
	my ($table, $from, $to, $customers) = @_;
	psql("INSERT INTO $table SELECT i, 'c' || ((i * 7919) % $customers), "
		  . "((i * 104729) % 100000) / 100.0, "
		  . "timestamptz '2024-01-01 00:00:00+00' + i * interval '1 second' "
		  . "FROM generate_series(${from}::bigint, ${to}::bigint) i");
}

# Produce the orders $from..$to of the source table to a topic, keyed by
# customer, in order_id order; psql's output goes straight into kcat.
# $opt{partition} pins a partition.
sub orders_produce
{
	my ($table, $topic, $from, $to, %opt) = @_;
	my $sql = "SELECT customer_id || E'\\t' || json_build_object('order_id', order_id, "
	  . "'customer_id', customer_id, 'amount', amount, 'ts', ts)::text "
	  . "FROM $table WHERE order_id BETWEEN $from AND $to ORDER BY order_id";
	my @psql = ('psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-c', $sql);
	my @kcat = ('kcat', '-b', $MailerTest::BROKERS, '-P', '-t', $topic, '-z', 'lz4', '-K', "\t");
	push @kcat, '-p', $opt{partition} if defined $opt{partition};
	my ($err1, $err2) = ('', '');
	IPC::Run::run(\@psql, '2>', \$err1, '|', \@kcat, '2>', \$err2)
	  or die "producing orders $from..$to to $topic failed: $err1$err2\n";
}

# The keyed totals sink table (made anew).
sub totals_sink
{
	my ($table) = @_;
	psql("DROP TABLE IF EXISTS $table");
	psql("CREATE TABLE $table (customer_id text PRIMARY KEY, orders bigint NOT NULL, total numeric NOT NULL)");
}

# The keyed totals job: per customer, count(*) and sum(amount), upserted
# into $sink.  %opt: backend, start, interval (checkpoint), retain, group,
# extra_steps (JSON text of steps put before key_by), options (JSON object),
# source and checkpoint (JSON text of more fields of either object).
sub totals_spec
{
	my ($topic, $sink, %opt) = @_;
	my $steps = $opt{extra_steps} ? "$opt{extra_steps}, " : '';
	my $source_extra = '';
	$source_extra .= qq(, "start": "$opt{start}") if $opt{start};
	$source_extra .= qq(, "options": $opt{options}) if $opt{options};
	$source_extra .= ", $opt{source}" if $opt{source};
	my $ckpt = qq("interval": "@{[ $opt{interval} // '1 second' ]}");
	$ckpt .= qq(, "retain": $opt{retain}) if $opt{retain};
	$ckpt .= ", $opt{checkpoint}" if $opt{checkpoint};
	return qq({
	  "source": {"type": "kafka", "brokers": "$MailerTest::BROKERS", "topic": "$topic",
	             "format": "json"$source_extra},
	  "steps": [$steps
	    {"key_by": {"customer_id": "value->>'customer_id'"}},
	    {"aggregate": {"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}}
	  ],
	  "sink": {"type": "table", "table": "$sink"},
	  "state": {"backend": "@{[ $opt{backend} // 'rocksdb' ]}"},
	  "checkpoint": {$ckpt}
	});
}

# Compare a totals sink with the GROUP BY over the source rows (all of
# them, or those matching $where): rows that differ or are missing on
# either side, and both row counts.  Passes only if they are exactly equal.
sub totals_check
{
	my ($src, $sink, $name, $where) = @_;
	$where //= 'true';
	my $r = psql(
		"WITH e AS (SELECT customer_id, count(*) AS orders, sum(amount) AS total "
		  . "FROM $src WHERE $where GROUP BY 1) "
		  . "SELECT count(*) FILTER (WHERE e.orders IS DISTINCT FROM s.orders "
		  . "OR e.total IS DISTINCT FROM s.total), count(e.customer_id), count(s.customer_id) "
		  . "FROM e FULL JOIN $sink s USING (customer_id)");
	my ($bad, $want, $got) = split /\|/, $r;
	my $ok = Test::More::is("$bad mismatches, $got rows", "0 mismatches, $want rows",
		"$name: $sink equals the GROUP BY over $src");
	unless ($ok)
	{
		Test::More::diag(psql(
			"WITH e AS (SELECT customer_id, count(*) AS orders, sum(amount) AS total "
			  . "FROM $src WHERE $where GROUP BY 1) "
			  . "SELECT e.customer_id, e.orders, s.orders, e.total, s.total "
			  . "FROM e FULL JOIN $sink s USING (customer_id) "
			  . "WHERE e.orders IS DISTINCT FROM s.orders OR e.total IS DISTINCT FROM s.total LIMIT 10"));
	}
	return $ok;
}

# The newest committed checkpoint epoch of a job (0 before any).
sub job_epoch
{
	my ($job) = @_;
	# Subtask 0's row is an epoch's commit decision: one per epoch.
	return psql("SELECT coalesce(max(c.epoch), 0) FROM mailer.checkpoints c "
		  . "JOIN mailer.job j USING (job_id) WHERE j.name = '$job' AND c.subtask = 0");
}

# Wait until a job commits a checkpoint newer than $epoch; return it.
sub wait_epoch_after
{
	my ($job, $epoch, $timeout) = @_;
	return wait_until("job $job to commit a checkpoint after epoch $epoch", sub {
		my $e = job_epoch($job);
		return $e > $epoch ? $e : 0;
	}, $timeout // 120);
}

# The pid of a job's worker, from pg_stat_activity; undef when none.
sub job_worker_pid
{
	my ($job) = @_;
	my $pid = psql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'mailer job' "
		  . "AND application_name = 'mailer job $job'");
	return $pid eq '' ? undef : $pid;
}

# After a crash: wait until the server accepts connections and its
# launcher is connected again.
sub wait_server_up
{
	my ($timeout) = @_;
	wait_until('the server to accept connections and its launcher to connect', sub {
		psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer launcher'") eq '1';
	}, $timeout // 120);
}

# Wait until a job's worker runs: state running (not restarting, not
# waiting) with a live pid.
sub wait_job_running
{
	my ($job, $timeout) = @_;
	wait_until("job $job to run", sub {
		psql("SELECT state = 'running' AND pid IS NOT NULL FROM mailer.jobs WHERE name = '$job'") eq 't'
		  && defined job_worker_pid($job);
	}, $timeout // 120);
}

# Hold an EXCLUSIVE lock on tables in a session of its own, so that a job's
# checkpoint, which writes them, blocks before its COMMIT.  Returns a handle
# for unlock_tables; a server crash ends the session too.
sub lock_tables
{
	my (@tables) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start(['psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1'],
		'<', \$in, '>', \$out, '2>', \$err);
	$in = "BEGIN; LOCK TABLE " . join(', ', @tables) . " IN EXCLUSIVE MODE; SELECT 'locked';\n";
	my $deadline = time() + 60;
	while ($out !~ /locked/)
	{
		die "could not lock @tables: $err\n" if time() > $deadline || !$h->pumpable;
		$h->pump_nb;
		sleep 0.02;
	}
	return { h => $h, in => \$in };
}

# Commit and end the locking session; after a crash it is gone already.
sub unlock_tables
{
	my ($lock) = @_;
	local $SIG{PIPE} = 'IGNORE';	# psql may have exited with its connection
	${ $lock->{in} } .= "COMMIT;\n\\q\n";
	eval { $lock->{h}->finish; 1 } or eval { $lock->{h}->kill_kill };
}

# The state backends each end-to-end test runs its jobs on.
our @BACKENDS = qw(rocksdb memory);

# The start of a per-backend test (04x): a fresh extension, a new topic of
# $partitions partitions, and the source table orders_$nn holding orders
# 1..$orders over $customers customers (produced by the test when it
# wants).  Returns the topic.
sub orders_topic
{
	my ($nn, $partitions, $orders, $customers) = @_;
	fresh_extension();
	my $topic = unique_name("t$nn");
	kafka('create-topic', $topic, $partitions);
	orders_source("orders_$nn");
	orders_insert("orders_$nn", 1, $orders, $customers);
	return $topic;
}

# A keyed totals job on $topic per state backend, "${prefix}_<backend>",
# each with a sink table of its name; %spec goes to totals_spec.  Returns
# { backend => job name }.
sub backend_jobs
{
	my ($topic, $prefix, %spec) = @_;
	my %job;
	for my $b (@BACKENDS)
	{
		$job{$b} = "${prefix}_$b";
		totals_job($job{$b}, $topic, %spec, backend => $b);
	}
	return \%job;
}

# A keyed totals job $name on $topic with a sink table of its name (made
# anew); %spec goes to totals_spec.  Returns its job_id.
sub totals_job
{
	my ($name, $topic, %spec) = @_;
	totals_sink($name);
	psql("SELECT mailer.create_job('$name', \$\$" . totals_spec($topic, $name, %spec) . "\$\$)");
	return psql("SELECT job_id FROM mailer.job WHERE name = '$name'");
}

# For each backend: its job has read what the topic holds (mailer.wait_job),
# its table equals the GROUP BY over the orders of $source matching $where,
# and (when $records_in is given) its records_in is that.
sub check_backends
{
	my ($source, $job, $what, $where, $records_in) = @_;
	for my $b (@BACKENDS)
	{
		my $j = $job->{$b};
		Test::More::is(psql("SELECT mailer.wait_job('$j', '5 minutes')"), 'running', "$what: $b caught up");
		totals_check($source, $j, "$what, $b", $where);
		Test::More::is(job_metric($j, 'records_in'), $records_in, "$what, $b: records_in $records_in")
		  if defined $records_in;
	}
}

# ALTER SYSTEM SET (or RESET, when $value is undef) and reload.
sub set_cluster_setting
{
	my ($name, $value) = @_;
	psql(defined $value ? "ALTER SYSTEM SET $name = '$value'" : "ALTER SYSTEM RESET $name");
	psql("SELECT pg_reload_conf()");
}

# A totals job fed batch by batch, so that it can never run ahead of a
# step: orders_feed($table, $topic, $job, $sink, $batch) returns a feed
# whose produce() puts the next $batch orders of $table into $topic, and
# whose caught_up($what) waits until a committed checkpoint has them all
# (mailer.wait_job) and checks that $sink counts each once.  {produced}:
# how many orders went in.
sub orders_feed
{
	my ($table, $topic, $job, $sink, $batch) = @_;
	return bless { table => $table, topic => $topic, job => $job, sink => $sink, batch => $batch,
		produced => 0 }, 'MailerKafkaTest::OrdersFeed';
}

package MailerKafkaTest::OrdersFeed;

sub produce
{
	my ($f) = @_;
	MailerKafkaTest::orders_produce($f->{table}, $f->{topic}, $f->{produced} + 1, $f->{produced} + $f->{batch});
	$f->{produced} += $f->{batch};
}

sub caught_up
{
	my ($f, $what) = @_;
	Test::More::is(MailerTest::psql("SELECT mailer.wait_job('$f->{job}', '5 minutes')"), 'running',
		"$what: caught up");
	Test::More::is(MailerTest::psql("SELECT sum(orders) FROM $f->{sink}"), $f->{produced},
		"$what: every order counted once");
}

1;
