# An upsert sink writes a flush's rows in its conflict index's order
# (connectors/sink_table.c, key_order), so that the index inserts and
# searches go down the tree side by side.  What the owner sees must not
# change: each key's row holds its last value, every column of a row stays
# with that row (an array column, which goes as text, too), rows whose key
# has a NULL each stay a row, a refused row is a dead letter with its own
# offset, and the dead letters come in the order the rows came.  The key
# here is a unique index in descending order, nulls first, of more than
# 8 MB (the sort pays only once the index is larger than the cache); rows
# the bulk path writes are in the heap in that order.  Into a table where
# the order would show (a serial column the sink does not write), the rows
# keep the order they came in: the serial numbers them in that order.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;
use List::Util qw(shuffle);

srand(117);

my $owner = 't117_owner';
fresh_with_owner('t117', $owner);
my $topic = unique_name('t117');
kafka('create-topic', $topic, 1);
psql("CREATE TABLE t117 (name text, n int, v int CHECK (v <> 13), tags text[], note text DEFAULT 'd');
      CREATE UNIQUE INDEX t117_key ON t117 (name DESC NULLS FIRST, n);
      INSERT INTO t117 (name, n, v, note) SELECT 'p' || g, 1, 0, 'pre' FROM generate_series(1, 300000) g;
      GRANT INSERT, SELECT, UPDATE ON t117 TO $owner");
cmp_ok(psql("SELECT pg_relation_size('t117_key')"), '>=', 8 * 1024 * 1024,
	'the conflict index is larger than the size from which rows are sorted');

# Records {"name": ..., "n": ..., "v": ...} in the order given; %last: the
# last v sent for each key with a name, $sent: the records sent (the next
# one's offset).
my %last;
my $sent = 0;
sub produce
{
	my (@records) = @_;
	my @lines;
	for my $r (@records)
	{
		my ($name, $n, $v) = @$r;
		my $json_name = defined $name ? "\"$name\"" : 'null';
		push @lines, "k\t{\"name\": $json_name, \"n\": $n, \"v\": $v}";
		$last{ ($name // '<null>') . ":$n" } = $v if defined $name;
		$sent++;
	}
	kcat_produce($topic, \@lines);
}

# Names whose order differs between bytes and case: the index's collation
# decides, as psql's ORDER BY does.
my @names = map { ($_ % 3 ? 'n' : 'N') . sprintf('%03d', ($_ * 37) % 101) } 1 .. 100;
my @first;
my $v = 100;
for my $name (@names) { push @first, [$name, $_, $v++] for 1 .. 2 }
push @first, [undef, 1, $v++], [undef, 1, $v++];
# A key sent twice: its later value is the row.
push @first, [$names[5], 1, 7];
my @first_sent = (shuffle(@first[0 .. $#first - 1]), $first[-1]);
produce(@first_sent);

psql_as($owner, qq{SELECT mailer.create_job('j117', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic", "start": "earliest"},
	"steps": [{"map": {"name": "value->>'name'", "n": "(value->>'n')::int", "v": "(value->>'v')::int",
	                   "tags": "ARRAY[value->>'name', value->>'n']"}}],
	"sink": {"type": "table", "table": "t117", "key": ["name", "n"]}, "on_error": "dead_letter",
	"checkpoint": {"interval": "300 milliseconds"}}\$\$)});
is(wait_job('j117'), 'running', 'the job commits its input');

sub table_rows
{
	return psql("SELECT string_agg(name || ':' || n || '=' || v, ' ' ORDER BY name, n, v) FROM t117
	              WHERE name IS NOT NULL AND note <> 'pre'");
}
sub want_rows
{
	return psql("SELECT string_agg(k || '=' || v, ' ' ORDER BY split_part(k, ':', 1), split_part(k, ':', 2)::int, v)
	               FROM (VALUES " . join(', ', map { "('$_', $last{$_})" } sort keys %last) . ") x(k, v)");
}
is(table_rows(), want_rows(), 'each key is one row with the last value sent for it');
is(psql("SELECT count(*) FROM t117 WHERE name IS NULL AND note <> 'pre'"), 2, 'each row with a NULL key is a row of its own');
is(psql("SELECT count(*) FROM t117 WHERE note <> 'pre' AND (tags IS DISTINCT FROM ARRAY[name, n::text] OR note <> 'd')"), 0,
	"every row's other columns are its own record's");

# The rows of one statement (one subtransaction, so one xmin) are in the
# heap in the index's order: the sort is the index's, direction and nulls
# included.  (The key sent twice may have been updated by a later flush.)
is(psql("SELECT count(*) FROM (
           SELECT string_agg(coalesce(name, '<null>') || ':' || n, ' ' ORDER BY ctid) AS heap,
                  string_agg(coalesce(name, '<null>') || ':' || n, ' ' ORDER BY name DESC NULLS FIRST, n, ctid) AS index
             FROM t117 WHERE note <> 'pre' AND v <> 7 GROUP BY xmin::text) x WHERE heap <> index"), 0,
	"a flush's rows go in in the conflict index's order");

# Existing and new keys, some refused (v = 13 fails the CHECK), in a
# shuffled order: the others are written, and the dead letters are the
# refused records' own, in the order they came.
my @second;
for my $i (0 .. 59)
{
	my $name = $i % 2 ? $names[$i] : "x$i";
	push @second, [$name, 1, $i % 7 == 3 ? 13 : 1000 + $i];
}
@second = shuffle(@second);
my @refused_offsets;
{
	my $at = $sent;
	for my $r (@second) { push @refused_offsets, $at if $r->[2] == 13; $at++ }
}
produce(@second);
is(wait_job('j117'), 'running', 'the job goes on past the refused rows');
delete $last{ "$_->[0]:1" } for grep { $_->[2] == 13 } @second;
for my $r (grep { $_->[2] == 13 } @second)
{
	# a refused row leaves the key as it was: the first round's value, or no row
	my ($name) = @$r;
	my ($old) = grep { defined $_->[0] && $_->[0] eq $name && $_->[1] == 1 } reverse @first;
	$last{"$name:1"} = $old->[2] if $old;
}
is(table_rows(), want_rows(), 'the accepted rows are written, the refused ones change nothing');
my $dl = psql("SELECT string_agg(\"offset\"::text, ' ' ORDER BY at, ctid) FROM mailer.dead_letters
                WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'j117')");
is($dl, join(' ', @refused_offsets), 'the dead letters are the refused records, in the order they came');
is(psql("SELECT count(*) FROM mailer.dead_letters
          WHERE job_id = (SELECT job_id FROM mailer.jobs WHERE name = 'j117')
            AND convert_from(value, 'UTF8')::jsonb->>'v' <> '13'"), 0, "each dead letter holds its own row");

accounting_ok('j117');
psql("SELECT mailer.drop_job('j117')");

# A serial the sink does not write: its numbers follow the rows' arrival.
psql("CREATE TABLE t117_ids (id bigserial, name text, n int, v int, tags text[], note text DEFAULT 'd');
      CREATE UNIQUE INDEX t117_ids_key ON t117_ids (name DESC NULLS FIRST, n);
      INSERT INTO t117_ids (name, n, v, note) SELECT 'p' || g, 1, 0, 'pre' FROM generate_series(1, 300000) g;
      GRANT INSERT, SELECT, UPDATE ON t117_ids TO $owner;
      GRANT USAGE ON SEQUENCE t117_ids_id_seq TO $owner");
psql_as($owner, qq{SELECT mailer.create_job('j117_ids', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic", "start": "earliest"},
	"steps": [{"map": {"name": "value->>'name'", "n": "(value->>'n')::int", "v": "(value->>'v')::int"}}],
	"sink": {"type": "table", "table": "t117_ids", "key": ["name", "n"]}, "on_error": "dead_letter",
	"checkpoint": {"interval": "300 milliseconds"}}\$\$)});
is(wait_job('j117_ids'), 'running', 'the job into the table with a serial commits its input');
# (This job may read both rounds in one flush: a key of the second round
# is then its row there, or refused, and not a first round's row.)
my %in_second = map { ("$_->[0]:1" => 1) } @second;
is(psql("SELECT string_agg(v::text, ' ' ORDER BY id) FROM t117_ids WHERE note <> 'pre' AND v BETWEEN 100 AND 999"),
	join(' ', map { $_->[2] } grep { $_->[2] >= 100 && !(defined $_->[0] && $in_second{"$_->[0]:$_->[1]"}) } @first_sent),
	'the serial numbers the new keys in the order they came');
psql("SELECT mailer.drop_job('j117_ids')");
done_testing();
