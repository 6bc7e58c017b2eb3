#!/usr/bin/env bash
# Integration tests (TAP, run by prove) against the running services.
# Arguments select test files; default: all of test/t.
set -euo pipefail
. "$(dirname "$0")/services/env.sh"
cd "$MAILER_ROOT"
if [ $# -eq 0 ]; then
	set -- test/t/*.pl
fi
exec prove --timer -I test/lib "$@"
