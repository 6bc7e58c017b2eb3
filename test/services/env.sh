# Shared settings for the test and demo services: sourced, never run.
# Every value may be overridden from the environment.

MAILER_ROOT=${MAILER_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

# Clusters are UTF-8 (the JSON fast path and the tests' texts need it),
# whatever locale the caller has, or none (a CI runner's bare environment).
if [ -z "${LC_ALL:-}" ] && [ -z "${LANG:-}" ]; then
	export LANG=C.UTF-8
fi
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PG_BINDIR=${PG_BINDIR:-$("$PG_CONFIG" --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)}
# The server's own client programs come first: Debian's /usr/bin/psql is
# pg_wrapper, a Perl script that costs each call some 35 ms of CPU, and the
# tests and the benchmark call psql by the thousand.
# (Moved to the front when it is on PATH already, after /usr/bin.)
PATH=":$PATH:"
PATH=${PATH//":$PG_BINDIR:"/:}
PATH=${PATH#:}
export PATH="$PG_BINDIR:${PATH%:}"

# Everything the services write lives here, outside the source tree, so that a
# checkout owned by root stays readable and the cluster's user owns its files.
MAILER_RUN_DIR=${MAILER_RUN_DIR:-/tmp/mailer-run}
# Downloads (Maven artifacts) survive between runs, outside git.
MAILER_CACHE_DIR=${MAILER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mailer}

# PostgreSQL: a throwaway cluster with the library preloaded.
PGHOST=${PGHOST:-$MAILER_RUN_DIR/pgsock}
PGPORT=${PGPORT:-54329}
PGUSER=${PGUSER:-postgres}
PGDATABASE=${PGDATABASE:-mailer}	# also the cluster's mailer.database
PGDATA=${PGDATA:-$MAILER_RUN_DIR/pgdata}
export PGHOST PGPORT PGUSER PGDATABASE PGDATA
# The shared cluster's HTTP worker (/metrics, /api/jobs, the dashboard).
MAILER_HTTP_PORT=${MAILER_HTTP_PORT:-$((PGPORT + 1000))}
export MAILER_HTTP_PORT

# Kafka: a single-node KRaft broker on loopback.
KAFKA_VERSION=${KAFKA_VERSION:-4.1.1}
KAFKA_PORT=${KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-19093}
KAFKA_BROKERS=${KAFKA_BROKERS:-127.0.0.1:$KAFKA_PORT}
KAFKA_DIR=${KAFKA_DIR:-$MAILER_RUN_DIR/kafka}
export KAFKA_BROKERS

# Pulsar: a standalone (broker, one in-process bookie, metadata in RocksDB)
# on loopback.  Its three ports follow PGPORT, so that side-by-side setups
# (each with its own PGPORT) never collide, and stay below the kernel's
# ephemeral range (32768 and up), where outgoing connections take ports.
PULSAR_VERSION=${PULSAR_VERSION:-4.0.7}
PULSAR_HTTP_PORT=${PULSAR_HTTP_PORT:-$((28000 + PGPORT % 1000))}	# admin REST and WebSocket API
PULSAR_PORT=${PULSAR_PORT:-$((26000 + PGPORT % 1000))}			# the binary protocol
PULSAR_BOOKIE_PORT=${PULSAR_BOOKIE_PORT:-$((23000 + PGPORT % 1000))}
PULSAR_URL=${PULSAR_URL:-http://127.0.0.1:$PULSAR_HTTP_PORT}
PULSAR_DIR=${PULSAR_DIR:-$MAILER_RUN_DIR/pulsar}
export PULSAR_URL

# initdb refuses root: as root, clusters belong to 'postgres'; otherwise to
# the caller.  as_owner runs a command as that owner.
if [ "$(id -u)" -eq 0 ]; then
	owner=postgres
	as_owner() { runuser -u "$owner" -- "$@"; }
else
	owner=$(id -un)
	as_owner() { "$@"; }
fi

# Print the last lines of a log and fail: every service script ends this way
# when a service does not come up.
die_with_log()
{
	local msg=$1 log=$2
	echo "ERROR: $msg" >&2
	if [ -f "$log" ]; then
		echo "---- last lines of $log ----" >&2
		tail -n 40 "$log" >&2
	fi
	exit 1
}
