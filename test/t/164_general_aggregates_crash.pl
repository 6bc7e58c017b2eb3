# General aggregates through crashes (issue 19): count(DISTINCT), a
# user-defined aggregate in SQL (its state through the type's send and
# receive functions, sessions merged by its combine function) and a
# string_agg of every record's seq (a record counted twice or lost shows
# there, where count(DISTINCT) would hide it), in a keyed job and a session
# window job on both backends.  As test 054: the checkpoint interval is an
# hour, so that what is read before each crash is not committed; a SIGKILL
# of one worker, then an immediate shutdown of the server, each while a
# third of the records is read and not committed.  In the end every job's
# rows equal SQL's GROUP BY over the records.  On a server of its own
# (MailerCluster).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use MailerAggTest;
use Test::More;

mailer_node();
my $topic = fresh_topic('t164', 1);
psql(agg_uda_sql('t164', psql('SELECT current_user')));

my $n = 270;
# Each key every 1.25 s, and 6 s more after each 45 records: sessions of a 2 s gap.
agg_records('t164_src', count => $n, keys => 5, step => 0.25, burst => 45, pause => 6);
my @aggs = (
	[ n    => 'count(*)' ],
	[ cd   => "count(DISTINCT value->>'u')" ],
	[ st   => "t164_stats((value->>'v')::int)" ],
	[ seqs => "string_agg(value->>'seq', ',' ORDER BY (value->>'seq')::int)" ],
);
my $select = agg_select(\@aggs);
my %want = (keyed => agg_want_keyed('t164_src', \@aggs), session => want_sessions('t164_src', '2 seconds', $select));
my $filter = q[{"filter": "value->>'k' <> 'end'"}];
my @jobs;
for my $kind (qw(keyed session))
{
	for my $b (qw(rocksdb memory))
	{
		my $j = "t164_${kind}_$b";
		push @jobs, $j;
		agg_sink($j, $want{$kind}, $kind eq 'keyed' ? 'k' : 'k, window_start');
		psql("SELECT mailer.create_job('$j', \$spec\$"
			  . agg_spec(\@aggs, topic => $topic, table => $j, backend => $b, steps => $filter, interval => '1 hour',
				window => $kind eq 'session' ? '{"type": "session", "gap": "2 seconds"}' : undef) . "\$spec\$)");
	}
}

# The first third, committed by a stop (its final checkpoint).
agg_produce($topic, 't164_src', 'seq <= 90');
records_in_of_all(90, 'first third', @jobs);
for my $job (@jobs)
{
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job stopped after the first third");
	psql("SELECT mailer.start_job('$job')");
}
is(committed_records($_), 90, "$_: the first third committed") for @jobs;

# The second third, read but not committed, then SIGKILL of one worker (the
# server reinitializes: every worker dies).
agg_produce($topic, 't164_src', 'seq > 90 AND seq <= 180');
records_in_of_all(180, 'second third', @jobs);
is(committed_records($_), 90, "$_: the second third is not committed") for @jobs;
my $pid = worker_pid('t164_session_memory');
ok($pid > 0, 't164_session_memory has a worker');
is(kill('KILL', $pid), 1, 'SIGKILL sent to the worker of t164_session_memory');
wait_until('the server restarted after the kill',
	sub { my $p = eval { worker_pid('t164_session_memory') } // 0; $p > 0 && $p != $pid }, 120);
records_in_of_all(180, 'second third read again', @jobs);

# The last third, read but not committed, then an immediate shutdown.
agg_produce($topic, 't164_src', 'seq > 180');
records_in_of_all($n, 'last third', @jobs);
is(committed_records($_), 90, "$_: the last third is not committed") for @jobs;
pg_service('crash');
pg_service('start');
records_in_of_all($n, 'last third read again', @jobs);

# An end marker an hour later fires every session; stop_job's final
# checkpoint commits.
kcat_produce($topic, "end\t" . '{"k": "end", "ts": "2030-01-01T01:00:00Z"}' . "\n");
records_in_of_all($n + 1, 'the end marker', @jobs);
for my $job (@jobs)
{
	wait_watermark($job, '2030-01-01T00:59:00Z') if $job =~ /session/;
	is(psql("SELECT mailer.stop_job('$job')"), 'stopped', "$job stopped");
	is(committed_records($job), $n + 1, "$job: every record committed, once");
	is(job_metric($job, 'records_late') . ',' . job_metric($job, 'records_dead_lettered'), '0,0',
		"$job: nothing late or dead");
	my $kind = $job =~ /session/ ? 'session' : 'keyed';
	agg_same($job, $want{$kind}, \@aggs, "$job: exact after a kill and a crash",
		group => $kind eq 'keyed' ? 'k' : 'k, window_start, window_end');
	is(psql("SELECT sum(n) FROM $job"), $n, "$job: every record counted once");
}
cmp_ok(psql("SELECT count(*) FROM t164_session_rocksdb"), '>=', 20, 'many sessions');

done_testing();
