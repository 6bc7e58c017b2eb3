# A broker that goes away is waited for: while it is down, the jobs stay
# up with state 'waiting' and a last_error that says they wait for Kafka;
# when it returns they go on where they were, nothing lost or counted
# twice.  Once with the broker killed right after a burst (the jobs are
# still reading it), once with it stopped cleanly.  Both state backends.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $CUSTOMERS = 2_000;
my @BURSTS = ([ 1, 20_000 ], [ 20_001, 120_000 ], [ 120_001, 140_000 ], [ 140_001, 160_000 ]);

my $topic = orders_topic('047', 8, $BURSTS[-1][1], $CUSTOMERS);
my %job = %{ backend_jobs($topic, 'outage_047') };

sub check_all
{
	my ($what, $upto) = @_;
	check_backends('orders_047', \%job, $what, "order_id <= $upto", $upto);
}

sub wait_waiting
{
	my ($what) = @_;
	for my $b (@BACKENDS)
	{
		my $r = wait_until("$b to say it waits for Kafka", sub {
			my $r = psql("SELECT state || '|' || coalesce(last_error, '') || '|' || (pid IS NOT NULL)::int "
				  . "FROM mailer.jobs WHERE name = '$job{$b}'");
			return $r =~ /^waiting\|/ ? $r : undef;
		}, 60);
		my ($state, $error, $has_pid) = split /\|/, $r;
		is($state, 'waiting', "$what: $b is in state waiting");
		like($error, qr/^waiting for Kafka: /, "$what: ${b}'s last_error says it waits for Kafka");
		is($has_pid, 1, "$what: ${b}'s worker stays up");
		note("$b: $error");
	}
}

orders_produce('orders_047', $topic, @{ $BURSTS[0] });
check_all('before any outage', $BURSTS[0][1]);
my %restarts = map { $_ => psql("SELECT restarts FROM mailer.jobs WHERE name = '$job{$_}'") } @BACKENDS;

# Killed while the jobs read a burst of 100,000.
orders_produce('orders_047', $topic, @{ $BURSTS[1] });
kafka('kill');
wait_waiting('broker killed');
like(psql_fails("SELECT mailer.wait_job('$job{rocksdb}', '2 seconds')"),
	qr/did not commit its available input within 2000 ms/, 'wait_job times out while the broker is down');
kafka('start');
orders_produce('orders_047', $topic, @{ $BURSTS[2] });
check_all('after the broker was killed and started', $BURSTS[2][1]);
for my $b (@BACKENDS)
{
	is(psql("SELECT state FROM mailer.jobs WHERE name = '$job{$b}'"), 'running', "$b: running again");
}

# Stopped cleanly.
kafka('stop');
wait_waiting('broker stopped');
kafka('start');
orders_produce('orders_047', $topic, @{ $BURSTS[3] });
check_all('after the broker was stopped and started', $BURSTS[3][1]);

for my $b (@BACKENDS)
{
	is(psql("SELECT restarts FROM mailer.jobs WHERE name = '$job{$b}'"), $restarts{$b},
		"$b: the job waited through both outages, it was never restarted");
	is(psql("SELECT count(*) FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) WHERE j.name = '$job{$b}'"),
		0, "$b: no dead letters");
}

psql("SELECT mailer.drop_job('$job{$_}')") for @BACKENDS;
kafka('delete-topic', $topic);
done_testing();
