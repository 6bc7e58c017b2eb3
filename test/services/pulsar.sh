#!/usr/bin/env bash
# A real Apache Pulsar standalone (broker, one in-process bookie, metadata in
# RocksDB, the WebSocket service) on loopback, run straight from the Maven
# jars: no tarball, no ZooKeeper, no Docker. All subcommands are idempotent.
#
#   pulsar.sh fetch                        jars into $MAILER_CACHE_DIR (once)
#   pulsar.sh start                        start, wait until healthy
#   pulsar.sh stop | kill | restart | status | clean
#   pulsar.sh create-topic NAME PARTITIONS 0: a non-partitioned topic
#   pulsar.sh add-partitions NAME N
#   pulsar.sh delete-topic NAME
#   pulsar.sh produce NAME [PRODUCER INITIAL_SEQUENCE_ID] < lines
#                                          one message per line, deduplicated
#                                          by producer name and sequence id
#   pulsar.sh read NAME FROM COUNT         COUNT messages after FROM (a message
#                                          id in base64, earliest or latest)
#   pulsar.sh stats NAME                   the topic's internal stats (JSON)
#   pulsar.sh last-message-id NAME         (JSON)
#   pulsar.sh admin METHOD PATH [BODY]     any admin REST call, e.g.
#                                          admin GET /admin/v2/clusters
#   pulsar.sh token ROLE                   (PULSAR_SECURE=1) a JWT for ROLE
#
# PULSAR_SECURE=1 (test/t/long/215, with its own PULSAR_DIR and ports): the
# broker wants a token (HS256, a secret key made here) on every request, and
# serves TLS on PULSAR_HTTPS_PORT as well, with a CA and a certificate for
# IP 127.0.0.1 made here by openssl ($PULSAR_DIR/secure/ca.cert.pem). This
# script's own calls, and the tool's, send an admin token (PULSAR_TOKEN).
#
# NAME is tenant/namespace/topic, persistent://tenant/namespace/topic, or a
# bare topic in public/default; a partition is NAME-partition-N. Topics are
# never auto-created (allowAutoTopicCreation=false), so a misspelt topic fails
# loudly instead of appearing. Retention is unlimited and deduplication is
# on: a reader that resumes from a stored message id needs the ledgers kept,
# and an exactly-once producer needs the broker to drop what it re-sends.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=env.sh
. "$HERE/env.sh"

SERVICE=Pulsar
SERVICE_VERSION=$PULSAR_VERSION
SERVICE_DIR=$PULSAR_DIR
SERVICE_ADDR=$PULSAR_URL
SERVICE_POM_DIR=$HERE/pulsar
PIDFILE=$PULSAR_DIR/pulsar.pid
LOG=$PULSAR_DIR/server.log
START_TIMEOUT=${PULSAR_START_TIMEOUT:-120}
STOP_TIMEOUT=${PULSAR_STOP_TIMEOUT:-30}
READY_POLL=0.5
# shellcheck source-path=SCRIPTDIR source=jvm_service.sh
. "$HERE/jvm_service.sh"
CONF=$PULSAR_DIR/standalone.conf
PULSAR_SECURE=${PULSAR_SECURE:-0}
SECURE_DIR=$PULSAR_DIR/secure
PULSAR_HTTPS_PORT=${PULSAR_HTTPS_PORT:-}
# A small shared machine (2 cores): keep the standalone modest.
PULSAR_MEM_OPTS=${PULSAR_MEM_OPTS:--Xms128m -Xmx512m -XX:MaxDirectMemorySize=256m}
# The C client the produce and read helpers run (test/pulsar_tool).
TOOL_DIR=$MAILER_ROOT/test/pulsar_tool
TOOL=$TOOL_DIR/pulsar_tool

# The pid of our standalone, if it is alive; checking the command line (the
# class and our config file) guards against a recycled pid.
broker_pid()
{
	local pid
	pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
	[ -n "$pid" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
		grep -q "PulsarStandaloneStarter -c $CONF " || return 1
	echo "$pid"
}

# One admin REST call: the body on stdout, failing (with the body on stderr)
# unless the status is 2xx. ADMIN_STATUS keeps the status for callers that
# accept some failures (404 on delete).
ADMIN_STATUS=
admin()
{
	local method=$1 path=$2 body=${3-} out
	out=$(mktemp)
	local args=(-sS -o "$out" -w '%{http_code}' -X "$method" --max-time 30 "${AUTH_HEADER[@]}")
	[ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data-raw "$body")
	ADMIN_STATUS=$(curl "${args[@]}" "$PULSAR_URL$path" 2>"$out.err") || ADMIN_STATUS=000
	if [[ $ADMIN_STATUS == 2* ]]; then
		cat "$out"
		rm -f "$out" "$out.err"
		return 0
	fi
	echo "$method $path: HTTP $ADMIN_STATUS $(cat "$out" "$out.err")" >&2
	rm -f "$out" "$out.err"
	return 1
}

# Ready means the broker says it is healthy (it has written and read a
# message through its own topic) and the public/default namespace exists:
# the standalone creates it only after the broker has started.
answers()
{
	[ "$(curl -sf --max-time 10 "${AUTH_HEADER[@]}" "$PULSAR_URL/admin/v2/brokers/health" 2>/dev/null)" = ok ] &&
		curl -sf --max-time 10 "${AUTH_HEADER[@]}" -o /dev/null "$PULSAR_URL/admin/v2/namespaces/public/default" 2>/dev/null
}

b64url()
{
	openssl base64 -A | tr '+/' '-_' | tr -d '='
}

# A JWT for role $1, signed (HS256) with the broker's secret key, as
# Pulsar's "tokens create --secret-key" makes it.
token()
{
	local header payload key
	[ -f "$SECURE_DIR/secret.key" ] || die "no secret key: start with PULSAR_SECURE=1 first"
	header=$(printf '{"alg":"HS256"}' | b64url)
	payload=$(printf '{"sub":"%s"}' "$1" | b64url)
	key=$(od -An -tx1 "$SECURE_DIR/secret.key" | tr -d ' \n')
	echo "$header.$payload.$(printf '%s.%s' "$header" "$payload" |
		openssl dgst -sha256 -mac HMAC -macopt "hexkey:$key" -binary | b64url)"
}

# The secret key, a CA and the broker's certificate (IP 127.0.0.1 only: a
# client that asks for another name must refuse it), made once.
make_secrets()
{
	[ -f "$SECURE_DIR/broker.key-pk8.pem" ] && return
	mkdir -p "$SECURE_DIR"
	(
		cd "$SECURE_DIR"
		openssl rand 32 >secret.key
		openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=mailer test CA" \
			-keyout ca.key.pem -out ca.cert.pem
		openssl req -newkey rsa:2048 -nodes -subj "/CN=mailer test broker" \
			-keyout broker.key.pem -out broker.csr
		openssl x509 -req -in broker.csr -CA ca.cert.pem -CAkey ca.key.pem -CAcreateserial -days 30 \
			-extfile <(printf 'subjectAltName=IP:127.0.0.1\n') -out broker.cert.pem
		# The broker reads a PKCS#8 key only.
		openssl pkcs8 -topk8 -nocrypt -in broker.key.pem -out broker.key-pk8.pem
	) >/dev/null 2>&1 || die "openssl could not make the test certificates in $SECURE_DIR"
}

AUTH_HEADER=()
if [ "$PULSAR_SECURE" = 1 ]; then
	[ -n "$PULSAR_HTTPS_PORT" ] || die "PULSAR_SECURE=1 needs PULSAR_HTTPS_PORT"
	make_secrets
	export PULSAR_TOKEN=${PULSAR_TOKEN:-$(token admin)}
	AUTH_HEADER=(-H "Authorization: Bearer $PULSAR_TOKEN")
fi

write_config()
{
	mkdir -p "$PULSAR_DIR/data"
	# The broker and the in-process bookie read this one file.
	cat >"$CONF" <<-EOF
	# Written by test/services/pulsar.sh on every start; edits are lost.
	clusterName=standalone
	# Loopback only, fixed ports.
	bindAddress=127.0.0.1
	advertisedAddress=127.0.0.1
	brokerServicePort=$PULSAR_PORT
	webServicePort=$PULSAR_HTTP_PORT
	# The WebSocket API (/ws/v2/...) served by the broker's own web server.
	webSocketServiceEnabled=true
	# The bookie: without these it binds a random port on every interface.
	# Its port must also stay the same across restarts: the bookie's cookie
	# (in its data directory) records it, and refuses to start on another.
	# The standalone takes bookiePort only when ephemeral ports are allowed;
	# otherwise it picks a free port of its own.
	bookiePort=$PULSAR_BOOKIE_PORT
	allowEphemeralPorts=true
	allowLoopback=true
	listeningInterface=lo
	httpServerEnabled=false
	# One bookie: every ledger has a single copy.
	managedLedgerDefaultEnsembleSize=1
	managedLedgerDefaultWriteQuorum=1
	managedLedgerDefaultAckQuorum=1
	# Exactly-once needs both. A reader resumes from a stored message id,
	# which only works while its ledger exists: with the default retention of
	# 0 a topic with no subscription loses its ledgers when they roll over
	# or the broker restarts. A producer that re-sends after a crash (same
	# producerName, same initialSequenceId) relies on the broker dropping
	# what it already stored.
	defaultRetentionTimeInMinutes=-1
	defaultRetentionSizeInMB=-1
	brokerDeduplicationEnabled=true
	# A misspelt topic is an error, not a new topic.
	allowAutoTopicCreation=false
	allowAutoTopicCreationType=non-partitioned
	# Nothing else: no functions, no transactions, no load shedding.
	functionsWorkerEnabled=false
	transactionCoordinatorEnabled=false
	loadBalancerEnabled=false
	# A small shared machine: few threads.
	numIOThreads=2
	numHttpServerThreads=4
	numExecutorThreadPoolSize=2
	managedLedgerCacheSizeMB=32
	# The shared disk may be fuller than the bookie's default 95 %: a bookie
	# that turns read-only makes every write fail.
	diskUsageThreshold=0.99
	diskUsageWarnThreshold=0.98
	EOF
	[ "$PULSAR_SECURE" = 1 ] || return 0
	cat >>"$CONF" <<-EOF
	# PULSAR_SECURE=1: a token on every request, of the admin API and of the
	# WebSocket API alike; the broker's own clients (the WebSocket service's,
	# the standalone's setup) use the admin role's.
	authenticationEnabled=true
	authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken
	tokenSecretKey=file://$SECURE_DIR/secret.key
	superUserRoles=admin
	brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
	brokerClientAuthenticationParameters=token:$(token admin)
	# TLS on a second port of the same web service (admin and WebSocket).
	webServicePortTls=$PULSAR_HTTPS_PORT
	tlsCertificateFilePath=$SECURE_DIR/broker.cert.pem
	tlsKeyFilePath=$SECURE_DIR/broker.key-pk8.pem
	tlsTrustCertsFilePath=$SECURE_DIR/ca.cert.pem
	# A second connector needs threads of its own (this value wins: the last).
	numHttpServerThreads=8
	EOF
}

start()
{
	fetch
	lock
	if broker_pid >/dev/null; then
		wait_ready
		return
	fi
	rm -f "$PIDFILE"
	local p
	for p in "$PULSAR_HTTP_PORT" "$PULSAR_PORT" "$PULSAR_BOOKIE_PORT" $PULSAR_HTTPS_PORT; do
		port_in_use "$p" && die "port $p is taken by a process not started from $PULSAR_DIR (another Pulsar?)"
	done
	write_config
	echo "starting Pulsar $PULSAR_VERSION on $PULSAR_URL (log: $LOG)"
	# From $PULSAR_DIR: the standalone resolves some default paths against
	# the working directory. No stdin and all output in the log: it outlives
	# this script. 8>&- 9>&-: it must not inherit (and so hold) our locks.
	# The --add-opens are those Pulsar's own launcher passes on Java 17.
	# shellcheck disable=SC2086 # PULSAR_MEM_OPTS is a list of options
	(cd "$PULSAR_DIR" && exec java $PULSAR_MEM_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
		-XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true -XX:-UsePerfData \
		--add-opens java.base/java.io=ALL-UNNAMED \
		--add-opens java.base/java.lang=ALL-UNNAMED \
		--add-opens java.base/java.util.zip=ALL-UNNAMED \
		--add-opens java.base/sun.net=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.platform=ALL-UNNAMED \
		--add-opens java.management/sun.management=ALL-UNNAMED \
		--add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED \
		-Dio.netty.tryReflectionSetAccessible=true \
		-Dlog4j2.configurationFile="$HERE/pulsar/log4j2.properties" \
		-Dpulsar.log.dir="$PULSAR_DIR" \
		-cp "$LIBS/*" org.apache.pulsar.PulsarStandaloneStarter -c "$CONF" \
		--no-functions-worker --no-stream-storage \
		--metadata-dir "$PULSAR_DIR/data/metadata" \
		--bookkeeper-dir "$PULSAR_DIR/data/bookkeeper" \
		--bookkeeper-port "$PULSAR_BOOKIE_PORT" \
		</dev/null >>"$LOG" 2>&1 8>&- 9>&-) &
	echo $! >"$PIDFILE"
	wait_ready
}

status()
{
	local pid
	pid=$(broker_pid) || { echo "Pulsar is not running"; return 1; }
	answers || { echo "Pulsar (pid $pid) does not answer on $PULSAR_URL"; return 1; }
	echo "Pulsar $PULSAR_VERSION is up on $PULSAR_URL (pid $pid, RSS $(awk '/VmRSS/ {print $2, $3}' "/proc/$pid/status"))"
}

# tenant/ns/topic, persistent://tenant/ns/topic or a bare topic, as the REST
# path persistent/tenant/ns/topic.
topic_path()
{
	local t=${1#persistent://}
	case $t in
	*://*) die "only persistent topics: $1" ;;
	*/*/*) ;;
	*/*) die "topic $1: want tenant/namespace/topic" ;;
	*) t=public/default/$t ;;
	esac
	echo "persistent/$t"
}

# A topic's partition count: N for a partitioned topic, 0 for a
# non-partitioned one, empty when there is none.
partitions()
{
	local path=$1 meta
	meta=$(admin GET "/admin/v2/$path/partitions" 2>/dev/null) || return 0
	local n
	n=$(sed -n 's/.*"partitions" *: *\([0-9]*\).*/\1/p' <<<"$meta")
	if [ "${n:-0}" -gt 0 ]; then
		echo "$n"
	elif admin GET "/admin/v2/$path/internalStats" >/dev/null 2>&1; then
		echo 0
	fi
}

create_topic()
{
	[ $# -eq 2 ] || die "usage: $0 create-topic NAME PARTITIONS"
	local path have
	path=$(topic_path "$1")
	need_broker
	have=$(partitions "$path")
	if [ -n "$have" ]; then
		[ "$have" = "$2" ] || die "topic $1 exists with $have partitions, not $2 (use add-partitions or delete-topic)"
		echo "topic $1 already exists with $2 partitions"
		return
	fi
	if [ "$2" -gt 0 ]; then
		admin PUT "/admin/v2/$path/partitions" "$2" >/dev/null
	else
		admin PUT "/admin/v2/$path" >/dev/null
	fi
	echo "topic $1 created with $2 partitions"
}

add_partitions()
{
	[ $# -eq 2 ] || die "usage: $0 add-partitions NAME N"
	local path have
	path=$(topic_path "$1")
	need_broker
	have=$(partitions "$path")
	[ -n "$have" ] && [ "$have" -gt 0 ] || die "topic $1 is not a partitioned topic"
	[ "$have" -le "$2" ] || die "topic $1 has $have partitions; Pulsar cannot reduce them to $2"
	[ "$have" -eq "$2" ] || admin POST "/admin/v2/$path/partitions" "$2" >/dev/null
	echo "topic $1 has $2 partitions"
}

delete_topic()
{
	[ $# -eq 1 ] || die "usage: $0 delete-topic NAME"
	local path have
	path=$(topic_path "$1")
	need_broker
	have=$(partitions "$path")
	# force: even with readers or producers connected (they are closed).
	if [ -z "$have" ]; then
		echo "topic $1 does not exist"
		return
	elif [ "$have" -gt 0 ]; then
		admin DELETE "/admin/v2/$path/partitions?force=true" >/dev/null
	else
		admin DELETE "/admin/v2/$path?force=true" >/dev/null
	fi
	echo "topic $1 deleted"
}

tool()
{
	build_tool "$TOOL_DIR"
	"$TOOL" "$PULSAR_URL" "$@"
}

produce()
{
	[ $# -eq 1 ] || [ $# -eq 3 ] || die "usage: $0 produce NAME [PRODUCER INITIAL_SEQUENCE_ID] < lines"
	need_broker
	local path
	path=$(topic_path "$1")
	# Without a name, a fresh one: the broker deduplicates per producer name,
	# and a second run must not be taken for a re-send of the first.
	tool produce "${path#persistent/}" "${2:-pulsar-sh-$$-$RANDOM}" "${3:-0}"
}

read_topic()
{
	[ $# -eq 3 ] || die "usage: $0 read NAME FROM COUNT"
	need_broker
	local path
	path=$(topic_path "$1")
	tool read "${path#persistent/}" "$2" "$3"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
fetch) fetch ;;
start) start ;;
stop) stop ;;
kill) kill_broker ;;
restart) stop; start ;;
status) status ;;
create-topic) create_topic "$@" ;;
add-partitions) add_partitions "$@" ;;
delete-topic) delete_topic "$@" ;;
produce) produce "$@" ;;
read) read_topic "$@" ;;
stats) [ $# -eq 1 ] || die "usage: $0 stats NAME"; need_broker; admin GET "/admin/v2/$(topic_path "$1")/internalStats"; echo ;;
last-message-id) [ $# -eq 1 ] || die "usage: $0 last-message-id NAME"; need_broker; admin GET "/admin/v2/$(topic_path "$1")/lastMessageId"; echo ;;
admin) [ $# -ge 2 ] || die "usage: $0 admin METHOD PATH [BODY]"; need_broker; admin "$@"; echo ;;
token) [ $# -eq 1 ] || die "usage: $0 token ROLE"; token "$1" ;;
clean) clean ;;
*) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
esac
