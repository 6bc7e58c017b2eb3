# The Pulsar client mailer's Pulsar source and sink will stand on
# (src/connectors/pulsar_ws.c, pulsar_frame.c), through test/pulsar_tool,
# against a real Pulsar standalone (test/services/pulsar.sh): the three
# things exactly-once rests on, checked as a user would, by counts and exact
# payloads.
#
#   1. A producer's messages all land, in order, on the partition written.
#   2. A reader started from a stored message id resumes just after it
#      (the source's position in a checkpoint).
#   3. A producer that re-sends with the same name and initial sequence id
#      (the sink after a crash) has its re-sent messages dropped by the
#      broker, acknowledged as duplicates, and only the new ones stored.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerPulsarTest;
use Test::More;

pulsar_start_or_skip();

my $name = unique_name('t180');
my $topic = "public/default/$name";
is(pulsar('create-topic', $topic, 3), "topic $topic created with 3 partitions\n",
	'a topic of 3 partitions');
my $part = "$topic-partition-1";

# Fields of a read line.
sub payloads { return [ map { (split /\t/, $_, 5)[4] } @{ $_[0] } ]; }
sub ids { return [ map { (split /\t/, $_)[0] } @{ $_[0] } ]; }

# 1. Produce 20 messages to partition 1.
my @first = map { sprintf('m%02d', $_) } 1 .. 20;
my $acks = pt_produce($part, 'p180', 0, \@first, key => 'k', property => 'src=t180');
is(scalar(@$acks), 20, '20 acknowledgements');
is_deeply([ map { (split /\t/)[0] } @$acks ], [ 1 .. 20 ],
	'sequence ids 1..20 follow initialSequenceId 0, in send order');
is(scalar(grep { /\tduplicate$/ } @$acks), 0, 'none taken for a duplicate');
my %distinct = map { (split /\t/)[1] => 1 } @$acks;
is(scalar(keys %distinct), 20, '20 distinct message ids');

my ($rc, $read, $err) = pt_read($part, 'earliest', 20);
is($rc, 0, 'read 20 from earliest, and no more arrive') or diag($err);
is_deeply(payloads($read), \@first, 'exactly the 20 payloads, in order');
is(scalar(grep { (split /\t/)[1] =~ /^\d+:\d+:1:-1$/ } @$read), 20,
	'every message id names partition 1, no batch');
is(scalar(grep { (split /\t/)[2] eq 'k' && (split /\t/)[3] eq 'src=t180' } @$read), 20,
	'key and property round-trip');
for my $other (0, 2)
{
	($rc, my $none, $err) = pt_read("$topic-partition-$other", 'earliest', 0);
	is_deeply([ $rc, $none ], [ 0, [] ], "partition $other holds nothing") or diag($err);
}

# 2. Resume after a stored id: the 8th message's.
my $stored = ids($read)->[7];
($rc, my $rest, $err) = pt_read($part, $stored, 12);
is($rc, 0, 'read 12 after the 8th message id, and no more') or diag($err);
is_deeply(payloads($rest), [ @first[ 8 .. 19 ] ], 'they are m09..m20: resumed just after the stored id');
is_deeply(ids($rest), [ @{ ids($read) }[ 8 .. 19 ] ], 'with the same message ids');
($rc, my $after_last, $err) = pt_read($part, ids($read)->[19], 0);
is_deeply([ $rc, $after_last ], [ 0, [] ], 'nothing after the last id') or diag($err);

# 3. Re-send, as a sink would after a crash: same producer name, same
# initial sequence id, the 20 already stored and 5 new ones.
my @more = map { sprintf('m%02d', $_) } 21 .. 25;
$acks = pt_produce($part, 'p180', 0, [ @first, @more ]);
is_deeply([ map { /\tduplicate$/ ? 'dup' : 'new' } @$acks ], [ ('dup') x 20, ('new') x 5 ],
	'the 20 re-sent are acknowledged as duplicates (id -1:-1), the 5 new stored');

# A re-send from the middle: initialSequenceId 10 re-sends m11..m25.
$acks = pt_produce($part, 'p180', 10, [ @first[ 10 .. 19 ], @more ]);
is(scalar(grep { /\tduplicate$/ } @$acks), 15, 'a re-send from sequence id 11 on: all 15 duplicates');

($rc, $read, $err) = pt_read($part, 'earliest', 25);
is($rc, 0, 'the partition holds 25 messages, no more') or diag($err);
is_deeply(payloads($read), [ @first, @more ], 'm01..m25, each once, in order');

# Deduplication is per producer name: the name must be fixed per sink.
$acks = pt_produce($part, 'p180-other', 0, ['m01']);
unlike($acks->[0], qr/\tduplicate$/, 'another producer name is not deduplicated against p180');
($rc, $read, $err) = pt_read($part, ids($read)->[24], 1);
is_deeply([ $rc, payloads($read) ], [ 0, ['m01'] ], 'so its m01 is stored again');

# What the source must check itself: the broker does not refuse a position
# the topic lacks. An id of a ledger before the topic's first (1:1, as a
# trimmed position would be) starts the reader silently at the earliest
# message; only an id that is not one at all fails, at the handshake.
($rc, $read, $err) = pt_read($part, 'CAEQAQ==', 26);
is($rc, 0, 'a reader from ledger 1, entry 1 opens') or diag($err);
is_deeply(payloads($read), [ @first, @more, 'm01' ],
	'... and reads from the earliest message, silently: the source must compare a stored id with the topic\'s ledgers');
($rc, $read, $err) = pt_read($part, 'bogus', 1);
is($rc, 1, 'a reader from a malformed id fails');
like($err, qr/HTTP status 500/, '... at the handshake, with the broker\'s status');

pulsar('delete-topic', $topic);
done_testing();
