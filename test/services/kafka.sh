#!/usr/bin/env bash
# A real single-node Apache Kafka (KRaft: broker and controller in one JVM) on
# loopback, run straight from the Maven jars: no tarball, no ZooKeeper, no
# Docker. All subcommands are idempotent.
#
#   kafka.sh fetch                         jars into $MAILER_CACHE_DIR (once)
#   kafka.sh start                         format (once), start, wait ready
#   kafka.sh stop | kill | restart | status | clean
#   kafka.sh create-topic NAME PARTITIONS [--config KEY=VALUE]...
#   kafka.sh add-partitions NAME N
#   kafka.sh delete-topic NAME
#   kafka.sh delete-records NAME PARTITION OFFSET   delete what is before OFFSET (>= 0; as retention does)
#   kafka.sh tx-produce NAME (commit|abort):PARTITION:FROM:TO ...   transactions (kafka/TxProducer.java)
#   kafka.sh describe-group GROUP          committed offsets and lag
#
# Topics are never auto-created (auto.create.topics.enable=false), so a
# misspelt topic fails loudly instead of appearing with one partition.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=env.sh
. "$HERE/env.sh"

SERVICE=Kafka
SERVICE_VERSION=$KAFKA_VERSION
SERVICE_DIR=$KAFKA_DIR
SERVICE_ADDR=$KAFKA_BROKERS
SERVICE_POM_DIR=$HERE/kafka
PIDFILE=$KAFKA_DIR/kafka.pid
LOG=$KAFKA_DIR/server.log
START_TIMEOUT=${KAFKA_START_TIMEOUT:-60}
STOP_TIMEOUT=${KAFKA_STOP_TIMEOUT:-30}
READY_POLL=0.3
# shellcheck source-path=SCRIPTDIR source=jvm_service.sh
. "$HERE/jvm_service.sh"
# Topic metadata reaches the broker a moment after the admin call returns.
TOPIC_TIMEOUT=${KAFKA_TOPIC_TIMEOUT:-30}
# A small shared machine (2 cores): keep the broker modest.
KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}

# Run one of Kafka's command-line classes: small heap and the C1 compiler
# only, since these live for a second or two.
run_class()
{
	java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData \
		-Dlog4j2.configurationFile="$HERE/kafka/log4j2.properties" \
		-Dmailer.kafka.log.level=WARN \
		-cp "$LIBS/*" "$@" </dev/null
}

# The pid of our broker, if it is alive; checking the command line guards
# against a recycled pid.
broker_pid()
{
	local pid
	pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
	[ -n "$pid" ] && grep -qa 'kafka\.Kafka' "/proc/$pid/cmdline" 2>/dev/null || return 1
	echo "$pid"
}

# Ready means the broker answers a metadata request, lists itself, and every
# partition has a leader (after a kill, the broker can be listed before it
# leads its partitions again).
answers()
{
	local md
	md=$(timeout 10 kcat -b "$KAFKA_BROKERS" -L -m 2 2>/dev/null) || return 1
	grep -q ' broker 1 at ' <<<"$md" && ! grep -q 'leader -1' <<<"$md"
}

write_config()
{
	mkdir -p "$KAFKA_DIR/data"
	cat >"$KAFKA_DIR/server.properties" <<-EOF
	# Written by test/services/kafka.sh on every start; edits are lost.
	process.roles=broker,controller
	node.id=1
	controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
	listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
	advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
	listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
	controller.listener.names=CONTROLLER
	inter.broker.listener.name=PLAINTEXT
	log.dirs=$KAFKA_DIR/data
	num.partitions=1
	auto.create.topics.enable=false
	# One node: every internal topic has a single replica.
	offsets.topic.replication.factor=1
	transaction.state.log.replication.factor=1
	transaction.state.log.min.isr=1
	share.coordinator.state.topic.replication.factor=1
	share.coordinator.state.topic.min.isr=1
	# Fewer internal partitions than the default 50: the first consumer
	# group (and transaction) comes up faster and the data dir stays small.
	offsets.topic.num.partitions=4
	transaction.state.log.num.partitions=4
	# Consumers join a group at once instead of waiting 3 s for others.
	group.initial.rebalance.delay.ms=0
	# After a kill the old broker registration blocks the new one until
	# its session expires (default 9 s): shorter, so outage tests recover
	# fast, but not so short that a busy CI machine fences a live broker.
	broker.session.timeout.ms=4000
	broker.heartbeat.interval.ms=500
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
	port_in_use "$KAFKA_PORT" && die "port $KAFKA_PORT is taken by a process not started from $KAFKA_DIR (another Kafka?)"
	port_in_use "$KAFKA_CONTROLLER_PORT" && die "port $KAFKA_CONTROLLER_PORT is taken by a process not started from $KAFKA_DIR"
	write_config
	# Format once: a random cluster id, this node the only (standalone)
	# controller voter. A formatted dir keeps its data across restarts.
	if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
		local id
		id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
		# --cluster-id=: an id may begin with '-', which "-t <id>" takes for an option
		run_class kafka.tools.StorageTool format --standalone --cluster-id="$id" \
			-c "$KAFKA_DIR/server.properties" >"$KAFKA_DIR/format.log" 2>&1 ||
			die_with_log "could not format $KAFKA_DIR/data" "$KAFKA_DIR/format.log"
	fi
	echo "starting Kafka $KAFKA_VERSION on $KAFKA_BROKERS (log: $LOG)"
	# No stdin and all output in the log: the broker outlives this script.
	# 8>&- 9>&-: it must not inherit (and so hold forever) our locks.
	# shellcheck disable=SC2086 # KAFKA_HEAP_OPTS is a list of options
	java $KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
		-XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$HERE/kafka/log4j2.properties" \
		-cp "$LIBS/*" kafka.Kafka "$KAFKA_DIR/server.properties" \
		</dev/null >>"$LOG" 2>&1 8>&- 9>&- &
	echo $! >"$PIDFILE"
	wait_ready
}

status()
{
	local pid
	pid=$(broker_pid) || { echo "Kafka is not running"; return 1; }
	answers || { echo "Kafka (pid $pid) does not answer on $KAFKA_BROKERS"; return 1; }
	echo "Kafka $KAFKA_VERSION is up on $KAFKA_BROKERS (pid $pid)"
}

# Partition count of a topic whose every partition has a leader, from the
# broker's metadata; empty when the topic does not exist. kcat answers in
# milliseconds, much faster than a JVM tool.
partitions()
{
	timeout 10 kcat -b "$KAFKA_BROKERS" -L -t "$1" -m 5 2>/dev/null |
		awk -v t="\"$1\"" '
			# A missing topic reads: topic "x" with 0 partitions: <error>
			$1 == "topic" && $2 == t && $3 == "with" && $0 ~ /partitions:$/ { n = $4 }
			$1 == "partition" && $3 == "leader" && $4 + 0 < 0 { bad = 1 }
			END { if (n != "" && !bad) print n }'
}

# Wait until the broker's metadata shows WANT partitions ("" = gone).
wait_partitions()
{
	local topic=$1 want=$2 deadline=$((SECONDS + TOPIC_TIMEOUT))
	until [ "$(partitions "$topic")" = "$want" ]; do
		[ $SECONDS -lt $deadline ] || die "topic $topic: metadata shows '$(partitions "$topic")' partitions, want '$want' after ${TOPIC_TIMEOUT}s"
		sleep 0.1
	done
}

# Topic administration through librdkafka (test/kafka_admin, built on first
# use): a JVM per call cost the test suite minutes.
admin()
{
	build_tool "$HERE/../kafka_admin"
	"$HERE/../kafka_admin/kafka_admin" "$KAFKA_BROKERS" "$@"
}

create_topic()
{
	[ $# -ge 2 ] || die "usage: $0 create-topic NAME PARTITIONS [--config KEY=VALUE]..."
	local name=$1 n=$2 have
	shift 2
	need_broker
	have=$(partitions "$name")
	if [ -n "$have" ]; then
		[ "$have" = "$n" ] || die "topic $name exists with $have partitions, not $n (use add-partitions or delete-topic)"
		echo "topic $name already exists with $n partitions"
		return
	fi
	admin create "$name" "$n" "$@"
	wait_partitions "$name" "$n"
	echo "topic $name created with $n partitions"
}

add_partitions()
{
	[ $# -eq 2 ] || die "usage: $0 add-partitions NAME N"
	local name=$1 n=$2 have
	need_broker
	have=$(partitions "$name")
	[ -n "$have" ] || die "topic $name does not exist"
	[ "$have" -le "$n" ] || die "topic $name has $have partitions; Kafka cannot reduce them to $n"
	if [ "$have" -lt "$n" ]; then
		admin add-partitions "$name" "$n"
		wait_partitions "$name" "$n"
	fi
	echo "topic $name has $n partitions"
}

delete_topic()
{
	[ $# -eq 1 ] || die "usage: $0 delete-topic NAME"
	need_broker
	admin delete "$1"
	wait_partitions "$1" ""
	echo "topic $1 deleted"
}

delete_records()
{
	[ $# -eq 3 ] || die "usage: $0 delete-records NAME PARTITION OFFSET"
	need_broker
	admin delete-records "$1" "$2" "$3" || die "could not delete the records of $1 partition $2 before offset $3"
}

tx_produce()
{
	[ $# -ge 2 ] || die "usage: $0 tx-produce NAME (commit|abort):PARTITION:FROM:TO ..."
	need_broker
	run_class "$HERE/kafka/TxProducer.java" "$KAFKA_BROKERS" "$@"
}

describe_group()
{
	[ $# -eq 1 ] || die "usage: $0 describe-group GROUP"
	need_broker
	run_class org.apache.kafka.tools.consumer.group.ConsumerGroupCommand \
		--bootstrap-server "$KAFKA_BROKERS" --describe --group "$1"
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
delete-records) delete_records "$@" ;;
tx-produce) tx_produce "$@" ;;
describe-group) describe_group "$@" ;;
clean) clean ;;
*) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
esac
