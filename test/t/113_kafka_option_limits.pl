# What a role other than a superuser may not ask of librdkafka: memory
# beyond the caps of source.options (256 MB each for the message queue,
# a fetch and a received message).  The caps do not bind a superuser.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
sub drop_role
{
	psql("DROP TABLE IF EXISTS out_113; DO \$\$BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'plain_113') "
		  . "THEN DROP OWNED BY plain_113; DROP ROLE plain_113; END IF; END\$\$");
}
drop_role();
psql("CREATE ROLE plain_113 LOGIN; GRANT USAGE ON SCHEMA mailer TO plain_113; "
	  . "GRANT USAGE, CREATE ON SCHEMA public TO plain_113");
psql("DROP TABLE IF EXISTS out_113; CREATE TABLE out_113 (k text PRIMARY KEY, n bigint); ALTER TABLE out_113 OWNER TO plain_113");

sub spec
{
	my ($name, $value) = @_;
	return qq({"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "t113",
	             "options": {"$name": "$value"}},
	  "steps": [{"key_by": {"k": "key"}}, {"aggregate": {"n": "count(*)"}}],
	  "sink": {"type": "table", "table": "out_113"}, "state": {"backend": "memory"}});
}

for my $case ([ 'queued.max.messages.kbytes', '2097151', '262144' ],
	[ 'fetch.max.bytes', '2147483135', '268435456' ],
	[ 'receive.message.max.bytes', '0x7fffffff', '268435456' ],
	[ 'fetch.message.max.bytes', '1000000000', '268435456' ])
{
	my ($name, $value, $cap) = @$case;
	my $err = psql_fails_as('plain_113', "SELECT mailer.describe_job(\$\$" . spec($name, $value) . "\$\$)");
	like($err, qr/permission denied to set source\.options\.\Q$name\E above $cap/, "$name $value refused");
	like($err, qr/HINT:.*\b$cap\b/, "$name: the hint names the cap");
	psql_as('plain_113', "SELECT mailer.describe_job(\$\$" . spec($name, $cap) . "\$\$)");
	pass("$name $cap allowed");
	psql("SELECT mailer.describe_job(\$\$" . spec($name, $value) . "\$\$)");
	pass("$name $value allowed to a superuser");
}
drop_role();
done_testing();
