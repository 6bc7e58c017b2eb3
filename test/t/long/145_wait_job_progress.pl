# mailer.wait_job says how far the job has come while it waits: a NOTICE
# every few seconds with the records read and the lag left, with SQLSTATE
# 00000 and no record content, so that a person waiting in psql sees it move.
#
# A filter sleeping 1 ms per record and batches of 100 records make the job
# take well over 5 s to read its input.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../lib";
use IPC::Run ();
use MailerTest;
use MailerKafkaTest;
use Test::More;

my $N = 8_000;
my $CUSTOMERS = 50;

fresh_extension();
psql("CREATE OR REPLACE FUNCTION slow_145() RETURNS boolean LANGUAGE plpgsql VOLATILE "
	  . "AS \$\$BEGIN PERFORM pg_sleep(0.001); RETURN true; END\$\$");
set_cluster_setting('mailer.batch_size', 100);
END { eval { set_cluster_setting('mailer.batch_size', undef) } }

# The job runs, then the records come: all of them wait to be read.
my ($job, $topic) = ('progress_145', unique_name('t145'));
kafka('create-topic', $topic, 4);
totals_sink($job);
psql("SELECT mailer.create_job('$job', \$\$"
	  . totals_spec($topic, $job, extra_steps => '{"filter": "slow_145()"}') . "\$\$)");
wait_job_running($job);
orders_source('orders_145');
orders_insert('orders_145', 1, $N, $CUSTOMERS);
orders_produce('orders_145', $topic, 1, $N);

# psql's stderr has the NOTICEs, in verbose form (with the SQLSTATE).
my ($out, $err) = ('', '');
my $t0 = time;
IPC::Run::run([ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose',
				'-c', "SELECT mailer.wait_job('$job', '5 minutes')" ],
			  '>', \$out, '2>', \$err)
  or die "wait_job failed: $err";
my $waited = time - $t0;
chomp $out;
note("wait_job took ${waited}s; its NOTICEs:\n$err");
is($out, 'running', 'wait_job returns once the input is committed');
cmp_ok($waited, '>', 5, 'the wait took over 5 s (long enough for a NOTICE)');

my @progress = $err =~ /NOTICE:  00000: job "$job": (\d+) records read(?:, (\d+) behind)? \(waited (\d+) s\)/g;
my @notices;
push @notices, [ splice(@progress, 0, 3) ] while @progress;
cmp_ok(scalar(@notices), '>=', 1, 'at least one progress NOTICE, with SQLSTATE 00000');
my @other = grep { /NOTICE/ && !/records read/ && !/^LOCATION/ } split /\n/, $err;
is_deeply(\@other, [], 'no other NOTICE');
unlike($err, qr/c\d+\t|"customer_id"|amount/, 'no record content in the NOTICEs');
SKIP:
{
	skip 'only one NOTICE', 1 if @notices < 2;
	my ($first, $last) = ($notices[0], $notices[-1]);
	cmp_ok($last->[0], '>', $first->[0], "records read move: $first->[0] then $last->[0]");
}
my @known = grep { defined $_->[1] } @notices;
cmp_ok(scalar(@known), '>=', 1, 'the lag left is known in a NOTICE');
cmp_ok($_->[0] + $_->[1], '<=', $N, "read $_->[0] + $_->[1] behind is at most the $N records")
  for @known;
cmp_ok($notices[0][2], '>=', 4, 'the first NOTICE comes after about 5 s');

totals_check('orders_145', $job, 'progress job');
psql("SELECT mailer.drop_job('$job')");
done_testing();
