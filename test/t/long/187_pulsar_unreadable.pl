# A legal Pulsar message that the frame parser cannot hold (65 properties,
# a NUL in its key or in a property value, each sent by Pulsar's Java
# client) is a dead letter at stage decode naming its message id, and the
# job reads on: the messages around it are in the table. The review's
# finding 4: the job failed on it, restarted from its checkpoint, met it
# again, forever, committing nothing.
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
fresh_extension();
psql('DROP TABLE IF EXISTS unreadable_187');
psql('CREATE TABLE unreadable_187 (kind text, i int)');

for my $kind (qw(props nulkey nulprop))
{
	my $topic = 'public/default/' . unique_name("t187$kind");
	pulsar('create-topic', $topic, 0);
	# {"i":1}, then {"i":2} with what the parser cannot hold, then {"i":3}.
	pulsar_java('PropsProduce', "persistent://$topic", $kind);
	psql(qq{SELECT mailer.create_job('u187_$kind', \$\${
	  "source": {"type": "pulsar", "service_url": "$url", "topic": "persistent://$topic"},
	  "steps": [{"map": {"kind": "'$kind'", "i": "(value->>'i')::int"}}],
	  "sink": {"type": "table", "table": "unreadable_187", "mode": "append"}, "state": {"backend": "memory"}
	}\$\$)});
	wait_job_running("u187_$kind");
	is(psql("SELECT mailer.wait_job('u187_$kind', '1 minute')"), 'running', "$kind: wait_job returns, running");
	is(psql("SELECT string_agg(i::text, ',' ORDER BY i) FROM unreadable_187 WHERE kind = '$kind'"), '1,3',
		"$kind: the messages before and after it are read");
	is(psql("SELECT restarts FROM mailer.jobs WHERE name = 'u187_$kind'"), 0, "$kind: no restart");
	like(psql("SELECT stage || ' | ' || \"offset\" || ' | ' || error FROM mailer.dead_letters d JOIN mailer.job j USING (job_id) "
		  . "WHERE j.name = 'u187_$kind'"),
		qr{^decode \| 1 \| the Pulsar message [A-Za-z0-9+/=]+ \(ledger \d+, entry 1, batch index -1\) of "\Q$topic\E" could not be read: .+},
		"$kind: a dead letter at decode naming the message id");
	psql("SELECT mailer.drop_job('u187_$kind')");
}
done_testing();
