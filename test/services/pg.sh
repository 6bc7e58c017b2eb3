#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster with mailer preloaded, on a port and a
# socket directory of its own.  Subcommands: start, stop, restart, crash
# (immediate stop, as a power cut would), status, clean.  Idempotent.
#
# initdb refuses root, so when run as root the cluster belongs to the
# 'postgres' user; otherwise to the caller.  The superuser is 'postgres'.
set -euo pipefail
. "$(dirname "$0")/env.sh"

log=$MAILER_RUN_DIR/postgresql.log

pg_ctl() { as_owner "$PG_BINDIR/pg_ctl" -D "$PGDATA" "$@"; }

is_running() { pg_ctl status >/dev/null 2>&1; }

init_cluster()
{
	mkdir -p "$MAILER_RUN_DIR"
	chmod 755 "$MAILER_RUN_DIR"
	mkdir -p "$PGHOST"
	chown "$owner" "$PGHOST"
	touch "$log"
	chown "$owner" "$log"
	[ -f "$PGDATA/PG_VERSION" ] && return
	mkdir -p "$PGDATA"
	chown "$owner" "$PGDATA"
	as_owner "$PG_BINDIR/initdb" -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 \
		--no-instructions >"$MAILER_RUN_DIR/initdb.log" 2>&1 ||
		die_with_log "initdb failed" "$MAILER_RUN_DIR/initdb.log"
	# The tests restart and crash the server often: keep it small and quick.
	cat >>"$PGDATA/postgresql.conf" <<CONF

# ---- mailer test cluster ----
port = $PGPORT
listen_addresses = ''
unix_socket_directories = '$PGHOST'
shared_preload_libraries = 'mailer'
mailer.database = '$PGDATABASE'
mailer.http_port = $MAILER_HTTP_PORT
# Parallel jobs: a slot and a worker per subtask, and up to parallelism - 1
# prepared transactions per running parallel job.  32 rather than more, so
# that a regression test can still ask for a parallelism it is too few for.
max_worker_processes = 40
mailer.max_jobs = 32
max_prepared_transactions = 32
mailer.restart_backoff_min = '200ms'
mailer.restart_backoff_max = '5s'
shared_buffers = 256MB
max_wal_size = 2GB
log_min_messages = warning
log_line_prefix = '%m [%p] %b '
log_checkpoints = off
CONF
}

start()
{
	init_cluster
	if is_running; then
		echo "pg: already running on port $PGPORT (socket $PGHOST)"
		return
	fi
	pg_ctl -l "$log" -w -t 60 start >/dev/null ||
		die_with_log "PostgreSQL did not start" "$log"
	"$PG_BINDIR/pg_isready" -q -t 30 ||
		die_with_log "PostgreSQL is not accepting connections" "$log"
	# The database the launcher serves; the tests and the demo work in it.
	if [ "$("$PG_BINDIR/psql" -X -d postgres -Atc "SELECT count(*) FROM pg_database WHERE datname = '$PGDATABASE'")" = 0 ]; then
		"$PG_BINDIR/createdb" "$PGDATABASE"
	fi
	# Ready means the launcher is connected too (it retries every few
	# seconds while its database does not exist yet).
	for _ in $(seq 1 60); do
		[ "$("$PG_BINDIR/psql" -X -Atc "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer launcher'")" = 1 ] && break
		sleep 0.5
	done
	[ "$("$PG_BINDIR/psql" -X -Atc "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'mailer launcher'")" = 1 ] ||
		die_with_log "the mailer launcher did not connect to database $PGDATABASE" "$log"
	echo "pg: running on port $PGPORT (socket $PGHOST, data $PGDATA, database $PGDATABASE)"
}

case "${1:-}" in
start) start ;;
stop) is_running && pg_ctl -m fast -w stop >/dev/null; echo "pg: stopped" ;;
restart) is_running && pg_ctl -m fast -w stop >/dev/null; start ;;
crash) is_running && pg_ctl -m immediate -w stop >/dev/null; echo "pg: stopped (immediate)" ;;
status) is_running ;;
clean)
	is_running && pg_ctl -m immediate -w stop >/dev/null
	rm -rf "$PGDATA" "$PGHOST" "$log"
	echo "pg: removed" ;;
*)
	echo "usage: $0 start|stop|restart|crash|status|clean" >&2
	exit 2 ;;
esac
