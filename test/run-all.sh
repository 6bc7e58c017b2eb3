#!/usr/bin/env bash
# `make test`: everything from a fresh machine.  Installs what is missing,
# builds and installs the extension, starts a clean PostgreSQL cluster and
# Kafka broker, runs pg_regress and the integration tests, and stops the
# services whatever happens.  Exits non-zero on any failure.
#
# `make test-long` (--long): the same preparation, then only the long
# integration tests of test/t/long (soak and fault runs of minutes each),
# which CI runs besides `make test`.
set -euo pipefail
long=
if [ "${1:-}" = --long ]; then
	long=--long
fi
. "$(dirname "$0")/services/env.sh"
cd "$MAILER_ROOT"

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)

step() { printf '\n==== %s ====\n' "$*"; }

step "dependencies"
test/services/deps.sh
# RDKAFKA_PREFIX: build against a newer librdkafka there (the Makefile),
# built once, then unpacked from $MAILER_CACHE_DIR.
[ -z "${RDKAFKA_PREFIX:-}" ] || test/services/librdkafka.sh "$RDKAFKA_PREFIX"
test/services/kafka.sh fetch
# Pulsar is optional: without its jars the Pulsar tests (test/t/18x) skip,
# each saying why.
test/services/pulsar.sh fetch ||
	echo "Pulsar could not be fetched: the Pulsar tests will skip"

step "build and install"
# Named to both: sudo drops the environment, and the install would relink
# against Debian's librdkafka.
make -s PG_CONFIG="$PG_CONFIG" RDKAFKA_PREFIX="${RDKAFKA_PREFIX:-}"
"${sudo[@]}" make -s PG_CONFIG="$PG_CONFIG" RDKAFKA_PREFIX="${RDKAFKA_PREFIX:-}" install

step "services"
stop_services()
{
	test/services/pg.sh stop || true
	test/services/kafka.sh stop || true
	test/services/pulsar.sh stop || true
}
trap stop_services EXIT
test/services/pg.sh clean
test/services/kafka.sh clean
# Started by the first Pulsar test that needs it (MailerPulsarTest).
test/services/pulsar.sh clean
test/services/pg.sh start
test/services/kafka.sh start

results=()
status=0
run()
{
	local name=$1
	shift
	step "$name"
	if "$@"; then
		results+=("ok      $name")
	else
		results+=("FAILED  $name")
		status=1
	fi
}

if [ -n "$long" ]; then
	run "long integration tests" test/run-integration.sh --long
else
	run "layers (test/check-layers.sh)" test/check-layers.sh
	run "prefetches in the build (test/check-prefetch.sh)" test/check-prefetch.sh
	run "pg_regress" make -s PG_CONFIG="$PG_CONFIG" installcheck
	[ -f regression.diffs ] && cat regression.diffs
	run "fuzz (short)" test/fuzz/run.sh 20 1
	run "integration tests" test/run-integration.sh
fi

step "summary"
printf '%s\n' "${results[@]}"
exit $status
