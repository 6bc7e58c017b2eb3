# The Kafka sink's spec (issue 14): every mistake is an error with an
# errcode, a message naming its JSON path and a hint; sink.options follow
# the same rules as source.options (the owner's privileges; properties
# mailer sets itself are refused); describe_job shows the sink; secrets in
# sink.options are masked in mailer.jobs and describe_job and never reach
# the server log or an error.  Then what the records look like: key and
# value expressions in each format, headers, the defaults.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use MailerTest;
use MailerKafkaSinkTest;
use Test::More;

fresh_extension();
drop_tables('t132_');
my $log_start = pg_log_size();
my $plain = 't132_plain';
drop_roles($plain);
psql("SET client_min_messages = warning; CREATE ROLE $plain LOGIN");

my $out = ks_topic('t132_out', 1);

# A spec over the generator whose sink is $sink (JSON text); %o: steps.
sub spec
{
	my ($sink, %o) = @_;
	my $steps = $o{steps} // q([{"map": {"customer": "key", "amount": "(value->>'amount')::numeric"}}]);
	return qq({"source": {"type": "generator", "events": 20, "keys": 4, "seed": 132},
	  "steps": $steps,
	  "sink": $sink,
	  "checkpoint": {"interval": "200 milliseconds"}});
}

sub describe_fails
{
	my ($sink, %o) = @_;
	my $role = delete $o{role};
	my $sql = "SELECT mailer.describe_job(\$\$" . spec($sink, %o) . "\$\$)";
	return $role ? psql_fails_as($role, $sql) : psql_fails($sql);
}

sub create_fails
{
	my ($name, $sink, %o) = @_;
	return psql_fails("SELECT mailer.create_job('$name', \$\$" . spec($sink, %o) . "\$\$)");
}

# ---------------------------------------------------------------------------
# Validation: errcode, path, hint
# ---------------------------------------------------------------------------

my @cases = (
	[ 'no topic', qq({"type": "kafka", "brokers": "$BROKERS"}),
		qr/22023: invalid job spec at sink\.topic: required field is missing/ ],
	[ 'no brokers', qq({"type": "kafka", "topic": "$out"}),
		qr/22023: invalid job spec at sink\.brokers: required field is missing/ ],
	[ 'brokers not a string', qq({"type": "kafka", "brokers": 9092, "topic": "$out"}),
		qr/22023: invalid job spec at sink\.brokers: expected a string/ ],
	[ 'an empty topic', qq({"type": "kafka", "brokers": "$BROKERS", "topic": ""}),
		qr/22023: invalid job spec at sink\.topic/ ],
	[ 'a bad format', ks_sink($out, format => '"xml"'),
		qr/22023: invalid job spec at sink\.format: unknown value "xml"/, qr/HINT:.*json.*text.*bytes/ ],
	[ 'a bad delivery', ks_sink($out, delivery => '"twice"'),
		qr/22023: invalid job spec at sink\.delivery: unknown value "twice"/, qr/HINT:.*exactly_once.*at_least_once/ ],
	[ 'an unknown field', qq({"type": "kafka", "brokers": "$BROKERS", "topic": "$out", "partitoin": 1}),
		qr/22023: invalid job spec at sink\.partitoin: unknown field "partitoin"/, qr/HINT:.*topic/ ],
	[ 'a table sink field', qq({"type": "kafka", "brokers": "$BROKERS", "topic": "$out", "table": "x"}),
		qr/22023: invalid job spec at sink\.table: unknown field "table"/ ],
	[ 'a key that does not parse', ks_sink($out, key => '"customer +"'),
		qr/invalid job spec at sink\.key/ ],
	[ 'a value naming no field', ks_sink($out, value => '"no_such_field"'),
		qr/invalid job spec at sink\.value/ ],
	[ 'headers not an object', ks_sink($out, headers => '"h"'),
		qr/22023: invalid job spec at sink\.headers: expected an object/ ],
	[ 'a header that does not parse', ks_sink($out, headers => '{"h": "amount +"}'),
		qr/invalid job spec at sink\.headers\.h/ ],
	[ 'options not an object', ks_sink($out, options => '["linger.ms"]'),
		qr/22023: invalid job spec at sink\.options: expected an object/ ],
	[ 'an option not a string', ks_sink($out, options => '{"linger.ms": {"x": 1}}'),
		qr/22023: invalid job spec at sink\.options\.linger\.ms/ ],
	[ 'transactional.id', ks_sink($out, options => '{"transactional.id": "mine"}'),
		qr/22023: invalid job spec at sink\.options\.transactional\.id: mailer sets this property itself/ ],
	[ 'a property librdkafka refuses', ks_sink($out, options => '{"linger.ms": "soon"}'),
		qr/invalid job spec at sink\.options\.linger\.ms/ ],
);
for my $c (@cases)
{
	my ($what, $sink, $re, $hint) = @$c;
	my $err = describe_fails($sink);
	like($err, $re, "$what: refused, naming the path");
	like($err, $hint // qr/HINT:  \S/, "$what: with a hint");
}
# create_job runs the same checks and creates nothing.
like(create_fails('j132_bad', qq({"type": "kafka", "brokers": "$BROKERS"})), qr/sink\.topic: required field is missing/,
	'create_job: the same error');
is(psql("SELECT count(*) FROM mailer.jobs"), '0', 'create_job: no job was created');

# Producer properties follow the owner's privileges, as source.options do.
my $err = describe_fails(ks_sink($out, options => '{"ssl.key.location": "/etc/hostname"}'), role => $plain);
like($err, qr/42501: permission denied to set sink\.options\.ssl\.key\.location/,
	'a plain role may not name a server file (ssl.key.location)');
like($err, qr/HINT:.*pg_read_server_files/, '... the hint names pg_read_server_files');
unlike($err, qr{/etc/hostname}, '... without quoting the value');
like(describe_fails(ks_sink($out, options => '{"sasl.kerberos.kinit.cmd": "id"}'), role => $plain),
	qr/42501: permission denied to set sink\.options\.sasl\.kerberos\.kinit\.cmd/, 'nor a command (sasl.kerberos.kinit.cmd)');
is(describe_fails(ks_sink($out, options => '{"linger.ms": "5", "transaction.timeout.ms": "3000"}'), role => $plain), '',
	'a plain role may set reviewed properties (linger.ms, transaction.timeout.ms)');
is(describe_fails(ks_sink($out, options => '{"ssl.key.location": "/etc/hostname"}')), '',
	'a superuser may name a server file');

# ---------------------------------------------------------------------------
# describe_job
# ---------------------------------------------------------------------------

my $d = psql("SELECT mailer.describe_job(\$\$" . spec(ks_sink($out)) . "\$\$)");
note($d);
like($d, qr/^Sink:.*[Kk]afka/m, 'describe_job: a Kafka sink');
like($d, qr/\Q$out\E/, '... its topic');
like($d, qr/\Q$BROKERS\E/, '... its brokers');
like($d, qr/^Sink:.*exactly.once/mi, '... exactly once by default');
unlike($d, qr/INSERT INTO/, '... and no table statement');
$d = psql("SELECT mailer.describe_job(\$\$" . spec(ks_sink($out, key => '"customer"', value => q("amount * 2"),
	format => '"text"', headers => '{"source": "\'generator\'"}', delivery => '"at_least_once"',
	options => '{"linger.ms": "5"}')) . "\$\$)");
note($d);
like($d, qr/^\s*key\b.*customer/m, 'describe_job: the key expression');
like($d, qr/^\s*value\b.*amount \* 2/m, '... the value expression');
like($d, qr/^\s*value\b.*\btext\b/m, '... the format');
like($d, qr/^\s*header source\b.*'generator'/m, '... the header');
like($d, qr/^Sink:.*at.least.once/mi, '... the delivery');
like($d, qr/linger\.ms = 5/, '... and the options');

# ---------------------------------------------------------------------------
# Secrets in sink.options
# ---------------------------------------------------------------------------

my %secret = ('sasl.username' => 'user-R3QW-hush', 'sasl.password' => 'pw-T7YU-hush');
my $options = '{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", '
  . join(', ', map { qq("$_": "$secret{$_}") } sort keys %secret) . '}';
my $secret_spec = spec(ks_sink($out, options => $options));
$d = psql("SELECT mailer.describe_job(\$\$$secret_spec\$\$)");
like($d, qr/sasl\.password = \*{8}/, 'describe_job shows ******** for sink.options.sasl.password');
psql("SELECT mailer.create_job('j132_secret', \$\$$secret_spec\$\$)");
for my $k (sort keys %secret)
{
	is(psql("SELECT spec->'sink'->'options'->>'$k' FROM mailer.jobs WHERE name = 'j132_secret'"), '********',
		"mailer.jobs shows sink.options.$k as ********");
}
is(psql("SELECT spec->'sink'->'options'->>'sasl.mechanism' FROM mailer.jobs WHERE name = 'j132_secret'"), 'PLAIN',
	'... and other options as they are');
my $described = psql("SELECT mailer.describe_job(spec) FROM mailer.jobs WHERE name = 'j132_secret'");
like($described, qr/sasl\.username = \*{8}/, 'describe_job of the stored spec masks them too');
# Against a plaintext listener the SASL handshake fails: the job waits or
# retries, and says so without the secrets.
my $info;
wait_until('the job to report the failed handshake', sub {
	$info = job_info('j132_secret');
	defined $info->{last_error};
}, 120);
note("last_error: $info->{last_error}");
my $sink_error = psql("SELECT coalesce(string_agg(to_jsonb(s)->>'last_error', ' '), '') FROM mailer.kafka_sinks s WHERE job = 'j132_secret'");
my $bad_err = psql_fails("SELECT mailer.create_job('j132_bad', \$\$" . ($secret_spec =~ s/"steps"/"stepz"/r) . "\$\$)");
like($bad_err, qr/unknown field "stepz"/, 'an error in a spec with secrets');
psql("SELECT mailer.stop_job('j132_secret')");
my $log = pg_log_since($log_start);
for my $k (sort keys %secret)
{
	my $v = $secret{$k};
	unlike($log, qr/\Q$v\E/, "the server log never shows sink.options.$k");
	unlike(join(' ', $info->{last_error}, $sink_error, $bad_err, $described, $d,
		psql("SELECT spec::text FROM mailer.jobs WHERE name = 'j132_secret'")), qr/\Q$v\E/,
		"no error, view or description shows sink.options.$k");
}
is(psql("SELECT count(*) FROM mailer.job_secret, jsonb_each_text(secrets) e WHERE e.value = '$secret{'sasl.password'}'"), '1',
	'the secret is kept for the worker (mailer.job_secret)');
psql("SELECT mailer.drop_job('j132_secret')");

# ---------------------------------------------------------------------------
# The records: defaults, expressions, formats, headers
# ---------------------------------------------------------------------------

# A job over the generator's 20 events, to a topic of its own.  The jobs
# are all created first and run side by side; job_lines returns the
# "key<TAB>value<TAB>headers" lines a job's topic holds once published.
my %jobs;
sub start_job
{
	my ($name, $sink_fields, %o) = @_;
	my $topic = ks_topic("t132_$name", 1);
	my $done = delete $o{done} // sub { @{ $_[0] } >= 20 };
	psql("SELECT mailer.create_job('$name', \$\$" . spec(ks_sink($topic, %$sink_fields), %o) . "\$\$)");
	$jobs{$name} = { topic => $topic, done => $done };
}

sub job_lines
{
	my ($name) = @_;
	my $job = $jobs{$name};
	my $lines;
	wait_until("$name to publish the generator's events",
		sub { $lines = ks_read($job->{topic}, format => "%k\t%s\t%h\n"); $job->{done}->($lines) }, 120);
	psql("SELECT mailer.drop_job('$name')");
	return $lines;
}

start_job('j132_default', {});
start_job('j132_text', { key => q("'k-' || customer"), value => q("amount::text || ' EUR'"), format => '"text"',
	headers => q({"origin": "'gen'", "empty": "NULL::text"}) });
start_job('j132_json', { key => q("customer"), value => q("jsonb_build_object('c', customer, 'a', amount)") });
my $last_counts = q{SELECT sum(n) FROM (SELECT DISTINCT ON (k) (v::jsonb->>'n')::bigint AS n FROM t132_got ORDER BY k, n DESC) x};
start_job('j132_agg', {}, steps => q([{"key_by": {"customer": "key"}}, {"aggregate": {"n": "count(*)"}}]),
	done => sub { ks_load('t132_got', [ map { join("\t", (split /\t/)[0, 1]) } @{ $_[0] } ]); psql($last_counts) eq '20' });

# The generator's events, as a table sink would get them, to compare with.
psql("CREATE TABLE t132_events (key text, value jsonb)");
psql(q{SELECT mailer.create_job('j132_table', $${"source": {"type": "generator", "events": 20, "keys": 4, "seed": 132},
  "sink": {"type": "table", "table": "t132_events"}}$$)});
wait_until('the table job to write the 20 events', sub { psql("SELECT count(*) FROM t132_events") eq '20' }, 120);
psql("SELECT mailer.drop_job('j132_table')");

# Defaults: value = the output row as JSON, key null (stateless).
my $lines = job_lines('j132_default');
is(scalar(@$lines), 20, 'defaults: 20 records');
ks_load('t132_got', [ map { join("\t", (split /\t/)[0, 1]) } @$lines ]);
is(psql("SELECT count(k) FROM t132_got"), '0', 'defaults: a stateless job\'s key is null');
is(psql(q{SELECT count(*) FROM t132_got WHERE jsonb_typeof(v::jsonb->'amount') <> 'number'}), '0',
	'defaults: numbers are JSON numbers');
ks_same(q{SELECT v::jsonb->>'customer', (v::jsonb->>'amount')::numeric FROM t132_got},
	q{SELECT key, (value->>'amount')::numeric FROM t132_events}, 'defaults: the output fields, as a table gets them');

# Key and value expressions, format text, a header and a null header.
$lines = job_lines('j132_text');
ks_load('t132_got', [ map { join("\t", (split /\t/)[0, 1]) } @$lines ]);
ks_same(q{SELECT k, v FROM t132_got}, q{SELECT 'k-' || key, (value->>'amount')::numeric::text || ' EUR' FROM t132_events},
	'format text: key and value are the expressions\' text');
my @h = map { (split /\t/)[2] // '' } @$lines;
is(scalar(grep { /origin=gen/ } @h), 20, 'headers: each record has the header with its value');
is(scalar(grep { /empty/ } @h), 20, 'headers: and the one whose value is null');

# Format json: an expression's value as JSON text.
$lines = job_lines('j132_json');
ks_load('t132_got', [ map { join("\t", (split /\t/)[0, 1]) } @$lines ]);
ks_same(q{SELECT k::jsonb, v::jsonb FROM t132_got},
	q{SELECT to_jsonb(key), jsonb_build_object('c', key, 'a', (value->>'amount')::numeric) FROM t132_events},
	'format json: key and value are the expressions as JSON');

# An aggregate: the default key is the key_by fields.
$lines = job_lines('j132_agg');
is(psql(q{SELECT count(*) FROM t132_got WHERE k::jsonb IS DISTINCT FROM jsonb_build_object('customer', v::jsonb->'customer')}), '0',
	'aggregate: the default key is the key_by fields as a JSON object');
is(psql($last_counts), '20',
	'aggregate: the last value per key counts every event');

psql("SELECT mailer.drop_job(name) FROM mailer.jobs");
drop_roles($plain);
done_testing();
