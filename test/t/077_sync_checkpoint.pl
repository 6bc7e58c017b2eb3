# The checkpoint transaction commits synchronously whatever the job owner's
# synchronous_commit (issue 11, item 12).  With checkpoint.retain 1 the
# RocksDB snapshot of epoch E-1 is deleted right after E commits: were that
# commit asynchronous and lost in a crash, the job would come back pointing
# at E-1's deleted directory.  The owner sets synchronous_commit = off, the
# WAL writer is made lazy, the worker is held right after a checkpoint
# committed and removed the older snapshot, and the server stops
# immediately: the job must recover and give exact results.  (That the
# state directories are fsynced is not tested: only a power cut shows it.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerCluster;
use MailerTest;
use Test::More;

my $N = 20_000;
my $owner = 'r077_async';

# On a server of its own (MailerCluster): it is crashed, and its WAL
# writer made lazy.
mailer_node();
fresh_extension();
psql("DROP TABLE IF EXISTS t077; DROP ROLE IF EXISTS $owner;
	CREATE ROLE $owner LOGIN;
	ALTER ROLE $owner SET synchronous_commit = off;
	CREATE TABLE t077 (customer_id text PRIMARY KEY, n bigint, total numeric);
	GRANT SELECT, INSERT, UPDATE ON t077 TO $owner");

sub set_setting
{
	my ($name, $value) = @_;
	psql(defined $value ? "ALTER SYSTEM SET $name = '$value'" : "ALTER SYSTEM RESET $name");
	psql("SELECT pg_reload_conf()");
}

# WAL leaves the server's buffers only when the WAL writer wakes (every 10 s
# now) or a commit waits for it; no buffer is written ahead of time.
set_setting('wal_writer_delay', '10s');
set_setting('bgwriter_lru_maxpages', '0');

my $job_id = psql_as($owner, qq{SELECT mailer.create_job('t077', \$\${
	"source": {"type": "generator", "events": $N, "rate": 4000, "keys": 7},
	"steps": [{"key_by": {"customer_id": "key"}},
	          {"aggregate": {"n": "count(*)", "total": "sum((value->>'amount')::numeric)"}}],
	"sink": {"type": "table", "table": "t077"},
	"checkpoint": {"interval": "200 milliseconds", "retain": 1},
	"state": {"backend": "rocksdb"}}\$\$)});
wait_until('two checkpoints', sub {
	psql("SELECT coalesce(max(epoch) >= 2, false) FROM mailer.checkpoints WHERE job_id = $job_id") eq 't' });
is(psql("SELECT setting FROM pg_settings WHERE name = 'synchronous_commit'", user => $owner), 'off',
	"the owner's sessions commit asynchronously");

my $from = test_point_hold('checkpoint_after_commit');
my $worker = test_point_wait_reached('checkpoint_after_commit', $from);
ok($worker, 'the worker is held after a checkpoint committed and dropped the older snapshot');
my $dir = job_state_dir('t077');
my @ckpts = map { m{/(ckpt-\d+)$} } glob("$dir/ckpt-*");
is(scalar(@ckpts), 1, "one snapshot retained (@ckpts)");

pg_service('crash');
pg_service('start');
wait_server_ready();
test_point_release();
set_setting('wal_writer_delay', undef);
set_setting('bgwriter_lru_maxpages', undef);

# The restarted worker may commit a newer checkpoint and drop this one's
# snapshot between the query and the look at the directory: then the one
# it opened was there.  A commit lost in the crash would leave the newest
# checkpoint's snapshot missing and the job unable to go on from it.
my ($epoch, $ref, $found);
for (1 .. 5)
{
	($epoch, $ref) = split /\|/, psql("SELECT epoch, state_ref FROM mailer.checkpoints WHERE job_id = $job_id ORDER BY epoch DESC LIMIT 1");
	$found = -d "$dir/$ref";
	last if $found
	  || psql("SELECT max(epoch) FROM mailer.checkpoints WHERE job_id = $job_id") == $epoch;
}
ok($found, "the newest committed checkpoint ($epoch) has its snapshot ($ref)");
is(psql("SELECT mailer.wait_job('t077', '2 minutes')"), 'finished', 'the job recovers and finishes');
is(psql("SELECT sum(n) FROM t077"), $N, 'every record counted once');
is(psql("SELECT state FROM mailer.jobs WHERE name = 't077'"), 'finished', 'state finished');

psql("SELECT mailer.drop_job('t077')");
psql("DROP TABLE t077; DROP ROLE $owner");
done_testing();
