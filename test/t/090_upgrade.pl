# Upgrading the extension: the install script of the last release plus the
# upgrade script give exactly what a fresh install of this version gives
# (tables, columns, views, functions, privileges, policies, pg_dump
# configuration), and jobs wait while the catalog is older than the
# library (new binaries installed, ALTER EXTENSION UPDATE not run yet),
# then run exactly once it is updated.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use Test::More;

my $from = '0.1.0';
my ($to) = `grep default_version $ROOT/mailer.control` =~ /'([^']+)'/;

# Every object of schema mailer, as one sorted text.
my $catalog_sql = <<'SQL';
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
	SELECT format('column %s.%s %s notnull=%s default=%s comment=%s', c.relname, a.attname,
		format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid),
		col_description(c.oid, a.attnum))
	FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
	WHERE c.relnamespace = 'mailer'::regnamespace
	UNION ALL
	SELECT format('relation %s kind=%s rls=%s force=%s replident=%s acl=%s options=%s comment=%s', relname,
		relkind, relrowsecurity, relforcerowsecurity, relreplident, relacl, reloptions,
		obj_description(oid, 'pg_class'))
	FROM pg_class WHERE relnamespace = 'mailer'::regnamespace
	UNION ALL
	SELECT format('view %s %s', viewname, definition) FROM pg_views WHERE schemaname = 'mailer'
	UNION ALL
	SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
	FROM pg_constraint WHERE connamespace = 'mailer'::regnamespace
	UNION ALL
	SELECT format('index %s', indexdef) FROM pg_indexes WHERE schemaname = 'mailer'
	UNION ALL
	SELECT format('trigger %s', pg_get_triggerdef(t.oid)) FROM pg_trigger t
	JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = 'mailer'::regnamespace AND NOT t.tgisinternal
	UNION ALL
	SELECT format('policy %s on %s for %s to %s using %s check %s', polname, polrelid::regclass, polcmd,
		polroles::regrole[], pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid))
	FROM pg_policy WHERE polrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'mailer'::regnamespace)
	UNION ALL
	SELECT format('function %s returns %s volatile=%s strict=%s secdef=%s acl=%s config=%s src=%s bin=%s comment=%s',
		p.oid::regprocedure, pg_get_function_result(p.oid), provolatile, proisstrict, prosecdef, proacl,
		proconfig, md5(prosrc), probin, obj_description(p.oid, 'pg_proc'))
	FROM pg_proc p WHERE pronamespace = 'mailer'::regnamespace
	UNION ALL
	SELECT format('type %s', t.oid::regtype) FROM pg_type t
	WHERE typnamespace = 'mailer'::regnamespace AND typrelid = 0 AND typelem = 0
	UNION ALL
	SELECT format('schema acl=%s comment=%s', nspacl, obj_description(oid, 'pg_namespace'))
	FROM pg_namespace WHERE nspname = 'mailer'
	UNION ALL
	SELECT format('pg_dump %s where %s', c::regclass, w)
	FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(c, w) WHERE e.extname = 'mailer'
) objects(x)
SQL

# A reference: a fresh install of this version, in a database of its own.
psql('DROP DATABASE IF EXISTS mailer_upgrade_ref');
psql('CREATE DATABASE mailer_upgrade_ref');
my $fresh = `psql -X -q -A -t -d mailer_upgrade_ref -c 'CREATE EXTENSION mailer' -c "$catalog_sql"`;
ok(length($fresh) > 1000, 'the fresh install has a catalog to compare with');

# The release before, with this library loaded.
drop_extension();
my $log_from = pg_log_size();
psql("CREATE EXTENSION mailer VERSION '$from'");
psql(<<'SQL');
DROP TABLE IF EXISTS upgrade_totals;
CREATE TABLE upgrade_totals (customer_id text PRIMARY KEY, orders bigint, total numeric);
SELECT mailer.create_job('upgrade_totals', $${
	"source": {"type": "generator", "events": 3000, "keys": 11, "seed": 90},
	"steps": [{"key_by": {"customer_id": "value->>'customer_id'"}},
		{"aggregate": {"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}}],
	"sink": {"type": "table", "table": "upgrade_totals"},
	"checkpoint": {"interval": "100 milliseconds"}}$$);
SQL

# The launcher says why the job does not start, and starts no worker.
wait_until('the launcher warns that the catalog is older than the library',
	sub { pg_log_since($log_from) =~ /mailer jobs wait: the extension's catalog is version \Q$from\E, the library is \Q$to\E/ });
is(psql(q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer job'}), '0',
	'no job worker runs against the old catalog');
is(psql('SELECT count(*) FROM upgrade_totals'), '0', 'nothing was written before the update');

psql('ALTER EXTENSION mailer UPDATE');
is(psql(q{SELECT extversion FROM pg_extension WHERE extname = 'mailer'}), $to, "updated to $to");
is(wait_job('upgrade_totals'), 'finished', 'the job created before the update runs to its end after it');
is(psql('SELECT sum(orders) FROM upgrade_totals'), '3000', 'every event counted once');
is(psql('SELECT count(*) FROM upgrade_totals'), '11', 'one row per key');

my $upgraded = psql($catalog_sql);
chomp $fresh;
if ($upgraded ne $fresh)
{
	my @a = split /\n/, $fresh;
	my @b = split /\n/, $upgraded;
	my %in_b = map { $_ => 1 } @b;
	my %in_a = map { $_ => 1 } @a;
	diag("only in the fresh install: $_") for grep { !$in_b{$_} } @a;
	diag("only after the upgrade: $_") for grep { !$in_a{$_} } @b;
}
ok($upgraded eq $fresh, "$from plus the upgrade script equals a fresh install of $to");

psql(q{SELECT mailer.drop_job('upgrade_totals')});
psql('DROP TABLE upgrade_totals');
psql('DROP DATABASE mailer_upgrade_ref');
fresh_extension();
done_testing();
