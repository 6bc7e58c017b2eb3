# source.options: a role gets from librdkafka only what PostgreSQL would give
# it.  Properties that run a program (sasl.kerberos.*, and the GSSAPI
# mechanism, whose default kinit command is a shell line) need
# pg_execute_server_program; properties that name server files need
# pg_read_server_files; properties that load code need superuser; any other
# property must be on the reviewed list.  The check runs before librdkafka
# sees a property: at create_job, at describe_job (no dlopen in the
# caller's backend) and in the worker, which judges the job's owner (a spec
# edited by hand is refused there).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables('t063');

my ($plain, $exec, $reader, $both) = qw(t063_plain t063_exec t063_reader t063_both);
drop_roles($plain, $exec, $reader, $both);
psql("SET client_min_messages = warning;
      CREATE ROLE $plain LOGIN;
      CREATE ROLE $exec LOGIN IN ROLE pg_execute_server_program;
      CREATE ROLE $reader LOGIN IN ROLE pg_read_server_files;
      CREATE ROLE $both LOGIN IN ROLE pg_execute_server_program, pg_read_server_files;
      CREATE TABLE t063_out (id text);
      GRANT INSERT ON t063_out TO $plain, $exec, $reader, $both");

my $topic = unique_name('t063');
kafka('create-topic', $topic, 1);
kcat_produce($topic, [ "k1\t{\"id\": \"1\"}", "k2\t{\"id\": \"2\"}" ]);

# Files the server's OS user would write if a command ran; the test removes them.
my $tmp = "/tmp/$topic";
my %marker = map { $_ => "$tmp-$_" } qw(kinit exec exec2 principal keytab service plugin edited);
unlink values %marker;

sub spec_with
{
	my ($options) = @_;
	return qq({"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic", "options": {$options}},
	  "steps": [{"map": {"id": "value->>'id'"}}],
	  "sink": {"type": "table", "table": "t063_out"}});
}

sub create_as
{
	my ($role, $name, $options) = @_;
	return psql_fails_as($role, "SELECT mailer.create_job('$name', \$\$" . spec_with($options) . "\$\$)");
}

sub describe_as
{
	my ($role, $options) = @_;
	return psql_fails_as($role, "SELECT mailer.describe_job(\$\$" . spec_with($options) . "\$\$)");
}

my $gssapi = q("security.protocol": "sasl_plaintext", "sasl.mechanisms": "GSSAPI");

# ---------------------------------------------------------------------------
# Programs: sasl.kerberos.kinit.cmd, GSSAPI and the kinit command's parts
# ---------------------------------------------------------------------------

my $err = create_as($plain, 'j063_kinit',
	qq($gssapi, "sasl.kerberos.kinit.cmd": "id > $marker{kinit}"));
like($err, qr/42501: permission denied to set source\.options\.sasl\.(mechanisms|kerberos\.kinit\.cmd)/,
	'a plain role: a kinit command is refused with insufficient_privilege, naming the property');
like($err, qr/HINT:.*pg_execute_server_program/, '... and the hint names pg_execute_server_program');
unlike($err, qr/id > /, '... without quoting the value');
$err = create_as($plain, 'j063_kinit', qq("sasl.kerberos.kinit.cmd": "id > $marker{kinit}"));
like($err, qr/42501: permission denied to set source\.options\.sasl\.kerberos\.kinit\.cmd/,
	'a kinit command alone is refused too');
is(psql("SELECT count(*) FROM mailer.jobs"), '0', 'no job was created');

# The same spec from a role that may run programs: accepted, and its worker
# runs the command (the control that shows the refused one would have).
is(create_as($exec, 'j063_exec', qq($gssapi, "sasl.kerberos.kinit.cmd": "id > $marker{exec}")), '',
	'with pg_execute_server_program the kinit command is accepted');
wait_until('the worker ran the kinit command of the pg_execute_server_program role', sub { -s $marker{exec} }, 60);
like(slurp($marker{exec}), qr/^uid=/, '... which ran as the server\'s OS user');
ok(!-e $marker{kinit}, 'the refused kinit command never ran');
psql("SELECT mailer.drop_job('j063_exec')");

# librdkafka's default kinit command is a shell line that pastes the
# principal (unquoted) and the keytab (in double quotes) into
#   kinit -R -t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal} || ...
# so GSSAPI itself (librdkafka's default mechanism), and every property that
# is part of that line, needs pg_execute_server_program.
my $crafted = qq("sasl.kerberos.keytab": "/nonexistent", "sasl.kerberos.principal": "x; id > $marker{principal}");
my %injections = (
	'GSSAPI with a crafted principal' => [ qq($gssapi, $crafted),
		qr/source\.options\.sasl\.(mechanisms|kerberos\.keytab|kerberos\.principal)/ ],
	'the default mechanism (GSSAPI) with a crafted principal' =>
	  [ qq("security.protocol": "SASL_PLAINTEXT", $crafted),
		qr/source\.options\.(security\.protocol|sasl\.kerberos\.keytab|sasl\.kerberos\.principal)/ ],
	'the default mechanism (GSSAPI) alone' => [ q("security.protocol": "sasl_ssl"),
		qr/source\.options\.security\.protocol/ ],
	'GSSAPI alone' => [ q("sasl.mechanism": "GSSAPI"), qr/source\.options\.sasl\.mechanism\b/ ],
	'GSSAPI in lower case' => [ q("sasl.mechanisms": "gssapi"), qr/source\.options\.sasl\.mechanisms/ ],
	'a keytab with a command substitution' =>
	  [ qq("security.protocol": "SASL_PLAINTEXT", "sasl.kerberos.principal": "x", "sasl.kerberos.keytab": "\$(id > $marker{keytab})"),
		qr/source\.options\.(security\.protocol|sasl\.kerberos\.keytab|sasl\.kerberos\.principal)/ ],
	'a crafted service name' => [ qq($gssapi, "sasl.kerberos.service.name": "x; id > $marker{service}"),
		qr/source\.options\.sasl\.(mechanisms|kerberos\.service\.name)/ ],
);
my $n = 0;
for my $case (sort keys %injections)
{
	my ($options, $path) = @{ $injections{$case} };
	$err = create_as($plain, 'j063_inject_' . $n++, $options);
	like($err, qr/42501: permission denied to set $path/, "a plain role: $case is refused");
	like($err, qr/HINT:.*(pg_execute_server_program|PLAIN, SCRAM-SHA-256)/, '... with a hint');
}
# The control: from a role that may run programs (and read the keytab, a
# server file), the crafted principal runs.
like(create_as($exec, 'j063_principal', $crafted), qr/42501: permission denied to set source\.options\.sasl\.kerberos\.keytab.*\n.*\nHINT:.*pg_read_server_files/,
	'pg_execute_server_program alone: the keytab (a server file) is refused');
is(create_as($both, 'j063_principal', qq("security.protocol": "SASL_PLAINTEXT",
	"sasl.kerberos.keytab": "/nonexistent", "sasl.kerberos.principal": "x; id > $marker{exec2}")), '',
	'with pg_execute_server_program and pg_read_server_files the same principal is accepted');
wait_until('the worker ran the kinit command with the crafted principal', sub { -s $marker{exec2} }, 60);
ok(!-e $marker{$_}, "the refused $_ injection never ran") for qw(principal keytab service);
psql("SELECT mailer.drop_job('j063_principal')");
is(psql("SELECT count(*) FROM mailer.jobs"), '0', 'no job but the controls was created');
# A role that may read server files still may not use GSSAPI.
like(create_as($reader, 'j063_inject', qq("security.protocol": "sasl_plaintext", "sasl.kerberos.keytab": "/etc/krb5.keytab")),
	qr/42501: permission denied to set source\.options\.(security\.protocol|sasl\.kerberos\.keytab)/,
	'pg_read_server_files alone: a keytab (part of the kinit command) is refused');
# The other mechanisms run nothing: any role may use them.
is(describe_as($plain, q("security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512",
	"sasl.username": "u", "sasl.password": "p")), '', 'a plain role may use SCRAM over SSL');

# ---------------------------------------------------------------------------
# Code: plugin.library.paths is loaded at once by librdkafka (dlopen)
# ---------------------------------------------------------------------------

# A library whose constructor leaves a file: proof of a dlopen.
my $lib = "$tmp-plugin.so";
my $src = "$tmp-plugin.c";
open(my $fh, '>', $src) or die "$src: $!";
print $fh qq(#include <stdio.h>
__attribute__((constructor)) static void t063_loaded(void)
{ FILE *f = fopen("$marker{plugin}", "w"); if (f) { fputs("loaded", f); fclose(f); } }
);
close($fh);
system('cc', '-shared', '-fPIC', '-o', $lib, $src) == 0 or die "cannot build $lib";
chmod 0755, $lib;

$err = describe_as($plain, qq("plugin.library.paths": "$lib"));
like($err, qr/42501: permission denied to set source\.options\.plugin\.library\.paths/,
	'a plain role: plugin.library.paths is refused at describe_job');
like($err, qr/DETAIL:.*loads a library/, '... because it loads code');
like($err, qr/HINT:.*superuser/, '... which only a superuser may');
ok(!-e $marker{plugin}, '... and nothing was loaded into the backend');
like(create_as($exec, 'j063_plugin', qq("plugin.library.paths": "$lib")),
	qr/42501: permission denied to set source\.options\.plugin\.library\.paths/,
	'pg_execute_server_program does not allow it either');
ok(!-e $marker{plugin}, '... nothing loaded');
# Validation never hands code-loading properties to librdkafka: a spec
# pasted into a superuser's describe_job runs nothing in that backend.
psql("SELECT mailer.describe_job(\$\$" . spec_with(qq("plugin.library.paths": "$lib")) . "\$\$)");
pass("a superuser's describe_job accepts it");
ok(!-e $marker{plugin}, '... without loading it');
psql("SELECT mailer.create_job('j063_plugin_su', \$\$" . spec_with(qq("plugin.library.paths": "$lib")) . "\$\$)");
ok(!-e $marker{plugin}, "... nor does a superuser's create_job");
wait_until('the worker to load the plugin', sub { -e $marker{plugin} }, 60);
pass('a superuser may set it: the worker loads it (the control), then librdkafka finds no conf_init');
psql("SELECT mailer.drop_job('j063_plugin_su')");
for my $p (qw(ssl.engine.location ssl.providers ssl.engine.id))
{
	like(describe_as($reader, qq("$p": "x")), qr/42501: permission denied to set source\.options\.\Q$p\E/,
		"$p (loads code) is refused to a role with pg_read_server_files");
}

# ---------------------------------------------------------------------------
# Files: paths need pg_read_server_files; inline PEM serves other roles
# ---------------------------------------------------------------------------

for my $p (qw(ssl.ca.location ssl.key.location ssl.certificate.location ssl.keystore.location ssl.crl.location))
{
	$err = describe_as($plain, qq("security.protocol": "ssl", "$p": "/etc/hostname"));
	like($err, qr/42501: permission denied to set source\.options\.\Q$p\E/, "a plain role: $p is refused");
	like($err, qr/HINT:.*pg_read_server_files/, '... the hint names pg_read_server_files');
}
like(describe_as($plain, q("ssl.ca.location": "/etc/hostname")), qr/HINT:.*ssl\.ca\.pem/,
	'... and, for the CA, the inline ssl.ca.pem');
is(describe_as($reader, q("security.protocol": "ssl", "ssl.ca.location": "/etc/ssl/certs")), '',
	'with pg_read_server_files ssl.ca.location is accepted');
is(create_as($reader, 'j063_reader', q("security.protocol": "plaintext", "ssl.ca.location": "/etc/ssl/certs")), '',
	'... by create_job too');
is(wait_job('j063_reader'), 'running', '... whose job reads the topic');
is(describe_as($plain, q("security.protocol": "ssl", "ssl.ca.pem": "-----BEGIN CERTIFICATE-----",
	"ssl.endpoint.identification.algorithm": "none")), '',
	'a plain role may give the CA inline (ssl.ca.pem)');
like(describe_as($plain, q("topic.offset.store.path": "/tmp/x")),
	qr/42501: permission denied to set source\.options\.topic\.offset\.store\.path/,
	'a topic property through its "topic." prefix is refused');
like(describe_as($plain, q("sasl.oauthbearer.token.endpoint.url": "file:///etc/passwd")),
	qr/42501: permission denied to set source\.options\.sasl\.oauthbearer\.token\.endpoint\.url/,
	'an OIDC token endpoint that is not https:// is refused');
$err = describe_as($plain, q("bootstrap.server": "x"));
like($err, qr/42501: permission denied to set source\.options\.bootstrap\.server/,
	'a property not on the list (here a misspelt one) is refused to a plain role');
like($err, qr/HINT:.*README/, '... the hint points at the list');
like(describe_as($plain, q("group.id": "g")), qr/22023: invalid job spec at source\.options\.group\.id: mailer sets this property itself.*\n.*source\.group_id/,
	'a property mailer sets itself: a plain role gets mailer\'s own refusal and hint');

# ---------------------------------------------------------------------------
# The worker judges the job's owner: a spec edited by hand is refused
# ---------------------------------------------------------------------------

is(create_as($plain, 'j063_edited', q("client.id": "t063", "fetch.wait.max.ms": "50")), '',
	'a plain role may set properties of the list');
is(wait_job('j063_edited'), 'running', 'its job runs');
is(psql("SELECT count(*) FROM t063_out"), '4', '... and reads the topic (two jobs, two records each)');
psql(qq(UPDATE mailer.job SET spec = jsonb_set(spec, '{source,options}',
          '{"security.protocol": "sasl_plaintext", "sasl.mechanisms": "GSSAPI",
            "sasl.kerberos.kinit.cmd": "id > $marker{edited}"}')
         WHERE name = 'j063_edited'));
psql("SELECT pg_terminate_backend(pid) FROM mailer.jobs WHERE name = 'j063_edited'");
my $info;
wait_until('the restarted worker refuses the edited spec', sub {
	$info = job_info('j063_edited');
	($info->{last_error} // '') =~ /permission denied to set/;
}, 60);
like($info->{last_error}, qr/permission denied to set source\.options\.sasl\.(mechanisms|kerberos\.kinit\.cmd)/,
	"the worker refuses the property for the job's owner: $info->{last_error}");
is($info->{state}, 'restarting', '... and the job retries');
# The command would have run when the worker created its consumer, before
# it committed anything; a second refusal means the first attempt is over.
my $restarts = $info->{restarts};
wait_until('the worker refused it again', sub { job_info('j063_edited')->{restarts} > $restarts }, 60);
ok(!-e $marker{edited}, '... and the command never ran');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
unlink values %marker, $lib, $src;
done_testing();

sub slurp
{
	my ($file) = @_;
	open(my $f, '<', $file) or return '';
	local $/;
	return <$f>;
}
