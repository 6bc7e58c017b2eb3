# DROP EXTENSION mailer while a job runs, CREATE EXTENSION again, and a new
# job gets the same job id (ids start again at 1), all in one transaction.  The old job's worker
# must not pass for the new job's (wait_job answered by it, the new job
# never started), nor write into the new installation's tables or its own
# sink: the new job runs, alone, and its table is exact.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $old_topic = orders_topic('049', 2, 2_000, 50);
my $new_topic = unique_name('t049b');
kafka('create-topic', $new_topic, 2);
totals_sink('old_049');
totals_sink('new_049');

my $old_id = psql("SELECT mailer.create_job('old_049', \$\$"
	  . totals_spec($old_topic, 'old_049', backend => 'memory') . "\$\$)");
orders_produce('orders_049', $old_topic, 1, 1_000);
is(psql("SELECT mailer.wait_job('old_049')"), 'running', 'the old job runs');
totals_check('orders_049', 'old_049', 'old job', 'order_id <= 1000');
my $old_pid = job_worker_pid('old_049');

# Dropped, created again and given a new job in one transaction: the
# launcher sees the old job 1 running, then the new job 1 and the old
# job's worker still there.
my $new_id = psql("SET client_min_messages = warning; BEGIN; DROP EXTENSION mailer CASCADE; "
	  . "CREATE EXTENSION mailer; SELECT mailer.create_job('new_049', \$\$"
	  . totals_spec($new_topic, 'new_049') . "\$\$); COMMIT;");
is($new_id, $old_id, "the new job has the old job's id, $old_id");
orders_produce('orders_049', $new_topic, 1, 2_000);
is(psql("SELECT mailer.wait_job('new_049', '2 minutes')"), 'running', 'wait_job on the new job returns');
totals_check('orders_049', 'new_049', 'new job');
isnt(psql("SELECT pid FROM mailer.jobs WHERE name = 'new_049'"), $old_pid,
	"the new job's worker is not the old job's");
# More for the old job's topic: its worker, if still there, must not
# write them anywhere (its memory state would go into mailer.memory_state
# under the new job's id, its checkpoint into mailer.checkpoints).
orders_produce('orders_049', $old_topic, 1_001, 2_000);
wait_until('the old job worker to exit', sub { !defined job_worker_pid('old_049') }, 60);
pass("the old job's worker has exited");
is(psql("SELECT count(*) FROM mailer.checkpoints WHERE positions ? '$old_topic'"), 0,
	"no checkpoint of the old job in the new installation's catalog");
is(job_metric('new_049', 'records_in'), 2_000, 'the new job read its 2,000 events');
is(psql("SELECT mailer.wait_job('new_049')"), 'running', 'the new job still runs');
totals_check('orders_049', 'new_049', 'new job, at the end');
totals_check('orders_049', 'old_049', 'old job after the reinstall', 'order_id <= 1000');

psql("SELECT mailer.drop_job('new_049')");
kafka('delete-topic', $_) for $old_topic, $new_topic;
done_testing();
