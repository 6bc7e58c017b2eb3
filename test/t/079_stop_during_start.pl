# A stop_job while the launcher is starting the job's worker (issue 11,
# item 8): the launcher has chosen to start the worker, then stop_job asks
# the job to stop and, seeing no worker, returns.  The launcher must not
# then start the worker anyway (it used to clear the stop request just set
# and register a worker, which ran after stop_job had said "stopped").  Test
# points hold the launcher before it registers the worker, and any worker
# before it claims its slot.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
test_point_release();
psql("DROP TABLE IF EXISTS t079; CREATE TABLE t079 (order_id bigint, customer_id text)");

stop_while_launcher_held('launcher_before_start', 't079', 't079',
	q{{"map": {"order_id": "(value->>'order_id')::bigint", "customer_id": "key"}}},
	'the launcher is held before it starts the worker');
psql("DROP TABLE t079");
done_testing();
