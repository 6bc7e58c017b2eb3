#!/usr/bin/env bash
# Integration tests (TAP, run by prove) against the running services.
# Arguments select test files; default: all of test/t (`make test`), or
# with --long all of test/t/long (`make test-long`: the soak and fault
# tests that take minutes each).
set -euo pipefail
. "$(dirname "$0")/services/env.sh"
# Tests that run a server of their own (MailerCluster) find its binaries
# and the TAP modules through pg_config.
export PG_CONFIG
cd "$MAILER_ROOT"
if [ "${1:-}" = --long ]; then
	shift
	set -- test/t/long/*.pl "$@"
elif [ $# -eq 0 ]; then
	set -- test/t/*.pl
fi
# A test that dies outside a test (before its plan, say) says why only on
# stderr, mid-run: MailerTest appends the message to this file, printed
# here, at the end of the run's log.
export MAILER_TEST_DEATHS=$MAILER_RUN_DIR/test-deaths.log
rm -f "$MAILER_TEST_DEATHS"
status=0
prove --timer -I test/lib "$@" || status=$?
if [ $status -ne 0 ] && [ -s "$MAILER_TEST_DEATHS" ]; then
	printf '\n==== tests that died, and why ====\n'
	cat "$MAILER_TEST_DEATHS"
fi
exit $status
