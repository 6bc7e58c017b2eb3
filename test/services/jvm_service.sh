# What kafka.sh and pulsar.sh share: a JVM service run straight from its
# Maven jars, one per data directory, whose lifecycle commands are
# idempotent and serialised. Sourced after env.sh, once the script has set:
#
#   SERVICE          its name in messages (Kafka, Pulsar)
#   SERVICE_VERSION  the version fetched, passed to the pom as
#                    -D<lower-case SERVICE>.version
#   SERVICE_DIR      its data directory (the lock is SERVICE_DIR.lock)
#   SERVICE_ADDR     where it answers, for messages
#   SERVICE_POM_DIR  the folder of its pom.xml (and settings.xml, if any:
#                    then Maven uses it, and editing it refetches too)
#   PIDFILE, LOG, START_TIMEOUT, STOP_TIMEOUT, READY_POLL (seconds)
#
# and defined broker_pid (the pid, when the process in PIDFILE is ours)
# and answers (true when the service is ready).
# shellcheck shell=bash disable=SC2154 # the variables above are the caller's

SERVICE_ID=${SERVICE,,}		# kafka, pulsar: the cache's folder, the pom's property
SERVICE_HOME=$MAILER_CACHE_DIR/$SERVICE_ID-$SERVICE_VERSION
LIBS=$SERVICE_HOME/libs

die() { echo "ERROR: $*" >&2; exit 1; }

# Serialise lifecycle commands: two concurrent starts must not both launch
# a service on the same data directory.
lock()
{
	mkdir -p "$(dirname "$SERVICE_DIR")"
	exec 9>"$SERVICE_DIR.lock"
	flock 9
}

# Build the service's C test client in DIR (make is a no-op once built),
# one build at a time: a test calls it several times at once, and a link
# rewriting the program while another call runs it fails ("Text file
# busy").
build_tool()
{
	flock "$1/.build.lock" make -s -C "$1" >&2 || die "could not build $1"
}

fetch()
{
	# The marker holds the hash of the pom (and settings), so editing either
	# refetches.
	local want settings=()
	[ -f "$SERVICE_POM_DIR/settings.xml" ] && settings=(-s "$SERVICE_POM_DIR/settings.xml")
	want=$(cat "$SERVICE_POM_DIR/pom.xml" "${settings[@]:1}" | sha256sum)
	[ "$(cat "$LIBS/.fetched" 2>/dev/null)" = "$want" ] && return 0
	command -v mvn >/dev/null || die "mvn not found (needed to fetch $SERVICE $SERVICE_VERSION)"
	mkdir -p "$SERVICE_HOME"
	exec 8>"$SERVICE_HOME.lock"
	flock 8
	[ "$(cat "$LIBS/.fetched" 2>/dev/null)" = "$want" ] && return 0
	echo "fetching $SERVICE $SERVICE_VERSION jars into $LIBS ..."
	# Into a temporary directory first, so an interrupted fetch never looks
	# complete. The local Maven repo lives in the cache too: one place to
	# wipe. Pulsar's settings mirror every repository to Central: its POMs
	# name repositories that cannot be reached.
	rm -rf "$LIBS.tmp"
	mvn -B -q "${settings[@]}" -f "$SERVICE_POM_DIR/pom.xml" \
		-Dmaven.repo.local="$MAILER_CACHE_DIR/m2" \
		-D"$SERVICE_ID.version=$SERVICE_VERSION" \
		dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$LIBS.tmp" \
		</dev/null >"$SERVICE_HOME/fetch.log" 2>&1 ||
		die_with_log "mvn could not fetch $SERVICE $SERVICE_VERSION" "$SERVICE_HOME/fetch.log"
	echo "$want" >"$LIBS.tmp/.fetched"
	rm -rf "$LIBS"
	mv "$LIBS.tmp" "$LIBS"
}

port_in_use()
{
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_ready()
{
	local deadline=$((SECONDS + START_TIMEOUT))
	until answers; do
		broker_pid >/dev/null || die_with_log "$SERVICE exited during startup" "$LOG"
		[ $SECONDS -lt $deadline ] || die_with_log "$SERVICE not ready on $SERVICE_ADDR after ${START_TIMEOUT}s" "$LOG"
		sleep "$READY_POLL"
	done
	echo "$SERVICE is ready on $SERVICE_ADDR (pid $(broker_pid))"
}

# Send SIG to the service and wait up to SECS for it to go.
signal_and_wait()
{
	local sig=$1 secs=$2 pid deadline
	pid=$(broker_pid) || return 0
	kill "-$sig" "$pid" 2>/dev/null || true
	deadline=$((SECONDS + secs))
	while kill -0 "$pid" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.2
	done
}

stop()
{
	lock
	if broker_pid >/dev/null; then
		echo "stopping $SERVICE (pid $(broker_pid))"
		# A clean shutdown saves recovery on the next start (Kafka's log,
		# Pulsar's ledgers).
		signal_and_wait TERM "$STOP_TIMEOUT" || {
			echo "$SERVICE still up after ${STOP_TIMEOUT}s: SIGKILL" >&2
			signal_and_wait KILL 10 || die "could not kill $SERVICE"
		}
	fi
	rm -f "$PIDFILE"
}

kill_broker()
{
	lock
	if broker_pid >/dev/null; then
		echo "killing $SERVICE (pid $(broker_pid))"
		signal_and_wait KILL 10 || die "could not kill $SERVICE"
	fi
	rm -f "$PIDFILE"
}

# The service answers, and its jars (its command-line tools) are here.
need_broker()
{
	answers || die "$SERVICE does not answer on $SERVICE_ADDR (run: $0 start)"
	[ -f "$LIBS/.fetched" ] || fetch
}

clean()
{
	stop
	rm -rf "$SERVICE_DIR"
	echo "removed $SERVICE_DIR"
}
