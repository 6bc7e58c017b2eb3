# A Pulsar broker whose admin API hangs (internalStats, before each of 16
# readers opens) blocks the worker for one call's timeout (2 s) at a time,
# not one per partition, and stop_job aborts a call under way: the job
# stops within seconds, and last_error says what it waits on. The review's
# finding 2: stop_job took 22 to 27 s, more than its default timeout with
# 30 partitions. (test/lib/fake_pulsar.py slow-admin; no Pulsar needed.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use Time::HiRes ();
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

my $port = test_port(25000);
my $broker = fake_server_start($port, 'fake_pulsar.py', $port, 'slow-admin', 16);
fresh_extension();
psql('DROP TABLE IF EXISTS slow_188');
psql('CREATE TABLE slow_188 (value jsonb)');

for my $when ('starting', 'running')
{
	psql(qq{SELECT mailer.create_job('slow_188', \$\${
	  "source": {"type": "pulsar", "service_url": "http://127.0.0.1:$port", "topic": "persistent://public/default/slow", "start": "latest"},
	  "sink": {"type": "table", "table": "slow_188", "mode": "append"}, "state": {"backend": "memory"}
	}\$\$)});
	if ($when eq 'running')
	{
		# It runs, waiting for the broker: its readers' upgrades hang too.
		wait_until('last_error to say what the job waits on', sub {
			psql("SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = 'slow_188'")
			  =~ /waiting for Pulsar: reader of "[^"]+": the broker did not answer the WebSocket upgrade in time/;
		}, 60);
		pass('last_error says the reader waits for the broker');
		sleep 3;
	}
	else
	{
		wait_until('the worker to start', sub { psql("SELECT pid IS NOT NULL FROM mailer.jobs WHERE name = 'slow_188'") eq 't' }, 60);
	}
	my $t0 = Time::HiRes::time();
	is(psql("SELECT mailer.stop_job('slow_188', '2 minutes')"), 'stopped', "$when: stopped");
	my $took = Time::HiRes::time() - $t0;
	cmp_ok($took, '<', 6, sprintf("$when: stop_job took %.1f s (16 partitions behind a hanging admin API)", $took));
	psql("SELECT mailer.drop_job('slow_188')");
}
fake_server_stop($broker);

# A WebSocket service that takes the upgrade request and never answers
# (test/lib/fake_pulsar.py stall-ws): the worker waits on the socket, woken by the
# timers about once a second, not every 10 ms (the review's finding 7:
# 80 wake-ups a second, 1587 context switches in 20 s).
my $stall = fake_server_start($port, 'fake_pulsar.py', $port, 'stall-ws', 0);
psql(qq{SELECT mailer.create_job('stall_188', \$\${
  "source": {"type": "pulsar", "service_url": "http://127.0.0.1:$port", "topic": "persistent://public/default/stall"},
  "sink": {"type": "table", "table": "slow_188", "mode": "append"}, "state": {"backend": "memory"}
}\$\$)});
wait_until('the worker to start', sub { psql("SELECT pid IS NOT NULL FROM mailer.jobs WHERE name = 'stall_188'") eq 't' }, 60);
sleep 2;
my $pid = psql("SELECT pid FROM mailer.jobs WHERE name = 'stall_188'");
my $switches = sub {
	open my $f, '<', "/proc/$pid/status" or die "$pid: $!";
	my $n = 0;
	while (<$f>) { $n += $1 if /ctxt_switches:\s+(\d+)/ }
	return $n;
};
my $before = $switches->();
sleep 10;
my $woken = $switches->() - $before;
cmp_ok($woken, '<', 150, "a hung WebSocket upgrade: $woken context switches in 10 s");
psql("SELECT mailer.drop_job('stall_188')");
fake_server_stop($stall);

# 64 partitions whose readers' upgrades are refused (test/lib/fake_pulsar.py refuse-ws):
# each reader is opened again less and less often (1, 2, 4, 8 s), and no
# reopen asks for internalStats first (the review's finding 12: 64
# internalStats a second, for as long as the outage lasts).
my $log = ($ENV{MAILER_RUN_DIR} // '/tmp') . "/t188_requests.$$";
unlink $log;
my $refusing = fake_server_start($port, 'fake_pulsar.py', $port, 'refuse-ws', 64, $log);
psql(qq{SELECT mailer.create_job('refused_188', \$\${
  "source": {"type": "pulsar", "service_url": "http://127.0.0.1:$port", "topic": "persistent://public/default/refused"},
  "sink": {"type": "table", "table": "slow_188", "mode": "append"}, "state": {"backend": "memory"}
}\$\$)});
sleep 16;
psql("SELECT mailer.drop_job('refused_188')");
fake_server_stop($refusing);
open my $f, '<', $log or die "$log: $!";
my %asked;
while (<$f>) { $asked{ m{^/ws/} ? 'upgrade' : m{/internalStats$} ? 'internalStats' : 'other' }++ }
unlink $log;
cmp_ok($asked{internalStats} // 0, '<', 64, 'an outage of the readers: internalStats asked ' . ($asked{internalStats} // 0) . ' times in 16 s');
cmp_ok($asked{upgrade} // 0, '<', 64 * 8, 'the readers opened again ' . ($asked{upgrade} // 0) . ' times in 16 s (64 partitions)');
done_testing();
