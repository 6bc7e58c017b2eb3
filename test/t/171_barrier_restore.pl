# Restoring a job to a barrier cut (issue 17): an append job (each record
# as a row, an id from a sequence telling the runs apart) checkpoints at
# cuts 1..3 with exactly the records below each cut's markers appended;
# stop_job takes no final checkpoint (cut 3's stands); restore_job(name,
# cut_epoch => 1) and a start replay the records from cut 1's markers and
# align on cuts 2 and 3 again, appending the same rows, byte for byte and
# in offset order, as the first run appended after cut 1.  A keyed totals
# job of the same group with retain_cuts 2 keeps the newest two cut
# checkpoints: restoring it to cut 1 after cuts 1..4 fails (22023) with a
# hint naming cuts 3 and 4, restoring it to cut 3 and replaying gives the
# totals at cut 4 again.  mailer.cuts shows each cut, its checkpoint and
# whether it is restorable.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerKafkaTest;
use MailerBarrierTest;
use MailerKafkaSinkTest qw(ks_same);
use Test::More;

my $fresh = bt_fresh('t171', 2);
my ($bt, $group, $source) = @$fresh{qw(barrier group source)};
my $topic = $fresh->{topics}[0];

my $rows = 't171_rows';
psql("CREATE TABLE $rows (id bigserial, partition int, \"offset\" bigint, key text, value bytea)");
psql(qq{SELECT mailer.create_job('$rows', \$\${
	"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic", "start": "earliest",
	           "format": "bytes", $source},
	"steps": [],
	"sink": {"type": "table", "table": "$rows", "mode": "append"},
	"checkpoint": {"interval": "200 milliseconds"}}\$\$)});
my $totals = 't171_totals';
totals_sink($totals);
psql("SELECT mailer.create_job('$totals', \$\$"
	  . totals_spec($topic, $totals, start => 'earliest', interval => '200 milliseconds',
		source => $source, checkpoint => '"retain_cuts": 2') . "\$\$)");

# Burst k, cut k at the ends, then more records past the cut's markers
# before the jobs align; wait for both jobs' checkpoints at the cut.
my %markers;
my $produced = 0;
sub burst_and_cut
{
	my ($cut, @jobs) = @_;
	kcat_produce($topic, bt_order_lines($produced + 1, $produced += 300, 200));
	$markers{$cut} = bt_cut_at_ends($bt, $group, $cut, [$topic])->{$topic};
	kcat_produce($topic, bt_order_lines($produced + 1, $produced += 100, 200));
	wait_cut_checkpoint($_, $cut) for @jobs;
}

sub max_id { return psql("SELECT coalesce(max(id), 0) FROM $rows") }

burst_and_cut(1, $rows, $totals);
my $id1 = max_id();
burst_and_cut(2, $rows, $totals);
burst_and_cut(3, $rows, $totals);
my $id3 = max_id();

bt_load_records($topic, 't171_rec');
my $rec = "SELECT partition, \"offset\", key, convert_to(value, 'UTF8') AS value FROM t171_rec";
my $appended = "SELECT partition, \"offset\", key, value FROM $rows";
ks_same("$appended WHERE id <= $id1", "$rec WHERE " . bt_below($markers{1}),
	'first run at cut 1: exactly the records below its markers, once each');
ks_same("$appended WHERE id <= $id3", "$rec WHERE " . bt_below($markers{3}),
	'first run at cut 3: exactly the records below its markers, once each');
is(cuts_of($rows), '1:checkpoint:r 2:checkpoint:r 3:checkpoint:r', 'mailer.cuts: cuts 1..3 checkpointed, restorable');

# Stop: no final checkpoint, cut 3's stands and nothing more is appended.
is(psql("SELECT mailer.stop_job('$rows')"), 'stopped', 'the append job stops');
is(cut_epochs($rows), '1,2,3', 'no final checkpoint on stop: the last is at cut 3');
is(max_id(), $id3, 'the stop appended nothing');

# Exactly one of epoch and cut_epoch.
like(psql_fails("SELECT mailer.restore_job('$rows', epoch => 1, cut_epoch => 1)"), qr/ERROR/,
	'restore_job refuses both an epoch and a cut epoch');
like(psql_fails("SELECT mailer.restore_job('$rows')"), qr/ERROR/, 'restore_job refuses neither');

psql("SELECT mailer.restore_job('$rows', cut_epoch => 1)");
is(cut_epochs($rows), '1', 'restored to cut 1: the checkpoints after it are gone');
psql("SELECT mailer.start_job('$rows')");
my $e1 = cut_checkpoint($rows, 1);
wait_cut_checkpoint($rows, 2, 60, $e1);
wait_cut_checkpoint($rows, 3, 60, $e1);
is(cut_epochs($rows), '1,2,3', 'the replay aligns on cuts 2 and 3 again');
is(cuts_of($rows), '1:checkpoint:r 2:checkpoint:r 3:checkpoint:r', 'mailer.cuts after the replay');

# The replay's rows are the first run's after cut 1: the same records, and
# in each partition appended in offset order, as the first run did.
my $first = "$appended WHERE id > $id1 AND id <= $id3";
my $replay = "$appended WHERE id > $id3";
ks_same($replay, $first, 'the replay appends the rows the first run appended after cut 1');
is(psql("SELECT count(*) FROM $rows WHERE id > $id1 AND value IS DISTINCT FROM
	(SELECT convert_to(value, 'UTF8') FROM t171_rec r WHERE r.partition = $rows.partition AND r.\"offset\" = $rows.\"offset\")"),
	0, 'each appended value is the record\'s bytes');
for my $run ([ 'first run', "id > $id1 AND id <= $id3" ], [ 'replay', "id > $id3" ])
{
	is(psql("SELECT count(*) FROM (SELECT \"offset\" - lag(\"offset\") OVER (PARTITION BY partition ORDER BY id) AS step
		FROM $rows WHERE $run->[1]) s WHERE step <= 0"), 0, "$run->[0]: each partition's rows appended in offset order");
}

# Cut 4; the totals job keeps the newest two cut checkpoints.
burst_and_cut(4, $rows, $totals);
is(psql("SELECT mailer.stop_job('$totals')"), 'stopped', 'the totals job stops');
is(cut_epochs($totals), '3,4', 'retain_cuts 2: the checkpoints at cuts 3 and 4 remain');
# Cuts 1 and 2 may be listed, not restorable, or no longer listed at all.
is(psql("SELECT string_agg(cut_epoch || ':' || outcome, ' ' ORDER BY cut_epoch) FROM mailer.cuts('$totals') WHERE restorable"),
	'3:checkpoint 4:checkpoint', 'mailer.cuts: only cuts 3 and 4 are restorable');
is(psql("SELECT count(*) FROM mailer.cuts('$totals') WHERE cut_epoch < 3 AND (restorable OR outcome <> 'checkpoint')"), 0,
	'mailer.cuts: cuts 1 and 2, if listed, were checkpointed and are no longer restorable');
my $err = psql_fails("SELECT mailer.restore_job('$totals', cut_epoch => 1)");
like($err, qr/ERROR:\s+22023/, 'restoring to a reclaimed cut fails with 22023');
like($err, qr/HINT:.*Retained cut epochs: 3, 4\./, 'the hint lists the retained cut epochs');
is(cut_epochs($totals), '3,4', 'the failed restore changed nothing');

psql("SELECT mailer.restore_job('$totals', cut_epoch => 3)");
psql("SELECT mailer.start_job('$totals')");
wait_cut_checkpoint($totals, 4, 60, cut_checkpoint($totals, 3));
bt_load_records($topic, 't171_rec');
cut_positions_ok($totals, 4, $topic, $markers{4});
cut_totals_check('t171_rec', $totals, $totals, 4, $topic, 'restored to cut 3 and replayed: the totals at cut 4');

psql("SELECT mailer.drop_job('$_')") for $rows, $totals;
kafka('delete-topic', $_) for $topic, $bt;
done_testing();
