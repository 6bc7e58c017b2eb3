# Retention deleting a ledger under an open Pulsar reader is reported, not
# skipped in silence: a topic without retention or deduplication (nothing
# holds its ledgers), 6000 messages in one ledger, a new ledger (unload),
# a job reading slowly, and a trim that deletes the first ledger while the
# reader is in it. The reader goes on from the next ledger without a word;
# the source must say, in last_error and a WARNING, that messages of the
# deleted ledger may have been lost. The review's finding 9: 2500 of 12000
# rows, state running, no error.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();
my $url = pulsar_url();
my $N = 6000;
fresh_extension();
my $topic = 'public/default/' . unique_name('t189');
pulsar('create-topic', $topic, 0);
pulsar('admin', 'POST', "/admin/v2/persistent/$topic/deduplicationEnabled", 'false');
pulsar('admin', 'POST', "/admin/v2/persistent/$topic/retention", '{"retentionTimeInMinutes":0,"retentionSizeInMB":0}');
sleep 2;	# topic policies apply asynchronously
pulsar_java('BatchProduce', "persistent://$topic", 1, $N, 1);
pulsar('admin', 'PUT', "/admin/v2/persistent/$topic/unload");
psql('DROP TABLE IF EXISTS trim_189');
psql('CREATE TABLE trim_189 (i int)');
psql(qq{SELECT mailer.create_job('trim_189', \$\${
  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$topic"},
  "steps": [{"map": {"i": "(value->>'i')::int + 0 * length(pg_sleep(0.002)::text)"}}],
  "sink": {"type": "table", "table": "trim_189", "mode": "append"}, "state": {"backend": "memory"},
  "checkpoint": {"interval": "300 milliseconds"}
}\$\$)});
wait_until('the job to read some of the first ledger', sub { psql('SELECT count(*) FROM trim_189') >= 300 }, 60);
pulsar('admin', 'POST', "/admin/v2/persistent/$topic/trim");
my ($ledgers) = pulsar('stats', $topic) =~ /"ledgers":(\[[^\]]*\])/;
note("ledgers after the trim: $ledgers");
my $read = psql('SELECT count(*) FROM trim_189');
cmp_ok($read, '<', $N, "the trim came while the job was in the first ledger ($read of $N read)");
wait_until('last_error to report the deleted ledger', sub {
	psql("SELECT coalesce(last_error, '') FROM mailer.jobs WHERE name = 'trim_189'") ne '';
}, 60);
my $rows = psql('SELECT count(*) FROM trim_189');
like(psql("SELECT last_error FROM mailer.jobs WHERE name = 'trim_189'"),
	qr/partition 0 of Pulsar topic "persistent:\/\/\Q$topic\E": ledger \d+ of the job's position \d+:\d+ was deleted \(retention\) before the job read on; messages after it, up to ledger \d+, (may have been|were) deleted unread/,
	"last_error reports the deleted ledger ($rows of $N rows read)");
is(psql("SELECT state FROM mailer.jobs WHERE name = 'trim_189'"), 'running', 'the job goes on');
psql("SELECT mailer.drop_job('trim_189')");

# No false alarm: a job that read its ledger to the end (caught up, and
# idle past a metadata refresh) loses nothing when retention deletes that
# ledger after, and the next message comes from a new one.
my $read_all = 'public/default/' . unique_name('t189r');
pulsar('create-topic', $read_all, 0);
pulsar('admin', 'POST', "/admin/v2/persistent/$read_all/deduplicationEnabled", 'false');
pulsar('admin', 'POST', "/admin/v2/persistent/$read_all/retention", '{"retentionTimeInMinutes":0,"retentionSizeInMB":0}');
sleep 2;
pulsar_produce_lines($read_all, join('', map { qq({"i":$_}\n) } 1 .. 5));
psql('TRUNCATE trim_189');
psql(qq{SELECT mailer.create_job('read_all_189', \$\${
  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$read_all"},
  "steps": [{"map": {"i": "(value->>'i')::int"}}],
  "sink": {"type": "table", "table": "trim_189", "mode": "append"}, "state": {"backend": "memory"}
}\$\$)});
wait_job_running('read_all_189');
is(psql("SELECT mailer.wait_job('read_all_189', '1 minute')"), 'running', 'read_all_189 read the 5');
sleep 11;	# two metadata refreshes: the idle reader's ledger is looked up
my ($first) = pulsar('stats', $read_all) =~ /"ledgers":\[\{"ledgerId":(\d+)/;
pulsar('admin', 'PUT', "/admin/v2/persistent/$read_all/unload");
wait_until('the read ledger to be deleted', sub {
	eval { pulsar('admin', 'POST', "/admin/v2/persistent/$read_all/trim") };
	my ($now) = pulsar('stats', $read_all) =~ /"ledgers":\[\{"ledgerId":(\d+)/;
	return defined $now && $now != $first;
}, 60);
pulsar_produce_lines($read_all, qq({"i":6}\n));
is(psql("SELECT mailer.wait_job('read_all_189', '1 minute')"), 'running', 'read_all_189 read the 6th');
sleep 6;	# a refresh: the switch to the new ledger is looked at
is(psql('SELECT count(*) FROM trim_189'), 6, 'all 6 read');
is(psql("SELECT last_error FROM mailer.jobs WHERE name = 'read_all_189'"), '',
	'no report: the deleted ledger had been read to its end');
psql("SELECT mailer.drop_job('read_all_189')");
done_testing();
