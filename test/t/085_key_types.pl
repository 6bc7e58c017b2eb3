# A key of a type the job's state cannot store (issue 11, item 2).  The job
# of the issue keyed its records by textout(...), a cstring: the worker read
# it as a varlena and crashed the whole server, again after each backoff.
# Such a spec is refused at create_job with the JSON path; a job whose
# catalog row was edited by hand into such a spec fails at its worker's
# start with the same message.  Neither crashes the server.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();
drop_tables("t085");

my $started = psql("SELECT pg_postmaster_start_time()");
my $log_from = pg_log_size();

psql("CREATE TABLE t085_totals (k text PRIMARY KEY, n bigint)");
my $bad_key = q{textout('0000'||(value->>'customer_id'))};
my $spec = sub {
	my ($key) = @_;
	return qq({"source": {"type": "generator", "events": 200},
	  "steps": [{"key_by": {"k": "$key"}}, {"aggregate": {"n": "count(*)"}}],
	  "sink": {"type": "table", "table": "t085_totals"}});
};

my $err = psql_fails("SELECT mailer.create_job('t085_bad', \$\$" . $spec->($bad_key) . "\$\$)");
like($err, qr/invalid job spec at steps\[0\]\.key_by\.k: field "k" has type cstring/,
	'create_job refuses the cstring key, naming its JSON path');
like($err, qr/HINT:.*cast it/, 'with a hint to cast it');
is(psql("SELECT count(*) FROM mailer.jobs WHERE name = 't085_bad'"), '0', 'no job was made');

# A job with a storable key, then its catalog row edited by hand into the
# issue's spec: its next worker refuses the plan and the job fails.
psql("SELECT mailer.create_job('t085_edited', \$\$" . $spec->("'0000'||(value->>'customer_id')") . "\$\$)");
is(psql("SELECT mailer.wait_job('t085_edited')"), 'finished', 'a text key works');
is(psql("SELECT sum(n) FROM t085_totals"), '200', 'every record counted once');
psql("SELECT mailer.stop_job('t085_edited')");
my $bad_spec = $spec->($bad_key) =~ s/'/''/gr;
psql("UPDATE mailer.job SET spec = '$bad_spec'::jsonb WHERE name = 't085_edited'");
psql("SELECT mailer.start_job('t085_edited')");
my $info = wait_until('the edited job fails with the type error', sub {
	my $i = job_info('t085_edited');
	return $i if ($i->{last_error} // '') =~ /type cstring/;
	return undef;
}, 60);
like($info->{last_error}, qr/steps\[0\]\.key_by\.k: field "k" has type cstring/,
	'the worker refuses it with the same message');
psql("SELECT mailer.stop_job('t085_edited')");

# The server never went down.
is(psql("SELECT pg_postmaster_start_time()"), $started, 'the server was not reinitialized');
my $log = pg_log_since($log_from);
unlike($log, qr/terminated by signal/, 'no process was terminated by a signal');
unlike($log, qr/all server processes terminated; reinitializing/, 'no crash recovery');

psql("SELECT mailer.drop_job('t085_edited')");
drop_tables("t085");
done_testing();
