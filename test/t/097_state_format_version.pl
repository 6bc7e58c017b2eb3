# Every keyed state value starts with a format version byte, and each
# checkpoint's state layout names the format its state was written in.
#  - State of release 0.1.0 (no version byte, no layout) is read and upgraded:
#    a job whose state is made to look like 0.1.0's resumes exactly.
#  - A value of an unknown version (a later release's, or damaged) fails the
#    job with a message naming the job, the key and the version: it is never
#    read as garbage, and the sink gets no row made from it.
#  - A checkpoint whose layout names an unknown format fails the job before
#    its state is opened, on both backends.
#  - Memory state with two rows of one key fails the job when it opens.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my $events = 3000;

sub job_id_of { my ($j) = @_; return psql("SELECT job_id FROM mailer.job WHERE name = '$j'"); }

sub create_count_job
{
	my ($j, $backend) = @_;
	psql("DROP TABLE IF EXISTS $j; CREATE TABLE $j (k text PRIMARY KEY, n bigint, s bigint)");
	psql(qq{SELECT mailer.create_job('$j', \$\${
	  "source": {"type": "generator", "keys": 5, "rate": 500, "events": $events},
	  "steps": [{"key_by": {"k": "key"}},
				{"aggregate": {"n": "count(*)", "s": "sum((value->>'order_id')::int)"}}],
	  "sink": {"type": "table", "table": "$j"},
	  "checkpoint": {"interval": "200 milliseconds"},
	  "state": {"backend": "$backend"}}\$\$)});
	wait_until("$j: a checkpoint with state", sub {
		psql("SELECT count(*) FROM $j") eq '5'
		  && psql("SELECT count(*) > 1 FROM mailer.checkpoints WHERE job_id = " . job_id_of($j)) eq 't';
	}, 60);
	is(psql("SELECT mailer.stop_job('$j')"), 'stopped', "$j: stopped mid-stream");
	cmp_ok(psql("SELECT sum(n) FROM $j"), '<', $events, "$j: stopped before the end of the stream");
}

# --- 0.1.0's format is read: strip the version byte and the layout. ---
{
	my $j = 't097_old';
	create_count_job($j, 'memory');
	my $id = job_id_of($j);
	is(psql("SELECT bool_and(get_byte(value, 0) = 2) FROM mailer.memory_state WHERE job_id = $id AND value IS NOT NULL"),
		't', 'new values start with format version 2');
	like(psql("SELECT state_layout FROM mailer.checkpoints WHERE job_id = $id ORDER BY epoch DESC LIMIT 1"),
		qr/^format\t2\t/, 'the checkpoint layout records format 2');

	# What 0.1.0 left: values without the byte, checkpoints without a layout.
	psql("UPDATE mailer.memory_state SET value = substring(value FROM 2) WHERE job_id = $id AND value IS NOT NULL");
	psql("UPDATE mailer.checkpoints SET state_layout = NULL WHERE job_id = $id");
	psql("SELECT mailer.start_job('$j')");
	wait_job_state($j, qr/^(finished|failed)$/, 120);
	my $info = job_info($j);
	is($info->{state}, 'finished', 'state in the format of 0.1.0: the job resumes and finishes');
	is(psql("SELECT sum(n) FROM $j"), $events, 'every event counted exactly once across the upgrade');
	is(psql("SELECT sum(s) = (SELECT sum(x) FROM generate_series(0, $events - 1) x) FROM $j"), 't',
		'the sums too: the old values were read as they were written');
	is(psql("SELECT bool_and(get_byte(value, 0) = 2) FROM mailer.memory_state WHERE job_id = $id"),
		't', 'after the upgrade every value has the version byte');
	like(psql("SELECT state_layout FROM mailer.checkpoints WHERE job_id = $id ORDER BY epoch DESC LIMIT 1"),
		qr/^format\t2\t/, 'and the newest checkpoint says format 2');
	psql("SELECT mailer.drop_job('$j'); DROP TABLE $j");
}

# --- A value of an unknown version fails the job, naming key and version. ---
{
	my $j = 't097_value';
	create_count_job($j, 'memory');
	my $id = job_id_of($j);
	my $rows = psql("SELECT string_agg(k || '=' || n || '/' || s, ',' ORDER BY k) FROM $j");
	psql("UPDATE mailer.memory_state SET value = set_byte(value, 0, 99) WHERE job_id = $id AND value IS NOT NULL");
	psql("SELECT mailer.start_job('$j')");
	my $info = wait_job_state($j, qr/^(failed|restarting|finished)$/, 60);
	is($info->{state}, 'failed', 'unknown value version: the job failed');
	like($info->{last_error}, qr/state of job "\Q$j\E" holds a value of unknown format version 99/,
		'last_error names the job and the version found');
	like($info->{last_error}, qr/state key \\x41[0-9a-f]+ has format version 99; this release reads versions 1 to 2/,
		'and the key');
	is(psql("SELECT string_agg(k || '=' || n || '/' || s, ',' ORDER BY k) FROM $j"), $rows,
		'the sink got no row made from the unreadable state');
	psql("SELECT mailer.drop_job('$j'); DROP TABLE $j");
}

# --- Two rows of one key (mailer.memory_state has no index to refuse the
# second): the job fails at its open, naming the job, and writes nothing. ---
{
	my $j = 't097_twice';
	create_count_job($j, 'memory');
	my $id = job_id_of($j);
	my $rows = psql("SELECT string_agg(k || '=' || n || '/' || s, ',' ORDER BY k) FROM $j");
	psql("INSERT INTO mailer.memory_state SELECT * FROM mailer.memory_state WHERE job_id = $id LIMIT 1");
	psql("SELECT mailer.start_job('$j')");
	my $info = wait_job_state($j, qr/^(failed|restarting|finished)$/, 60);
	is($info->{state}, 'failed', 'a key with two rows: the job failed');
	like($info->{last_error}, qr/memory state of job $id holds two rows of one key/,
		'last_error says what is wrong with whose state');
	like($info->{last_error}, qr/rows at ctid \(\d+,\d+\) and \(\d+,\d+\) of mailer.memory_state both hold key \\x[0-9a-f]+/,
		'and which key, and where its rows are');
	is(psql("SELECT string_agg(k || '=' || n || '/' || s, ',' ORDER BY k) FROM $j"), $rows,
		'the sink got no row from the damaged state');
	psql("SELECT mailer.drop_job('$j'); DROP TABLE $j");
}

# --- A checkpoint of an unknown format is refused before its state opens. ---
for my $b ('memory', 'rocksdb')
{
	my $j = "t097_layout_$b";
	create_count_job($j, $b);
	my $id = job_id_of($j);
	psql("UPDATE mailer.checkpoints SET state_layout = regexp_replace(state_layout, '^format\t2\t', E'format\\t7\\t')
		  WHERE job_id = $id");
	psql("SELECT mailer.start_job('$j')");
	my $info = wait_job_state($j, qr/^(failed|restarting|finished)$/, 60);
	is($info->{state}, 'failed', "$b: unknown checkpoint format: the job failed");
	like($info->{last_error}, qr/state of job "\Q$j\E" has unknown format version 7/,
		"$b: last_error names the job and the format");
	psql("SELECT mailer.drop_job('$j'); DROP TABLE $j");
}

done_testing();
