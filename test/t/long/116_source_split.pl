# How the sources split their partitions between the subtasks of a
# parallel job, source by source, without a running job: the test-only
# module test/source_split opens a source as subtask k of parallelism P in
# a backend and reports what it read, its partitions, positions, metrics
# and wait_job's end.
#
# Generator: event n is partition n % partitions's; subtask k owns the
# partitions p with p % P == k and hands out their events in increasing
# order; together the subtasks hand out every event once; positions keep
# {"next": n} for one partition, and restore from the merge of every
# subtask's positions, also at another parallelism (rescaling).
# Kafka: partition p of the t-th topic is subtask (p + t) % P's, partitions
# added later included; positions and commits to the shared consumer group
# are the owned partitions' only; a subtask that owns none reads nothing.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use File::Copy qw(copy);
use File::Temp qw(tempdir);
use JSON::PP;
use MailerTest;
use Test::More;

my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
system('make', '-s', '-C', "$ROOT/test/source_split", "PG_CONFIG=$pg_config") == 0
  or die "could not build test/source_split\n";
# The server runs as the cluster's owner: a directory it can read.
my $dir = tempdir('source_split_XXXX', TMPDIR => 1, CLEANUP => 1);
chmod 0755, $dir;
copy("$ROOT/test/source_split/source_split.so", "$dir/source_split.so") or die "copy: $!\n";
chmod 0755, "$dir/source_split.so";

psql(<<"SQL");
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS source_split CASCADE;
CREATE SCHEMA source_split;
CREATE FUNCTION source_split.generator(events bigint, partitions int, subtask int, parallelism int,
	positions jsonb, max_events int) RETURNS jsonb
	AS '$dir/source_split.so', 'source_split_generator' LANGUAGE C;
CREATE FUNCTION source_split.kafka(brokers text, topics text[], group_id text, subtask int,
	parallelism int, positions jsonb, quiet_ms int, commit bool) RETURNS jsonb
	AS '$dir/source_split.so', 'source_split_kafka' LANGUAGE C;
SQL

my $json = JSON::PP->new->canonical;

sub sql_json
{
	my ($v) = @_;
	return defined $v ? "'" . $json->encode($v) . "'" : 'NULL';
}

sub generator
{
	my ($events, $parts, $k, $p, $positions, $max) = @_;
	return decode_json(psql("SELECT source_split.generator($events, $parts, $k, $p, "
		  . sql_json($positions) . ", " . ($max // 100000) . ")"));
}

# The first event number of partition p that is n or more.
sub first_from
{
	my ($n, $p, $parts) = @_;
	return $p if $n <= $p;
	return $p + (int(($n - $p - 1) / $parts) + 1) * $parts;
}

# Merge subtasks' positions as the job does: topic objects merged key by key.
sub merge_positions
{
	my %merged;
	for my $pos (@_)
	{
		for my $t (keys %$pos)
		{
			if (ref $pos->{$t}) { $merged{$t}{$_} = $pos->{$t}{$_} for keys %{ $pos->{$t} } }
			else { $merged{$t} = $pos->{$t} }
		}
	}
	return \%merged;
}

# Every subtask's share of a bounded generator: increasing, its own
# partitions only, all events once in all.
for my $case ([1, 1], [4, 1], [4, 2], [4, 3], [3, 5], [8, 3], [1, 2])
{
	my ($parts, $p) = @$case;
	my $events = 50;
	my %seen;
	for my $k (0 .. $p - 1)
	{
		my $r = generator($events, $parts, $k, $p);
		my @ev = map { $_->[1] } @{ $r->{events} };
		my @owned = grep { $_ % $p == $k } 0 .. $parts - 1;
		my $name = "generator, $parts partitions, subtask $k of $p";
		is_deeply([ sort { $a <=> $b } @ev ], \@ev, "$name: events in increasing order");
		is_deeply([ grep { ($_->[0] != $_->[1] % $parts) || ($_->[0] % $p != $k) } @{ $r->{events} } ], [],
			"$name: every event of an owned partition, n % partitions");
		is_deeply($r->{partitions}, [ map { [ 0, $_ ] } @owned ], "$name: reports its partitions");
		my $want = $parts == 1 && $k == 0 ? { next => $events }
		  : { generator => { map { ($_ => first_from($events, $_, $parts)) } @owned } };
		is_deeply($r->{positions}, $want, "$name: positions");
		ok($r->{finished} && $r->{reached_end}, "$name: finished and at its end");
		is(scalar(@{ $r->{metrics} }), scalar(@owned), "$name: metrics of its partitions");
		my $in = 0;
		$in += $_->[4] for @{ $r->{metrics} };
		is($in, scalar(@ev), "$name: metrics count its records");
		$seen{$_}++ for @ev;
	}
	is_deeply([ sort { $a <=> $b } keys %seen ], [ 0 .. $events - 1 ], "generator, $parts partitions at $p: every event");
	is_deeply([ grep { $seen{$_} != 1 } keys %seen ], [], "generator, $parts partitions at $p: each once");
}

# Rescaling: subtasks at different progress at parallelism 2, then the
# merged positions at parallelism 3 go on with exactly the rest.
{
	my ($events, $parts) = (60, 6);
	my (%seen, @pos);
	for my $case ([0, 7], [1, 11])
	{
		my $r = generator($events, $parts, $case->[0], 2, undef, $case->[1]);
		is(scalar(@{ $r->{events} }), $case->[1], "rescale: subtask $case->[0] of 2 read $case->[1]");
		ok(!$r->{finished}, "rescale: subtask $case->[0] of 2 not finished");
		$seen{ $_->[1] }++ for @{ $r->{events} };
		push @pos, $r->{positions};
	}
	my $merged = merge_positions(@pos);
	is(scalar(keys %{ $merged->{generator} }), $parts, 'rescale: the merged positions hold every partition');
	for my $k (0 .. 2)
	{
		my $r = generator($events, $parts, $k, 3, $merged);
		my @ev = map { $_->[1] } @{ $r->{events} };
		is_deeply([ sort { $a <=> $b } @ev ], \@ev, "rescale: subtask $k of 3 in increasing order");
		ok($r->{finished}, "rescale: subtask $k of 3 finished");
		$seen{$_}++ for @ev;
	}
	is_deeply([ sort { $a <=> $b } keys %seen ], [ 0 .. $events - 1 ], 'rescale 2 -> 3: every event');
	is_deeply([ grep { $seen{$_} != 1 } keys %seen ], [], 'rescale 2 -> 3: each once');

	# Back to parallelism 1, from positions rounds apart.
	my $r = generator(14, 2, 0, 1, { generator => { 0 => 10, 1 => 3 } });
	is_deeply([ map { $_->[1] } @{ $r->{events} } ], [ 3, 5, 7, 9, 10, 11, 12, 13 ],
		'positions rounds apart: the rest in increasing order');
}

# One partition: 0.1.0's {"next": n}, alone or merged with an empty subtask's.
for my $pos ({ next => 20 }, { next => 20, generator => {} })
{
	my $r0 = generator(30, 1, 0, 2, $pos);
	my $r1 = generator(30, 1, 1, 2, $pos);
	my $name = 'one partition at 2 from ' . $json->encode($pos);
	is_deeply([ map { $_->[1] } @{ $r0->{events} } ], [ 20 .. 29 ], "$name: subtask 0 goes on at 20");
	is_deeply($r0->{positions}, { next => 30 }, "$name: subtask 0 keeps {\"next\": n}");
	is_deeply($r1->{events}, [], "$name: subtask 1 reads nothing");
	is_deeply($r1->{partitions}, [], "$name: subtask 1 has no partition");
	is_deeply($r1->{positions}, { generator => {} }, "$name: subtask 1's positions are empty");
	ok($r1->{finished}, "$name: subtask 1 is finished at once");
}

# Unbounded: a subtask without partitions is finished; one with is not,
# and wait_job's end is what it handed out.
{
	my $r = generator(-1, 3, 1, 2, undef, 5);
	is_deeply([ map { $_->[1] } @{ $r->{events} } ], [ 1, 4, 7, 10, 13 ], 'unbounded: subtask 1 of 2, partition 1');
	ok(!$r->{finished} && $r->{reached_end}, 'unbounded: not finished, at the end wait_job marks');
	is($r->{metrics}[0][3], -1, 'unbounded: no end offset');
	ok(generator(-1, 2, 2, 3, undef, 5)->{finished}, 'unbounded: a subtask without partitions is finished');
}

like(psql_fails("SELECT source_split.generator(10, 4, 0, 1, '{\"generator\": {\"0\": 3}}', 10)"),
	qr/XX001.*malformed.*partition 0 is not an event number of it/s, 'a position of another partition is refused');
like(psql_fails("SELECT source_split.generator(10, 4, 0, 1, '{\"generator\": {\"0\": 4}}', 10)"),
	qr/XX001.*malformed.*no position of partition 1/s, 'a missing partition is refused');

# Kafka: two topics, of 3 and 2 partitions; partition p of topic t holds
# p + 2 + 3t records.
my @topics = (unique_name('s116a'), unique_name('s116b'));
kafka('create-topic', $topics[0], 3);
kafka('create-topic', $topics[1], 2);
my %count;
for my $t (0, 1)
{
	for my $part (0 .. 2 - $t)
	{
		$count{"$t:$part"} = $part + 2 + 3 * $t;
		kcat_produce($topics[$t], [ map { "k\t$_" } 1 .. $count{"$t:$part"} ], partition => $part);
	}
}
my $topics_sql = "ARRAY['$topics[0]', '$topics[1]']";

sub kafka_subtask
{
	my ($k, $p, $positions, %opt) = @_;
	my $group = $opt{group} // unique_name('g116');
	return decode_json(psql("SELECT source_split.kafka('$BROKERS', $topics_sql, '$group', $k, $p, "
		  . sql_json($positions) . ", 1500, " . ($opt{commit} ? 'true' : 'false') . ")"));
}

my $end_positions = { map { my $t = $_; ($topics[$t] => { map { ($_ => $count{"$t:$_"}) } grep { defined $count{"$t:$_"} } 0 .. 2 }) } 0, 1 };
my $group = unique_name('g116');
for my $p (1, 2, 3, 6)
{
	my %seen;
	my @pos;
	for my $k (0 .. $p - 1)
	{
		my $r = kafka_subtask($k, $p, undef, group => $group, commit => $p == 2);
		my $name = "kafka, subtask $k of $p";
		my @owned = sort grep { my ($t, $part) = split /:/; ($part + $t) % $p == $k } keys %count;
		is_deeply([ sort map { "$_->[0]:$_->[1]" } @{ $r->{partitions} } ], \@owned, "$name: its partitions");
		is_deeply([ grep { ($_->[1] + $_->[0]) % $p != $k } @{ $r->{messages} } ], [], "$name: reads its partitions only");
		my %want;
		for (@owned) { my ($t, $part) = split /:/; $want{ $topics[$t] }{$part} = $count{$_} }
		is_deeply($r->{positions}, \%want, "$name: positions of its partitions, at their ends");
		ok(!$r->{finished} && $r->{reached_end}, "$name: never finished, at the end wait_job marks");
		is(scalar(@{ $r->{metrics} }), scalar(@owned), "$name: metrics of its partitions");
		$seen{"$_->[0]:$_->[1]:$_->[2]"}++ for @{ $r->{messages} };
		push @pos, $r->{positions};
	}
	my $total = 0;
	$total += $_ for values %count;
	is(scalar(keys %seen), $total, "kafka at $p: every message");
	is_deeply([ grep { $seen{$_} != 1 } keys %seen ], [], "kafka at $p: each once");
	is_deeply(merge_positions(@pos), $end_positions, "kafka at $p: the merged positions hold every partition");
}

# The subtasks of parallelism 2 committed to one group, each its own
# partitions: the group holds every partition's end.
my %committed;
for (split /\n/, kafka('describe-group', $group))
{
	my @f = split ' ';
	$committed{ ($f[1] eq $topics[0] ? 0 : 1) . ":$f[2]" } = $f[3]
	  if @f >= 6 && $f[0] eq $group && ($f[1] eq $topics[0] || $f[1] eq $topics[1]);
}
is_deeply(\%committed, \%count, 'the consumer group holds both subtasks\' commits, none reset');

# Restoring from merged positions: another subtask's partitions are
# ignored; the subtask's own go on from theirs.
{
	my $pos = { $topics[0] => { 0 => 1, 1 => 1, 2 => 1 }, $topics[1] => { 0 => 2, 1 => 3 } };
	my $r = kafka_subtask(1, 2, $pos);
	is_deeply([ sort map { "$_->[0]:$_->[1]:$_->[2]" } @{ $r->{messages} } ],
		[ sort((map { "0:1:$_" } 1 .. 2), (map { "1:0:$_" } 2 .. 4)) ],
		'restored: subtask 1 of 2 goes on from its own positions');
	is_deeply($r->{positions}, { $topics[0] => { 1 => 3 }, $topics[1] => { 0 => 5 } },
		'restored: the other subtask\'s positions are left out');
}

# A subtask that owns no partition: nothing to read, no partition, empty positions.
{
	my $r = kafka_subtask(5, 6, $end_positions);
	is_deeply([ $r->{messages}, $r->{partitions}, $r->{positions}, $r->{metrics} ], [ [], [], {}, [] ],
		'kafka, subtask 5 of 6: no partition, nothing read, empty positions');
	ok(!$r->{finished} && $r->{reached_end}, 'kafka, subtask 5 of 6: never finished, at its end at once');
}

# Partitions added later follow the rule: topic 0's partitions 3 and 4
# go to subtasks 1 and 0 of 2, from their beginning.
kafka('add-partitions', $topics[0], 5);
kcat_produce($topics[0], [ map { "k\t$_" } 1 .. 2 ], partition => 3);
kcat_produce($topics[0], [ map { "k\t$_" } 1 .. 4 ], partition => 4);
for my $case ([0, 4, 4], [1, 3, 2])
{
	my ($k, $part, $n) = @$case;
	my $r = kafka_subtask($k, 2, $end_positions);
	is_deeply([ map { "$_->[0]:$_->[1]:$_->[2]" } @{ $r->{messages} } ], [ map { "0:$part:$_" } 0 .. $n - 1 ],
		"added partition $part: subtask $k of 2 reads it from its beginning");
	is($r->{positions}{ $topics[0] }{$part}, $n, "added partition $part: in subtask $k\'s positions");
}

psql('DROP SCHEMA source_split CASCADE');
kafka('delete-topic', $_) for @topics;
done_testing();
