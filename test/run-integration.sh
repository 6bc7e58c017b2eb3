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
exec prove --timer -I test/lib "$@"
