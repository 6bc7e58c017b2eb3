#!/usr/bin/env bash
# Differential fuzzing of src/plan/json_scan.c and src/base/iso_time.c against
# jsonb_in/->>/-> and timestamptz_in, under AddressSanitizer.
#
#   test/fuzz/run.sh [SECONDS [SEED]]
#
# Builds the harness module (mailer_fuzz.c) with ASan, starts a throwaway
# cluster of its own (unix socket only, no mailer), checks that ASan reports
# a read past an input, replays the regression inputs (corpus/ and
# regress.sql), then runs the seeded generators for SECONDS in all (default
# $FUZZ_SECONDS or 300), and stops the cluster.  SEED defaults to $FUZZ_SEED, else a new one that is printed;
# a run is reproduced by its seed.  Exits non-zero on any mismatch, any
# AddressSanitizer report or a crashed backend.
set -euo pipefail
. "$(dirname "$0")/../services/env.sh"
cd "$MAILER_ROOT"

seconds=${1:-${FUZZ_SECONDS:-300}}
seed=${2:-${FUZZ_SEED:-$(date +%s)}}
dir=$MAILER_RUN_DIR/fuzz
data=$dir/data
log=$dir/postgresql.log

make -s -C test/fuzz PG_CONFIG="$PG_CONFIG" >/dev/null

stop_cluster()
{
	if [ -f "$data/postmaster.pid" ]; then
		as_owner "$PG_BINDIR/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
}
trap stop_cluster EXIT
stop_cluster
rm -rf "$dir"
mkdir -p "$dir"
cp test/fuzz/mailer_fuzz.so "$dir/"
cp -r test/fuzz/corpus "$dir/corpus"
chown -R "$owner" "$dir"

as_owner "$PG_BINDIR/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C \
	--no-sync --no-instructions >"$dir/initdb.log" 2>&1 ||
	die_with_log "initdb failed" "$dir/initdb.log"
cat >>"$data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
fsync = off
log_min_messages = warning
CONF
# Not instrumented itself: the module brings the ASan runtime (its options
# are in mailer_fuzz.c) and reports go to this log.
as_owner "$PG_BINDIR/pg_ctl" -D "$data" -l "$log" -w -t 60 start >/dev/null ||
	die_with_log "the fuzz cluster did not start" "$log"

psql_fuzz() { "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -d postgres -U postgres "$@"; }

psql_fuzz <<SQL
CREATE FUNCTION fuzz_json(seed bigint, seconds float8, max_cases bigint,
	OUT cases bigint, OUT scanner_errors bigint, OUT mismatches bigint, OUT report text)
	AS '$dir/mailer_fuzz.so', 'mailer_fuzz_json' LANGUAGE C STRICT;
CREATE FUNCTION fuzz_iso(seed bigint, seconds float8, max_cases bigint,
	OUT cases bigint, OUT fast_accepted bigint, OUT mismatches bigint, OUT report text)
	AS '$dir/mailer_fuzz.so', 'mailer_fuzz_iso' LANGUAGE C STRICT;
CREATE FUNCTION fuzz_json_check(bytea) RETURNS text
	AS '$dir/mailer_fuzz.so', 'mailer_fuzz_json_check' LANGUAGE C STRICT;
CREATE FUNCTION fuzz_iso_check(bytea) RETURNS text
	AS '$dir/mailer_fuzz.so', 'mailer_fuzz_iso_check' LANGUAGE C STRICT;
CREATE FUNCTION fuzz_asan_selftest() RETURNS int
	AS '$dir/mailer_fuzz.so', 'mailer_fuzz_asan_selftest' LANGUAGE C STRICT;
SQL

status=0
fail() { echo "FUZZ FAILURE: $*"; status=1; }

# A harness whose sanitizer is not armed finds nothing: prove it is, with a
# read past a guarded input, which must end the backend with a report.
if psql_fuzz -c "SELECT fuzz_asan_selftest()" >/dev/null 2>&1 ||
	! grep -q "ERROR: AddressSanitizer: use-after-poison" "$log"; then
	die_with_log "AddressSanitizer is not active in the fuzz harness" "$log"
fi
for _ in $(seq 1 100); do
	psql_fuzz -c "SELECT 1" >/dev/null 2>&1 && break
	sleep 0.2
done
psql_fuzz -c "SELECT 1" >/dev/null 2>&1 || die_with_log "the fuzz cluster did not recover" "$log"
log_start=$(wc -l <"$log")

# The regression inputs: every file of corpus/json and corpus/time, and the
# generated ones of regress.sql.  Each row printed is a mismatch.
out=$(psql_fuzz -At -F ' | ' <<SQL
SELECT 'corpus/json/' || f, d FROM pg_ls_dir('$dir/corpus/json') f,
	fuzz_json_check(pg_read_binary_file('$dir/corpus/json/' || f)) d WHERE d IS NOT NULL;
SELECT 'corpus/time/' || f, d FROM pg_ls_dir('$dir/corpus/time') f,
	LATERAL (SELECT pg_read_binary_file('$dir/corpus/time/' || f) AS b) r,
	-- one input per line; a file's last line needs no newline
	LATERAL regexp_split_to_table(convert_from(rtrim(r.b, '\x0a'::bytea), 'UTF8'), E'\n') l,
	LATERAL (SELECT fuzz_iso_check(convert_to(l, 'UTF8'))) c(d) WHERE d IS NOT NULL;
\i test/fuzz/regress.sql
SQL
) || fail "replaying the regression inputs failed"
[ -z "$out" ] || fail "regression inputs differ:
$out"
echo "fuzz: regression inputs replayed: $(ls test/fuzz/corpus/json | wc -l) JSON files," \
	"$(cat test/fuzz/corpus/time/* | wc -l) times, $(grep -c "^	('" test/fuzz/regress.sql) generated in regress.sql"

# The generators: two thirds of the time for JSON, the rest for times under
# two settings that a time zone or date style mistake would show.
json_s=$(awk "BEGIN { print $seconds * 2 / 3 }")
iso_s=$(awk "BEGIN { print $seconds / 6 }")
echo "fuzz: seed $seed, ${seconds}s"
psql_fuzz -At >"$dir/result" <<SQL || fail "the generated run failed (a crash? see $log)"
CREATE TEMP TABLE r AS
	SELECT 'json' AS what, cases, scanner_errors || ' refused by the scanner' AS counted, mismatches, report
	FROM fuzz_json($seed, $json_s, 1000000000);
SET TimeZone = 'America/New_York';
SET DateStyle = 'ISO, MDY';
INSERT INTO r SELECT 'time (America/New_York, ISO MDY)', cases,
	fast_accepted || ' parsed by the fast path', mismatches, report
	FROM fuzz_iso($seed, $iso_s, 1000000000);
SET TimeZone = 'Pacific/Chatham';
SET DateStyle = 'SQL, DMY';
SET timezone_abbreviations = 'India';
INSERT INTO r SELECT 'time (Pacific/Chatham, SQL DMY, India abbreviations)', cases,
	fast_accepted || ' parsed by the fast path', mismatches, report
	FROM fuzz_iso($seed + 1, $iso_s, 1000000000);
SELECT format('fuzz: %s: %s inputs, %s, %s mismatches', what, cases, counted, mismatches) FROM r;
SELECT format('MISMATCH in %s:%s%s', what, E'\n', report) FROM r WHERE mismatches > 0;
SQL
cat "$dir/result"
grep -q '^MISMATCH' "$dir/result" && fail "the fast path and PostgreSQL differ (above)"

tail -n +"$((log_start + 1))" "$log" >"$dir/run.log"
if grep -q "AddressSanitizer" "$dir/run.log"; then
	fail "AddressSanitizer reports:"
	grep -A40 "AddressSanitizer" "$dir/run.log"
fi
if grep -q "terminated by signal\|exited with exit code" "$dir/run.log"; then
	fail "a backend crashed:"
	grep -B2 -A2 "terminated by signal\|exited with exit code" "$dir/run.log"
fi

[ $status -eq 0 ] && echo "fuzz: ok"
exit $status
