# Text that librdkafka and producers hand over is checked before mailer
# shows or stores it.  An error of librdkafka that quotes the value of a
# secret option reaches last_error and the server log with it masked; an
# unsecured-JWT sasl.oauthbearer.config that librdkafka could not parse
# (it would quote it, then crash) is refused at create_job.  A header whose
# name is not text in the database encoding makes its record a decode dead
# letter, as a key that is not text does.  A producer's timestamp outside
# timestamptz's range (multiplied into microseconds it would wrap) is no
# timestamp.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
my $topic = unique_name('t112');
kafka('create-topic', $topic, 1);
psql("DROP TABLE IF EXISTS out_112; CREATE TABLE out_112 (k text PRIMARY KEY, n bigint)");

sub spec
{
	my ($options) = @_;
	return totals_job_spec($topic, table => 'out_112', source => qq("options": $options),
		key => q({"k": "coalesce(headers->>'h', 'none')"}), backend => 'memory');
}

# An unsecured JWT's config that librdkafka cannot parse: librdkafka 2.0
# would quote it in an error, then crash the worker (and so the server).
# Refused at create_job, without showing it.
my $secret = 'SECRETTOKENVALUE';
my $from = pg_log_size();
my $err = psql_fails("SELECT mailer.create_job('oauth_112', \$\$" . spec(qq({"security.protocol": "SASL_PLAINTEXT",
	"sasl.mechanisms": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true",
	"sasl.oauthbearer.config": "principal=admin $secret=1 foo"})) . "\$\$)");
like($err, qr/invalid job spec at source\.options\.sasl\.oauthbearer\.config/, 'an unparsable unsecured JWT config is refused');
unlike($err, qr/\Q$secret\E/, '... without showing it');

# SASL_PLAINTEXT to a PLAINTEXT listener: librdkafka's errors name the
# broker, here also the value of a secret option (sasl.username).
my $job = 'secret_112';
psql("SELECT mailer.create_job('$job', \$\$" . spec(qq({"security.protocol": "SASL_PLAINTEXT",
	"sasl.mechanisms": "PLAIN", "sasl.username": "127.0.0.1", "sasl.password": "pw"})) . "\$\$)");
my $info;
wait_until('librdkafka to report the failed SASL handshake', sub {
	$info = job_info($job);
	defined $info->{last_error} && $info->{last_error} =~ /SASL/;
}, 60);
note("last_error: $info->{last_error}");
unlike($info->{last_error}, qr/127\.0\.0\.1/, 'last_error does not show the secret');
like($info->{last_error}, qr/sasl_plaintext:\/\/\*{8}:/, 'last_error shows it masked');
psql("SELECT mailer.stop_job('$job')");
unlike(psql("SELECT coalesce(string_agg(last_error, ' '), '') FROM mailer.job_status"), qr/127\.0\.0\.1/,
	'job_status does not keep the secret');
my @lines = grep { /librdkafka/ } split /\n/, pg_log_since($from);
ok(scalar(grep { /SASL/ } @lines), 'the server log has librdkafka\'s SASL lines');
is(scalar(grep { /127\.0\.0\.1|\Q$secret\E/ } @lines), 0, 'none of them shows a secret');
unlike(pg_log_since($from), qr/\Q$secret\E|terminated by signal/, 'the server log has neither the secret nor a crash');
psql("SELECT mailer.drop_job('$job')");

# Header names: one that is not UTF-8 text.
kcat_produce_raw($topic, "a\t{}", args => [ '-H', 'h=good' ]);
kcat_produce_raw($topic, "b\t{}", args => [ '-H', "\xff\xfe=bad" ]);
kcat_produce_raw($topic, "c\t{}", args => [ '-H', 'h=good' ]);
my $job2 = 'headers_112';
psql("SELECT mailer.create_job('$job2', \$\$" . spec('{}') . "\$\$)");
is(wait_job($job2), 'running', 'the topic read');
is(psql("SELECT string_agg(k || '=' || n, ',' ORDER BY k) FROM out_112"), 'good=2',
	'the records with text header names counted');
my $dl = dead_letters($job2);
is(scalar(@$dl), 1, 'one dead letter');
is($dl->[0]{stage}, 'decode', 'at the decode stage');
like($dl->[0]{error}, qr/header name/, 'its error names the header name');
is($dl->[0]{offset}, 1, 'the record with the bad header name');
psql("SELECT mailer.drop_job('$job2')");

# Producer timestamps: one now, the largest that fits, one whose
# microseconds overflow 64 bits (which would wrap to the distant past).
# librdkafka's own producer sets them.
my $tt = unique_name('t112t');
kafka('create-topic', $tt, 1, '--config', 'message.timestamp.after.max.ms=9223372036854775807');
my $helper = "/tmp/$tt-produce";
open(my $fh, '>', "$helper.c") or die "$helper.c: $!";
print $fh <<'C';
#include <stdio.h>
#include <stdlib.h>
#include <librdkafka/rdkafka.h>
int main(int argc, char **argv)
{
	char e[512];
	rd_kafka_conf_t *c = rd_kafka_conf_new();
	rd_kafka_t *rk;
	if (rd_kafka_conf_set(c, "bootstrap.servers", argv[1], e, sizeof e)) return 2;
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, e, sizeof e);
	if (!rk) return 3;
	for (int i = 3; i + 1 < argc; i += 2)
		if (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(argv[2]), RD_KAFKA_V_PARTITION(0),
			RD_KAFKA_V_KEY(argv[i], 1), RD_KAFKA_V_VALUE("{}", 2),
			RD_KAFKA_V_TIMESTAMP(strtoll(argv[i + 1], NULL, 10)), RD_KAFKA_V_END)) return 4;
	return rd_kafka_flush(rk, 30000) ? 5 : 0;
}
C
close($fh);
system('cc', '-o', $helper, "$helper.c", '-lrdkafka') == 0 or die "cannot build $helper";
system($helper, $BROKERS, $tt, 'a', '1700000000000', 'b', '9223372036854775', 'c', '9223372036854776') == 0
  or die "$helper failed";
unlink $helper, "$helper.c";
my $job3 = 'timestamps_112';
psql("TRUNCATE out_112");
create_totals_job($job3, $tt, table => 'out_112', backend => 'memory',
	key => q({"k": "key || ':' || coalesce(to_char(timestamp AT TIME ZONE 'UTC', 'YYYY'), 'null')"}));
is(wait_job($job3), 'running', 'the timestamps read');
is(psql("SELECT string_agg(k, ',' ORDER BY k) FROM out_112"), 'a:2023,b:294247,c:null',
	'a timestamp outside timestamptz\'s range is no timestamp');
is(scalar(@{ dead_letters($job3) }), 0, 'no dead letters');
psql("SELECT mailer.drop_job('$job3')");
kafka('delete-topic', $tt);
kafka('delete-topic', $topic);
done_testing();
