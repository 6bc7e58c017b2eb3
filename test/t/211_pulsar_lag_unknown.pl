# Pulsar lag when the broker does not answer: a lag that cannot be asked is
# unknown (null), never the last lag seen, and consumer_lag is unknown while
# any partition's is, so a stuck job never looks caught up. A front before
# the Pulsar standalone (pulsar_lag_front.py) first refuses partition 1
# (its reader and its lag calls), then holds every lastMessageId unanswered
# and refuses every reader while the rest answers (an owner broker hung),
# with messages unread in every partition. docs/ARCHITECTURE.md, "Source poll".
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;
use Time::HiRes qw(sleep time);

pulsar_start_or_skip();
my $url = pulsar_url();
my ($target) = $url =~ m{:(\d+)$};
fresh_extension();
my $topic = 'public/default/' . unique_name('t211');
pulsar('create-topic', $topic, 4);
my $dir = $ENV{MAILER_RUN_DIR} // '/tmp';
my ($flag, $log) = ("$dir/t211.flag", "$dir/t211.log");
unlink $flag, $log;
my $port = test_port(24900);
my $front = fake_server_start($port, 'pulsar_lag_front.py', $port, $target, $flag, $log);

sub front_mode
{
	my ($mode) = @_;
	open(my $fh, '>', $flag) or die;
	print $fh "$mode\n";
	close $fh;
	# Every session cut: the readers reopen through the new mode.
	fake_server_stop($front);
	$front = fake_server_start($port, 'pulsar_lag_front.py', $port, $target, $flag, $log);
}

pulsar_produce_lines("$topic-partition-$_", qq({"v":"a"}\n)) for 0 .. 3;
psql('DROP TABLE IF EXISTS lag_211');
psql('CREATE TABLE lag_211 (v text)');
psql(pulsar_v_job_sql('lag_211', "http://127.0.0.1:$port", $topic));
my $lags = pulsar_lags_sql('lag_211');
wait_for_sql('caught up: every lag 0', $lags, '0=0,1=0,2=0,3=0', 60);
is(job_metric('lag_211', 'consumer_lag'), 0, 'caught up: consumer_lag 0');

# Partition 1 away, 30 messages unread in it: its lag unknown, so is the sum.
front_mode('p1');
pulsar_produce_lines("$topic-partition-1", join('', map { qq({"v":"p$_"}\n) } 1 .. 30));
wait_for_sql('partition 1 away: its lag unknown', "SELECT coalesce(lag::text, 'null') FROM mailer.partition_metrics "
	  . "WHERE name = 'lag_211' AND partition = 1", 'null', 30);
is(job_metric('lag_211', "coalesce(consumer_lag::text, 'null')"), 'null',
	'consumer_lag unknown while one partition\'s lag is, not the others\' sum 0');

# The owner broker hung: lastMessageId held, readers refused. Within two
# refreshes no partition shows its old 0 while 10 messages each are unread.
front_mode('hangws');
pulsar_produce_lines("$topic-partition-$_", join('', map { qq({"v":"b$_"}\n) } 1 .. 10)) for 0 .. 3;
wait_for_sql('lastMessageId hangs: every lag unknown within two refreshes', $lags, '0=null,1=null,2=null,3=null', 10);
is(job_metric('lag_211', "coalesce(consumer_lag::text, 'null')"), 'null', 'lastMessageId hangs: consumer_lag unknown');
my $t0 = time;
psql("SELECT mailer.stop_job('lag_211')");
wait_for_sql('stopped', "SELECT state FROM mailer.jobs WHERE name = 'lag_211'", 'stopped', 30);
ok(time - $t0 < 5, sprintf('stop_job within 5 s while lastMessageId hangs (%.1f s)', time - $t0));
unlink $flag;
psql("SELECT mailer.drop_job('lag_211')");
fake_server_stop($front);
done_testing();
