# The services the other tests stand on: the extension loads in a server
# that preloads it, its launcher runs, and the Kafka broker round-trips
# messages produced with kcat.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

is(psql("SELECT count(*) FROM pg_extension WHERE extname = 'mailer'"), '1',
	'extension created');
is(psql("SELECT current_setting('shared_preload_libraries')"), 'mailer',
	'library preloaded');
is(psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer launcher' AND datname = current_database()"),
	'1', 'launcher connected to mailer.database');

# The launcher comes back after a server crash.
pg_service('crash');
pg_service('start');
is(psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer launcher'"),
	'1', 'launcher back after an immediate shutdown');

my $topic = unique_name('t001');
kafka('create-topic', $topic, 3);
my @sent = map { "k$_\t{\"n\": $_}" } 1 .. 30;
kcat_produce($topic, \@sent);
my $got = kcat_consume($topic, format => "%k\t%s\n");
is_deeply([ sort @$got ], [ sort @sent ], 'the broker returns the 30 messages produced');
my $parts = kcat_consume($topic, format => "%p\n");
my %seen = map { $_ => 1 } @$parts;
is(scalar(keys %seen), 3, 'keys spread over the 3 partitions');

done_testing();
