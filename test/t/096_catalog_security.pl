# The catalog against other roles:
#  - describe_job and create_job type-check a spec and run none of its
#    functions (constant folding would run an IMMUTABLE one with the
#    caller's privileges: a superuser describing a user's spec);
#  - a schema mailer made before the extension is refused, by CREATE
#    EXTENSION and by ALTER EXTENSION UPDATE, when another role made it or
#    it holds objects that are not the extension's (they could replace
#    pg_catalog's functions and operators in the policies and views);
#  - mailer._live_jobs(), executable by everyone, masks other roles' errors
#    as mailer.jobs does;
#  - a job whose owner was dropped says so, with a hint, to other roles.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

fresh_extension();

my ($alice, $bob, $dave) = ('t096_alice', 't096_bob', 't096_dave');
psql("SET client_min_messages = warning;
      DROP DATABASE IF EXISTS t096_hijack;
      DO \$\$BEGIN
        IF EXISTS (SELECT FROM pg_roles WHERE rolname = '$alice') THEN
          EXECUTE 'DROP OWNED BY $alice, $bob CASCADE';
        END IF;
        IF EXISTS (SELECT FROM pg_roles WHERE rolname = '$dave') THEN
          EXECUTE 'DROP OWNED BY $dave CASCADE';
        END IF;
      END\$\$;
      DROP ROLE IF EXISTS $alice, $bob, $dave;
      CREATE ROLE $alice LOGIN;
      CREATE ROLE $bob LOGIN;
      CREATE ROLE $dave LOGIN;
      GRANT CREATE ON SCHEMA public TO $alice, $dave");

# ---------------------------------------------------------------------------
# Validation runs nothing of the spec
# ---------------------------------------------------------------------------

psql_as($alice, q{CREATE FUNCTION t096_evil() RETURNS int LANGUAGE plpgsql IMMUTABLE
	AS $$BEGIN PERFORM set_config('t096.ran_as', current_user, false); RETURN 1; END$$;
	CREATE TABLE t096_out (key text, d interval)});
my $spec = q({"source": {"type": "generator", "events": 3},
	"steps": [{"filter": "t096_evil() IS NOT NULL"}, {"map": {"key": "key", "d": "make_interval(days => 1)"}}],
	"sink": {"type": "table", "table": "t096_out"}});
is(psql("SELECT mailer.describe_job('$spec') LIKE '%t096_evil()%';
	SELECT coalesce(current_setting('t096.ran_as', true), 'nobody')"), "t\nnobody",
	'a superuser describing the spec does not run its IMMUTABLE function');
is(psql_as($alice, "SELECT mailer.create_job('j096_evil', '$spec') > 0;
	SELECT coalesce(current_setting('t096.ran_as', true), 'nobody')"), "t\nnobody",
	'create_job does not run it either');
is(wait_job('j096_evil'), 'finished', 'the worker plans for real and runs the job');
is(psql("SELECT count(*) || ' ' || min(d) FROM t096_out"), '3 1 day',
	'every record passed the filter, named and default arguments in place');
like(psql_fails("SELECT mailer.describe_job('{\"source\": {\"type\": \"generator\"}, \"steps\": [{\"filter\": \"1 / 0\"}], \"sink\": {\"type\": \"table\", \"table\": \"t096_out\"}}')"),
	qr/argument of filter must be type boolean, not type integer/, 'types are still checked');

# ---------------------------------------------------------------------------
# _live_jobs masks other roles' errors
# ---------------------------------------------------------------------------

my $secret_topic = unique_name('t096_secret');
psql_as($alice, qq{SELECT mailer.create_job('j096_wait', \$\${
	"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$secret_topic"},
	"sink": {"type": "table", "table": "t096_out"}}\$\$)});
wait_until('the job waits for its topic', sub {
	psql("SELECT error FROM mailer._live_jobs() JOIN mailer.job USING (job_id) WHERE name = 'j096_wait'") =~ /\Q$secret_topic\E/;
}, 60);
my $q = "SELECT coalesce(error, '(null)') FROM mailer._live_jobs() JOIN mailer.job USING (job_id) WHERE name = 'j096_wait'";
like(psql_as($alice, $q), qr/\Q$secret_topic\E/, 'the owner sees the live error');
is(psql_as($bob, $q), '<insufficient privilege>', 'another role calling mailer._live_jobs() directly does not');
is(psql_as($bob, "SELECT last_error FROM mailer.jobs WHERE name = 'j096_wait'"), '<insufficient privilege>',
	'nor through mailer.jobs');
psql("SELECT mailer.drop_job('j096_wait'), mailer.drop_job('j096_evil')");

# ---------------------------------------------------------------------------
# A job whose owner was dropped
# ---------------------------------------------------------------------------

psql_as($dave, q{CREATE TABLE t096_dave (key text);
	SELECT mailer.create_job('j096_dave', '{"source": {"type": "generator", "events": 1},
		"sink": {"type": "table", "table": "t096_dave"}}')});
is(wait_job('j096_dave'), 'finished', "dave's job ran");
psql("DROP OWNED BY $dave CASCADE; DROP ROLE $dave");
my $err = psql_fails_as($bob, "SELECT mailer.drop_job('j096_dave')");
like($err, qr/the owner of job "j096_dave" no longer exists/, 'another role is told the owner was dropped');
like($err, qr/HINT:  A superuser may drop the job with mailer.drop_job\('j096_dave'\)/, 'with a hint');
psql("SELECT mailer.drop_job('j096_dave')");
is(psql("SELECT count(*) FROM mailer.job WHERE name = 'j096_dave'"), '0', 'a superuser drops the job');

# ---------------------------------------------------------------------------
# A schema mailer made before the extension
# ---------------------------------------------------------------------------

psql("CREATE DATABASE t096_hijack; GRANT CREATE ON DATABASE t096_hijack TO $bob");
{
	local $ENV{PGDATABASE} = 't096_hijack';
	my $hijack = q{CREATE FUNCTION mailer.pg_has_role(regrole, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
		CREATE FUNCTION mailer.t096_arrow(jsonb, jsonb) RETURNS text LANGUAGE sql AS 'SELECT ''x''';
		CREATE OPERATOR mailer.->> (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = mailer.t096_arrow)};

	# Made by a role that is not a superuser.
	psql_as($bob, "CREATE SCHEMA mailer; $hijack");
	like(psql_fails('CREATE EXTENSION mailer'), qr/schema mailer exists and is not safe for the mailer extension/,
		"CREATE EXTENSION refuses another role's schema mailer");
	is(psql("SELECT count(*) FROM pg_extension WHERE extname = 'mailer'"), '0', 'nothing installed');

	# A superuser's, but holding objects (made before, or by a role allowed to).
	psql("DROP SCHEMA mailer CASCADE; CREATE SCHEMA mailer; $hijack");
	my $e = psql_fails('CREATE EXTENSION mailer');
	like($e, qr/schema mailer holds objects that are not part of the mailer extension/,
		'CREATE EXTENSION refuses a schema mailer holding objects');
	like($e, qr/DETAIL:  Schema mailer holds function pg_has_role\(regrole,text\), function t096_arrow\(jsonb,jsonb\), operator ->>\(jsonb,jsonb\)\./, 'and names them');
	like(psql_fails('DROP SCHEMA mailer CASCADE; CREATE SCHEMA mailer; GRANT CREATE ON SCHEMA mailer TO ' . $bob
		. '; CREATE EXTENSION mailer'), qr/schema mailer exists and is not safe/,
		'or one where another role may create objects');

	# Empty and a superuser's (as DROP EXTENSION leaves it): fine.
	psql('DROP SCHEMA mailer CASCADE; CREATE SCHEMA mailer; CREATE EXTENSION mailer');
	is(psql("SELECT extversion FROM pg_extension WHERE extname = 'mailer'") ne '', 1, 'an empty schema mailer is used');

	# An update meets an object slipped in since.
	psql("SET client_min_messages = warning; DROP EXTENSION mailer; DROP SCHEMA mailer CASCADE;
		CREATE EXTENSION mailer VERSION '0.1.0'; $hijack");
	like(psql_fails('ALTER EXTENSION mailer UPDATE'), qr/schema mailer holds objects that are not part of the mailer extension/,
		'ALTER EXTENSION UPDATE refuses them too');
	is(psql("SELECT extversion FROM pg_extension WHERE extname = 'mailer'"), '0.1.0', 'still 0.1.0');
}
psql("DROP DATABASE t096_hijack");

psql("DROP TABLE t096_out; DROP FUNCTION t096_evil();
	DROP OWNED BY $alice, $bob CASCADE; DROP ROLE $alice, $bob");
done_testing();
