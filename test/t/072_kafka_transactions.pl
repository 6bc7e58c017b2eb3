# A topic written by a transactional producer (Kafka's own client, through
# kafka.sh tx-produce): committed transactions are counted, aborted ones
# never, and the job reads the partitions to their ends, past the commit
# and abort markers that are never handed out: wait_job returns and the
# consumer lag is 0.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

fresh_extension();
my $topic = unique_name('t072');
kafka('create-topic', $topic, 2);

# Each transaction: [commit or abort, partition, first order, last order].
my @tx = ([ 'commit', 0, 1, 300 ], [ 'abort', 0, 301, 400 ], [ 'commit', 1, 401, 700 ],
	[ 'abort', 1, 701, 750 ], [ 'commit', 0, 751, 800 ], [ 'abort', 0, 801, 820 ],
	[ 'commit', 1, 821, 900 ]);
my $committed = join(' OR ', map { "i BETWEEN $_->[2] AND $_->[3]" } grep { $_->[0] eq 'commit' } @tx);
psql("DROP TABLE IF EXISTS orders_072; CREATE TABLE orders_072 AS "
	  . "SELECT i AS order_id, 'c' || (i % 10) AS customer_id, (i % 100)::numeric AS amount "
	  . "FROM generate_series(1, 900) i WHERE $committed");
my $n = psql("SELECT count(*) FROM orders_072");

my $job = 'tx_072';
totals_sink($job);
psql("SELECT mailer.create_job('$job', \$\$" . totals_spec($topic, $job, backend => 'memory') . "\$\$)");
kafka('tx-produce', $topic, map { join(':', @$_) } @tx);

my $state = eval { psql("SELECT mailer.wait_job('$job', '60 seconds')") } // "timed out: $@";
is($state, 'running', 'wait_job returns: the job read both partitions to their ends');
totals_check('orders_072', $job, 'committed orders once, aborted ones never');
is(job_metric($job, 'records_in'), $n, "records_in $n: the committed records only");
wait_for_sql('the consumer lag to be 0', "SELECT consumer_lag FROM mailer.metrics WHERE name = '$job'", '0', 30);
is(psql("SELECT string_agg(partition || ':' || lag, ' ' ORDER BY partition) FROM mailer.partition_metrics WHERE name = '$job'"),
	'0:0 1:0', 'partition_metrics: no lag on either partition');

# The positions committed are past the markers: a restart finds nothing more.
is(psql("SELECT mailer.stop_job('$job')"), 'stopped', 'stopped');
psql("SELECT mailer.start_job('$job')");
is(psql("SELECT mailer.wait_job('$job', '60 seconds')"), 'running', 'after a restart, wait_job returns too');
is(job_metric($job, 'records_in'), $n, 'records_in unchanged');

psql("SELECT mailer.drop_job('$job')");
kafka('delete-topic', $topic);
done_testing();
