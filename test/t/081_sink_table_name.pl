# The spec names the sink table, so the name is the contract (issue 11,
# item 15).  A job reads a Kafka topic into an append table:
#   - the table renamed away while the job runs: the running worker waits
#     (state waiting, waiting_for table, last_error says why), writes nothing
#     into the renamed table and commits no checkpoint;
#   - its worker restarted while the name is missing: the new worker waits
#     too, instead of failing and restarting in a loop;
#   - a new table made under the name: it receives every row from the last
#     checkpoint on, exactly once;
#   - renamed away and back while the worker runs: the same worker resumes,
#     exactly;
#   - dropped and made again with columns that no longer fit the rows the
#     worker holds: it restarts from its last checkpoint and fills the new
#     table, exactly.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $topic = fresh_topic('t081', 2);
my $produce = seq_producer($topic, 7);
sub produce { $produce->(@_) }

# "from..to n": the seq range a table holds and its row count.
sub held
{
	my ($table) = @_;
	return psql("SELECT coalesce(min(seq), 0) || '..' || coalesce(max(seq), 0) || ' ' || count(*) || ' ' || count(DISTINCT seq) FROM $table");
}

sub epoch
{
	return psql("SELECT coalesce(max(epoch), 0) FROM mailer.checkpoints WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'j081')");
}

sub wait_waiting_for_table
{
	my ($what) = @_;
	my $r;
	wait_until("$what: j081 waits for its table", sub {
		$r = psql("SELECT state || '|' || coalesce(waiting_for, '') || '|' || coalesce(last_error, '') || '|' || coalesce(pid, 0) || '|' || restarts FROM mailer.jobs WHERE name = 'j081'");
		$r =~ /^waiting\|/;
	}, 60);
	my ($state, $waiting_for, $error, $pid, $restarts) = split /\|/, $r;
	is($waiting_for, 'table', "$what: waiting_for table");
	like($error, qr/waiting for the sink table: table "public\.t081_rows" does not exist/, "$what: last_error says why");
	ok($pid > 0, "$what: its worker stays up");
	return ($pid, $restarts);
}

psql("CREATE TABLE t081_rows (seq bigint)");
psql(qq{SELECT mailer.create_job('j081', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	"steps": [{"map": {"seq": "(value->>'seq')::bigint"}}],
	"sink": {"type": "table", "table": "t081_rows"}, "checkpoint": {"interval": "200 milliseconds"}}\$\$)});
produce(1000);
is(wait_job('j081'), 'running', 'j081 has committed its first 1000 records');
is(held('t081_rows'), '1..1000 1000 1000', 'the first 1000 rows');
my $info = job_info('j081');
my ($pid0, $restarts0) = ($info->{pid}, $info->{restarts});

# Renamed away while the worker runs.
psql("ALTER TABLE t081_rows RENAME TO t081_away");
produce(1000);
my ($pid1, $restarts1) = wait_waiting_for_table('renamed away');
is($pid1, $pid0, 'renamed away: the same worker waits');
is($restarts1, $restarts0, 'renamed away: no restart');
my $epoch_waiting = epoch();
like(psql_fails("SELECT mailer.wait_job('j081', '2 seconds')"), qr/did not commit its available input/,
	'renamed away: wait_job does not return while the job waits');
is(epoch(), $epoch_waiting, 'renamed away: no checkpoint commits while the name is missing');
is(held('t081_away'), '1..1000 1000 1000', 'renamed away: nothing written into the renamed table');

# A worker that starts while the name is missing waits as well.
is(psql("SELECT pg_terminate_backend($pid1)"), 't', 'the waiting worker terminated');
my $pid2;
wait_until('a new worker waits for the table', sub {
	my $i = job_info('j081');
	$pid2 = $i->{pid};
	# The launcher counts the termination as a restart in the same round
	# as it starts the new worker, and commits it after: wait for both.
	$i->{state} eq 'waiting' && $pid2 && $pid2 != $pid1 && $i->{restarts} > $restarts1;
}, 60);
my ($pid2b, $restarts2) = wait_waiting_for_table('restarted');
is(epoch(), $epoch_waiting, 'restarted: still no checkpoint');

# A new table under the name receives the rows from the last checkpoint on.
psql("CREATE TABLE t081_rows (seq bigint, note text)");
produce(1000);
is(wait_job('j081'), 'running', 'a new table under the name: j081 goes on');
is(held('t081_rows'), '1001..3000 2000 2000', 'the new table received every row from the last checkpoint on, once');
is(held('t081_away'), '1..1000 1000 1000', 'the renamed table received nothing more');
$info = job_info('j081');
is(psql("SELECT state || ' ' || coalesce(waiting_for, 'none') FROM mailer.jobs WHERE name = 'j081'"), 'running none',
	'running again, waiting for nothing');
like($info->{last_error}, qr/waiting for the sink table/, 'last_error keeps what the job waited for');
is($info->{restarts}, $restarts2, 'no restart once the worker waited');

# Renamed away and back: the running worker holds its rows and resumes.
my $pid3 = $info->{pid};
psql("ALTER TABLE t081_rows RENAME TO t081_tmp");
produce(1000);
wait_waiting_for_table('renamed away again');
psql("ALTER TABLE t081_tmp RENAME TO t081_rows");
is(wait_job('j081'), 'running', 'renamed back: j081 goes on');
is(held('t081_rows'), '1001..4000 3000 3000', 'renamed back: every row once');
$info = job_info('j081');
is($info->{pid}, $pid3, 'renamed back: the same worker resumed');
is($info->{restarts}, $restarts2, 'renamed back: no restart');

# Made again with seq numeric: the rows held were made for bigint.
psql("DROP TABLE t081_rows");
produce(1000);
wait_waiting_for_table('dropped');
psql("CREATE TABLE t081_rows (seq numeric)");
wait_until('j081 restarted for the new columns', sub { job_info('j081')->{restarts} > $restarts2 }, 60);
like(job_info('j081')->{last_error}, qr/sink table public\.t081_rows was replaced by a table of other columns/,
	'a new table of other columns: last_error says so');
is(wait_job('j081', 120), 'running', 'a new table of other columns: j081 goes on');
is(held('t081_rows'), '4001..5000 1000 1000', 'a new table of other columns: every row from the last checkpoint on, once');

done_testing();
