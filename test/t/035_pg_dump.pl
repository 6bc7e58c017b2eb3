# The catalog rows users create (jobs, their status, checkpoints, dead
# letters) are in a pg_dump of the database, and a restore brings them back.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;
use IPC::Run ();

fresh_extension();
psql("DROP TABLE IF EXISTS t040_out; CREATE TABLE t040_out (order_id bigint, r numeric)");
my $job_id = psql(q{SELECT mailer.create_job('t040_job', $${"source": {"type": "generator", "events": 100},
	"steps": [{"map": {"order_id": "(value->>'order_id')::bigint"}}, {"map": {"r": "1 / (order_id - 5)"}}],
	"sink": {"type": "table", "table": "t040_out"}}$$)});
is(psql("SELECT mailer.wait_job('t040_job')"), 'finished', 'the job finishes');
is(psql("SELECT count(*) FROM mailer.dead_letters WHERE job_id = $job_id"), '1', 'with one dead letter');

my ($dump, $err) = ('', '');
ok(IPC::Run::run(['pg_dump', '--no-owner', $ENV{PGDATABASE} // 'mailer'], '>', \$dump, '2>', \$err),
	'pg_dump succeeds') or diag($err);
for my $table ('job', 'job_status', 'checkpoints', 'dead_letters')
{
	like($dump, qr/^COPY mailer\.$table \(/m, "the dump has the rows of mailer.$table");
}
like($dump, qr/^$job_id\tt040_job\t/m, 'the job is in it');
like($dump, qr/setval\('mailer\.job_job_id_seq', $job_id, true\)/, 'and the job id sequence');

# Restore into another database: the job is there (it does not run there:
# jobs run in mailer.database only).
my $db = 't040_restore';
psql("DROP DATABASE IF EXISTS $db");
psql("CREATE DATABASE $db");
my $out = '';
ok(IPC::Run::run(['psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $db], '<', \$dump, '>', \$out, '2>', \$err),
	'the dump restores') or diag($err);
my @restored = split /\n/, `psql -X -A -t -d $db -c "SELECT j.name, s.state, (SELECT count(*) FROM mailer.checkpoints c WHERE c.job_id = j.job_id) > 0, (SELECT count(*) FROM mailer.dead_letters d WHERE d.job_id = j.job_id) FROM mailer.job j JOIN mailer.job_status s USING (job_id)"`;
is_deeply(\@restored, ['t040_job|finished|t|1'], 'the restored catalog has the job, its status, checkpoints and dead letter');
psql("DROP DATABASE $db");

psql("SELECT mailer.drop_job('t040_job')");
psql("DROP TABLE t040_out");
done_testing();
