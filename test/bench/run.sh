#!/usr/bin/env bash
# `make bench`: mailer's benchmarks (issue 7), from a fresh machine to a
# printed table.  Installs what is missing (test/services/deps.sh, the Kafka
# jars), builds and installs the extension, (re)starts the local PostgreSQL
# cluster and Kafka broker of test/services, produces the order topics, and
# runs, in rounds (every figure is the median of BENCH_RUNS rounds; every
# ratio is taken within one round, then the median of the ratios):
#
#   throughput  raw librdkafka consume (raw_consume.c) and mailer's jobs on
#               the same topic, both state backends: records/s, CPU-s per
#               million records, ratio to the raw rate
#   parallelism the tumbling and sliding jobs of the throughput section at
#               parallelism 1, 2 and 4 on the same 8-partition topic:
#               records/s, CPU-s per million records summed over every
#               subtask, both as ratios to parallelism 1 of the same round
#               (at 2: the exchange and alignment overhead), and the cores
#   flink       the keyed tumbling-window job on mailer and on Apache Flink
#               (local MiniCluster), both pinned to the same CPU: events per
#               CPU-second and their ratio
#   kafka_sink  the orders into a Kafka topic, exactly once: mailer's Kafka
#               sink (passthrough and keyed running totals), raw librdkafka
#               consume + transactional produce (raw_consume_produce.c) and
#               Flink's KafkaSink with EXACTLY_ONCE, pinned like the flink
#               section: records/s, CPU-s per million records (engine and
#               broker), records per CPU-second and their ratios
#   sink        the table sink's upsert of BENCH_SINK_ROWS changed keys in
#               one checkpoint against psql's INSERT ... SELECT ... ON
#               CONFLICT DO UPDATE of the same rows into the same table,
#               new keys and existing keys: rows/s of both and their ratio;
#               and the worker's memory at a checkpoint that emits four
#               times as many rows (a sliding job with emit update)
#   state       keyed running totals over 1k, 100k and 5M keys, both
#               backends: checkpoint duration, restore after kill -9, memory,
#               state on disk, lookup cost (records/s)
#   latency     produce-to-visible p50/p99 at 50% and 80% of the maximum
#               sustainable rate, 1 s checkpoints
#   profile     perf profiles of BENCH_PROFILE_JOBS (by default the job with
#               the most CPU per record, the tumbling job, passthrough, and
#               one subtask of the tumbling job at parallelism 2)
#   pulsar      the passthrough job reading a Pulsar topic of
#               BENCH_PULSAR_EVENTS orders (one partition) against a raw
#               WebSocket reader of it (test/pulsar_tool read, the same
#               receive queue as the source's): records/s, CPU-s per million
#               records, ratio to the raw rate within a round; skipped, saying
#               so, when Pulsar cannot start (test/services/pulsar.sh)
#   scrape      the HTTP worker's CPU (issue 15) with BENCH_SCRAPE_JOBS light
#               generator jobs: idle (its one-second history sampler only),
#               a Prometheus-like scrape of /metrics and /api/jobs every
#               second, and a dashboard's polling (/api/jobs and 20
#               /api/jobs/<name> every second), each for
#               BENCH_SCRAPE_SECONDS, as a share of one core
#
# Settings (environment; test/services/env.sh has the services' own):
#   BENCH_EVENTS=5000000     orders in the main topic
#   BENCH_RUNS=3             rounds per figure
#   BENCH_RAW_READS=3        reads of the topic by the raw consumer a round, odd
#                            (the median is the round's raw rate)
#   BENCH_KEYS=100000        customers in the main topic
#   BENCH_STATE_KEYS="1000 100000 5000000"   key counts of the state section
#   BENCH_STATE_BACKENDS="rocksdb memory"   its backends
#   BENCH_SINK_ROWS=100000   distinct keys (rows) of the sink section's checkpoint
#   BENCH_SECTIONS="throughput parallelism flink kafka_sink sink state latency profile pulsar scrape"
#   BENCH_PULSAR_EVENTS=300000    orders in the pulsar section's topic
#   BENCH_THROUGHPUT_JOBS="passthrough:- append:- totals:rocksdb ..."   the
#                            throughput section's jobs, as KIND:BACKEND (all
#                            eleven by default)
#   BENCH_PARALLELISM="1 2 4"  parallelisms of the parallelism section (1
#                            must be among them for the ratios)
#   BENCH_PARALLELISM_JOBS="tumbling:rocksdb sliding:rocksdb"   its jobs, as
#                            KIND:BACKEND
#   BENCH_LATENCY_SECONDS=30 how long each latency run produces
#   BENCH_JOB_TIMEOUT=600    a mailer job still busy after this many seconds
#                            is measured on what it read so far (marked
#                            "timed out" in the tables)
#   BENCH_PROFILE_SECONDS=60 how long perf records each profiled job
#   BENCH_PROFILE_JOBS="hottest tumbling:rocksdb passthrough:- tumbling:rocksdb:2"
#                            jobs to profile, as KIND:BACKEND[:PARALLELISM]
#                            (above 1, perf records subtask 1); "hottest" is
#                            the throughput job with the most CPU per record
#   BENCH_PIN_CPU=<last CPU> the CPU mailer's worker and Flink share in the
#                            flink and kafka_sink sections (and the raw
#                            program in kafka_sink); "none" pins nothing
#   BENCH_THROUGHPUT_PIN=0   1: the throughput section pins each job's worker,
#                            every thread of it (RocksDB's too), to
#                            BENCH_PIN_CPU: the jobs on one core each, where
#                            the default lets RocksDB's threads use the other
#   BENCH_KAFKA_SINK_JOBS="passthrough totals"   the kafka_sink section's jobs
#   BENCH_SCRAPE_JOBS=50     jobs of the scrape section
#   BENCH_SCRAPE_SECONDS=60  how long each of its phases lasts
#   BENCH_SOURCE_OPTIONS=   librdkafka properties for every job's Kafka
#                            source, as a JSON object (source.options), to
#                            compare settings without a rebuild
#   BENCH_MAX_DRIFT=         the windowed jobs' watermark.max_drift, as JSON
#                            ('"1 minute"', or null for no alignment); unset:
#                            the default
#   BENCH_OUT=$MAILER_RUN_DIR/bench/out-<time>   results.tsv, tables.txt,
#                            profile.txt and logs
# Topics are produced once per (events, keys) and reused by later runs.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../services/env.sh
. "$HERE/../services/env.sh"
cd "$MAILER_ROOT"

BENCH_EVENTS=${BENCH_EVENTS:-5000000}
BENCH_RUNS=${BENCH_RUNS:-3}
BENCH_RAW_READS=${BENCH_RAW_READS:-3}
BENCH_KEYS=${BENCH_KEYS:-100000}
BENCH_STATE_KEYS=${BENCH_STATE_KEYS:-1000 100000 5000000}
BENCH_STATE_BACKENDS=${BENCH_STATE_BACKENDS:-rocksdb memory}
BENCH_SINK_ROWS=${BENCH_SINK_ROWS:-100000}
BENCH_SECTIONS=${BENCH_SECTIONS:-throughput parallelism flink kafka_sink sink state latency profile pulsar scrape}
BENCH_PULSAR_EVENTS=${BENCH_PULSAR_EVENTS:-300000}
BENCH_PARALLELISM=${BENCH_PARALLELISM:-1 2 4}
BENCH_PARALLELISM_JOBS=${BENCH_PARALLELISM_JOBS:-tumbling:rocksdb sliding:rocksdb}
BENCH_LATENCY_SECONDS=${BENCH_LATENCY_SECONDS:-30}
BENCH_JOB_TIMEOUT=${BENCH_JOB_TIMEOUT:-600}
BENCH_PROFILE_SECONDS=${BENCH_PROFILE_SECONDS:-60}
BENCH_PROFILE_JOBS=${BENCH_PROFILE_JOBS:-hottest tumbling:rocksdb passthrough:- tumbling:rocksdb:2}
BENCH_PIN_CPU=${BENCH_PIN_CPU:-$(($(nproc) - 1))}
BENCH_KAFKA_SINK_JOBS=${BENCH_KAFKA_SINK_JOBS:-passthrough totals}
BENCH_SCRAPE_JOBS=${BENCH_SCRAPE_JOBS:-50}
BENCH_SCRAPE_SECONDS=${BENCH_SCRAPE_SECONDS:-60}
BENCH_DIR=$MAILER_RUN_DIR/bench
BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/out-$(date +%Y%m%d-%H%M%S)}
RESULTS=$BENCH_OUT/results.tsv
LOG=$BENCH_OUT/bench.log
# The same watermark settings for every windowed job, mailer's and Flink's.
OUT_OF_ORDERNESS_S=5
IDLE_TIMEOUT_S=30
CLK_TCK=$(getconf CLK_TCK)

mkdir -p "$BENCH_OUT"
: >"$RESULTS"

say() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" | tee -a "$LOG"; }
trap 'say "ERROR: $0 line $LINENO: \"$BASH_COMMAND\" exited $?"' ERR
die() { say "ERROR: $*"; exit 1; }
[[ $BENCH_RAW_READS =~ ^[0-9]*[13579]$ ]] ||
	die "BENCH_RAW_READS must be an odd number of reads (the median is the round's raw rate), not '$BENCH_RAW_READS'"
section_on() { [[ " $BENCH_SECTIONS " == *" $1 "* ]]; }
now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.10g\", $* }"; }
# psql: quiet, unaligned, tuples only, stop at the first error.  (psql
# interpolates variables such as :'spec' only in input, never in -c.)
q() { "$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }
# One result: section, job, backend, run, metric, value.
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RESULTS"; }

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
# RDKAFKA_PREFIX (see the Makefile): the raw programs link the same
# librdkafka as mailer, so that their figures compare.
RDKAFKA_CC=()
[ -z "${RDKAFKA_PREFIX:-}" ] || RDKAFKA_CC=(-I"$RDKAFKA_PREFIX/include" -L"$RDKAFKA_PREFIX/lib" -Wl,-rpath,"$RDKAFKA_PREFIX/lib")

# ---------------------------------------------------------------- setup

setup()
{
	say "setup: dependencies, build, install, services (log: $LOG)"
	# Each step's failure stops the setup: a failed build would otherwise
	# leave the library installed before measured in its place.
	{
		test/services/deps.sh &&
		test/services/kafka.sh fetch &&
		make -s PG_CONFIG="$PG_CONFIG" RDKAFKA_PREFIX="${RDKAFKA_PREFIX:-}" &&
		"${sudo[@]}" make -s PG_CONFIG="$PG_CONFIG" RDKAFKA_PREFIX="${RDKAFKA_PREFIX:-}" install &&
		# A restart loads the library just installed.
		if test/services/pg.sh status; then test/services/pg.sh restart; else test/services/pg.sh start; fi &&
		test/services/kafka.sh start
	} >>"$LOG" 2>&1 || die "setup failed; see $LOG"
	mkdir -p "$BENCH_DIR"
	gcc -O2 -Wall -o "$BENCH_DIR/produce" test/bench/produce.c "${RDKAFKA_CC[@]}" -lrdkafka
	gcc -O2 -Wall -o "$BENCH_DIR/raw_consume" test/bench/raw_consume.c "${RDKAFKA_CC[@]}" -lrdkafka
	gcc -O2 -Wall -o "$BENCH_DIR/raw_consume_produce" test/bench/raw_consume_produce.c "${RDKAFKA_CC[@]}" -lrdkafka
	q -f test/bench/setup.sql >>"$LOG" 2>&1 || die "test/bench/setup.sql failed; see $LOG"
	# A setting a test left behind (an ALTER SYSTEM whose reset a killed
	# test never ran) changes every figure: a state cache of 10 entries
	# once made a session job a third slower.  Say so where it will be seen.
	local altered
	altered=$(q -c "SELECT string_agg(name || ' = ' || setting, ', ' ORDER BY name) FROM pg_settings
	                 WHERE name LIKE 'mailer.%' AND sourcefile LIKE '%/postgresql.auto.conf'")
	[ -z "$altered" ] || say "WARNING: mailer settings set by ALTER SYSTEM: $altered"
	PGDATA_OWNER_DIR=$PGDATA/mailer/$(q -c "SELECT oid FROM pg_extension WHERE extname = 'mailer'")
	PM_PID=$(head -1 "$PGDATA/postmaster.pid")
	BROKER_PID=$(cat "$KAFKA_DIR/kafka.pid" 2>/dev/null || echo 0)
}

# Sum of the end offsets of a topic's partitions (0 if it has none).  A
# topic just created may have no leader yet: kcat fails, and is asked again.
topic_count()
{
	local topic=$1 args=() out
	for p in $(seq 0 7); do args+=(-t "$topic:$p:-1"); done
	for _ in $(seq 1 20); do
		out=$(timeout 30 kcat -b "$KAFKA_BROKERS" -Q "${args[@]}" 2>/dev/null) && break
		sleep 0.5
	done
	awk '/offset/ { s += $NF } END { print s + 0 }' <<<"$out"
}

# A topic of EVENTS orders on SERVICE (kafka or pulsar: test/services)
# with PARTITIONS partitions, produced once by the command after WHAT (the
# words said of it) and reused while COUNT (a function of the topic) says
# it holds exactly that many.
#   topic_once SERVICE TOPIC EVENTS PARTITIONS COUNT WHAT COMMAND...
topic_once()
{
	local service=$1 topic=$2 events=$3 partitions=$4 count=$5 what=$6 have
	shift 6
	test/services/$service.sh create-topic "$topic" "$partitions" >>"$LOG" 2>&1 || die "cannot create $service topic $topic"
	have=$("$count" "$topic")
	if [ "$have" = "$events" ]; then
		say "$service topic $topic: $events orders already there"
		return
	fi
	if [ "$have" != 0 ]; then
		test/services/$service.sh delete-topic "$topic" >>"$LOG" 2>&1
		test/services/$service.sh create-topic "$topic" "$partitions" >>"$LOG" 2>&1
	fi
	say "$service topic $topic: producing $events orders$what"
	"$@"
	have=$("$count" "$topic")
	[ "$have" = "$events" ] || die "$service topic $topic holds $have orders, not $events"
}

# A Kafka topic of EVENTS orders over KEYS customers (MODE cycle: every key
# in turn), 8 partitions.
ensure_topic()
{
	local topic=$1 events=$2 keys=$3 mode=${4:-}
	topic_once kafka "$topic" "$events" 8 topic_count " over $keys customers${mode:+ ($mode)}" \
		kafka_orders "$topic" "$events" "$keys" "$mode"
}

kafka_orders()
{
	"$BENCH_DIR/produce" "$KAFKA_BROKERS" "$1" "$2" "$3" ${4:+--$4} | tee -a "$LOG"
}

# ---------------------------------------------------------------- measuring

# utime + stime of a process (all its threads), in seconds.
proc_cpu()
{
	awk -v hz="$CLK_TCK" '{ sub(/^.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# CPU seconds of the server's processes (the postmaster and its children
# but those in SKIP, a list of pids), one "pid seconds" line each: WAL
# writer, checkpointer, background writer, autovacuum.
server_cpu_snapshot()
{
	local skip=${1:-0}
	for st in /proc/[0-9]*/stat; do
		cat "$st" 2>/dev/null || true	# gone meanwhile
	done | awk -v pm="$PM_PID" -v skip="$skip" -v hz="$CLK_TCK" '
		BEGIN { split(skip, s, " "); for (i in s) skipped[s[i]] = 1 }
		{ pid = $1; sub(/^.*\) /, ""); if (($2 == pm || pid == pm) && !(pid in skipped)) print pid, ($12 + $13) / hz }'
}

# CPU the server's processes used since snapshot FILE: per process alive
# now, its CPU less what it had then (a process that exited meanwhile is
# not counted; one that started counts from zero).
server_cpu_since()
{
	local file=$1 skip=${2:-0}
	server_cpu_snapshot "$skip" | awk 'NR == FNR { before[$1] = $2; next } { s += $2 - before[$1] } END { print s + 0 }' "$file" -
}

# The machine's CPU seconds so far, over all cores: "busy idle steal"
# (idle includes iowait; steal is time the hypervisor gave elsewhere).
machine_cpu()
{
	awk -v hz="$CLK_TCK" '$1 == "cpu" { print ($2 + $3 + $4 + $7 + $8) / hz, ($5 + $6) / hz, $9 / hz }' /proc/stat
}

# A /proc/PID/status field, in MB.
proc_mb() { awk -v f="$2:" '$1 == f { printf "%.1f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null; }

# A process's minor page faults so far (field 10 of /proc/PID/stat, counted
# after the command name, which may hold spaces).
proc_minflt() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $8 }'; }

job_pid() { q -c "SELECT coalesce(pid, 0) FROM mailer.jobs WHERE name = '$1' AND state = 'running'"; }

# The pid of subtask K of a running job (0 when it has none yet).
subtask_pid() { q -c "SELECT coalesce(max(pid), 0) FROM mailer.subtasks WHERE name = '$1' AND subtask = $2"; }

# The pids of every subtask of a running job, in subtask order.
subtask_pids() { q -c "SELECT string_agg(pid::text, ' ' ORDER BY subtask) FROM mailer.subtasks WHERE name = '$1'"; }

# The pid of the job's worker (subtask 0) or of its subtask K, once running.
wait_job_pid()
{
	local pid=0
	for _ in $(seq 1 600); do
		if [ "${2:-0}" = 0 ]; then pid=$(job_pid "$1"); else pid=$(subtask_pid "$1" "$2"); fi
		[ "${pid:-0}" != 0 ] && break
		sleep 0.05
	done
	echo "$pid"
}

# wait_job in five-second calls until the job has committed its input: one
# long call would hold a snapshot for the whole run, and that snapshot keeps
# every updated row's old versions (sink tables, the memory backend's rows)
# from being pruned, which no production server would see from a waiting
# client.  Not one-second calls: each call asks the worker for a new end
# mark, answered once a checkpoint (1 s apart) has committed up to it, and
# with Kafka slow to answer the mark's offset queries on a busy machine,
# every call ended before its answer, forever (seen at 5M keys).  Even
# five-second calls stalled the pruning in five-second waves: a sixth of
# the memory backend's row updates were not HOT.  So with $3, the records
# the job is to read, it first polls mailer.metrics in short statements
# until the job has read them, and only then asks wait_job for the commit.
# Prints the job's state; fails after $2 seconds or on another error.
bench_wait_job()
{
	local name=$1 deadline=$((SECONDS + $2)) expected=${3:-0} out
	while [ "$expected" -gt 0 ] && [ "$SECONDS" -lt "$deadline" ] &&
		[ "$(q -c "SELECT coalesce(sum(records_in), 0) >= $expected FROM mailer.metrics WHERE name = '$name'")" != t ]; do
		sleep 0.5
	done
	while :; do
		if out=$(q -c "SELECT mailer.wait_job('$name', '5 seconds')" 2>&1); then
			echo "$out"
			return 0
		fi
		[[ $out == *"did not commit its available input"* ]] || { echo "$out" >&2; return 1; }
		[ "$SECONDS" -lt "$deadline" ] || { echo "$out" >&2; return 1; }
	done
}

drop_job() { q -c "SELECT mailer.drop_job(name) FROM mailer.job WHERE name = '$1'" >/dev/null; }

# The JSON spec of a benchmark job.  KIND: passthrough append totals
# tumbling sliding session distinct latency; BACKEND: rocksdb or memory; PARALLELISM
# above 1 adds that field, so the spec at 1 is the throughput section's.
# JOB_SOURCE, when set, is the source instead of the Kafka topics (the
# pulsar section's).
job_spec()
{
	local kind=$1 backend=$2 topics=$3 start=${4:-earliest} parallelism=${5:-1} steps sink event_time=""
	local window="" agg='{"aggregate": {"orders": "count(*)", "total": "sum((value->>'"'"'amount'"'"')::numeric)"}}'
	local key='{"key_by": {"customer_id": "value->>'"'"'customer_id'"'"'"}}'
	case $kind in
	passthrough)
		steps='[{"filter": "(value->>'"'"'amount'"'"')::numeric < 0"}]'
		sink='{"type": "table", "table": "bench.passthrough", "mode": "append"}' ;;
	append|latency)
		steps='[{"map": {"order_id": "(value->>'"'"'order_id'"'"')::bigint", "sent": "(value->>'"'"'sent'"'"')::bigint"}}]'
		sink='{"type": "table", "table": "bench.latency", "mode": "append"}' ;;
	totals)
		steps="[$key, $agg]"
		sink='{"type": "table", "table": "bench.totals"}' ;;
	kafka_passthrough)
		# Every order to the Kafka sink's topic, key and value as read.
		steps='[]'
		sink='{"type": "kafka", "brokers": "'$KAFKA_BROKERS'", "topic": "'$KSINK_TOPIC'", "key": "key", "value": "value", "format": "text"}' ;;
	kafka_totals)
		# Running totals per customer; the sink's default key and value (JSON).
		steps="[$key, $agg]"
		sink='{"type": "kafka", "brokers": "'$KAFKA_BROKERS'", "topic": "'$KSINK_TOPIC'"}' ;;
	tumbling|sliding|sliding_update|session|distinct)
		case $kind in
		tumbling) window='{"window": {"type": "tumbling", "size": "1 minute"}}' ;;
		# The tumbling job through a general aggregate (issue 19): DISTINCT
		# keeps each window's inputs and replays them when it fires.  Order
		# ids are unique, so it counts what the tumbling job's count(*) does.
		distinct)
			window='{"window": {"type": "tumbling", "size": "1 minute"}}'
			agg='{"aggregate": {"orders": "count(DISTINCT value->>'"'"'order_id'"'"')", "total": "sum((value->>'"'"'amount'"'"')::numeric)"}}' ;;
		sliding) window='{"window": {"type": "sliding", "size": "1 minute", "slide": "15 seconds"}}' ;;
		# Every window a record changes is a row at the next checkpoint (the sink section).
		sliding_update) window='{"window": {"type": "sliding", "size": "1 minute", "slide": "15 seconds", "emit": "update"}}' ;;
		session) window='{"window": {"type": "session", "gap": "5 seconds"}}' ;;
		esac
		event_time='"event_time": "(value->>'"'"'ts'"'"')::timestamptz",
		  "watermark": {"max_out_of_orderness": "'$OUT_OF_ORDERNESS_S' seconds", "idle_timeout": "'$IDLE_TIMEOUT_S' seconds"'"${BENCH_MAX_DRIFT:+, \"max_drift\": $BENCH_MAX_DRIFT}"'},'
		steps="[$key, $window, $agg]"
		sink='{"type": "table", "table": "bench.windows"}' ;;
	*) die "unknown job kind $kind" ;;
	esac
	local source='{"type": "kafka", "brokers": "'$KAFKA_BROKERS'", "topics": '$topics', "start": "'$start'"'
	[ -z "${BENCH_SOURCE_OPTIONS:-}" ] || source+=', "options": '$BENCH_SOURCE_OPTIONS
	source+='}'
	cat <<-EOF
	{"source": ${JOB_SOURCE:-$source},
	 $event_time
	 "steps": $steps,
	 "sink": $sink,
	 "checkpoint": {"interval": "1 second"}$([ "$backend" = - ] || echo ", \"state\": {\"backend\": \"$backend\"}")$([ "$parallelism" = 1 ] || echo ", \"parallelism\": $parallelism")}
	EOF
}

sink_of()
{
	case $1 in
	passthrough|kafka_*) echo bench.passthrough ;;
	append|latency) echo bench.latency ;;
	totals) echo bench.totals ;;
	*) echo bench.windows ;;
	esac
}

# Run one job over a topic's backlog and record what it took.
#   [JOB_PARALLELISM=P] [JOB_PERF_SUBTASK=K] run_job SECTION LABEL KIND BACKEND RUN TOPICS EXPECTED [PIN_CPU] [PERF_OUT] [TIMEOUT]
# Sets JOB_RATE, JOB_PID (subtask 0's), JOB_PIDS (every subtask's), JOB_ID,
# JOB_CPU_PER_M (summed over the subtasks) for the caller; the job is left
# running (stopped and dropped by finish_job).  A job that has not read
# everything after TIMEOUT seconds (BENCH_JOB_TIMEOUT) is measured on the
# records it read by then.  PIN_CPU pins subtask 0; perf records subtask
# JOB_PERF_SUBTASK (0 by default).  JOB_AFTER_WAIT, when set, is a command
# run with the job's name once wait_job has returned, inside the clock (the
# Kafka sink section waits there for the output to be published).
run_job()
{
	local section=$1 label=$2 kind=$3 backend=$4 run=$5 topics=$6 expected=$7
	local pin=${8:-none} perf_out=${9:-} timeout=${10:-$BENCH_JOB_TIMEOUT}
	local parallelism=${JOB_PARALLELISM:-1} perf_subtask=${JOB_PERF_SUBTASK:-0}
	local name spec t0 t1 srv cpu secs state records perf_pid="" timed_out=0 pid restarts broker
	local busy0 idle0 steal0 busy1 idle1 steal1
	name=bench_${label//[^a-z0-9]/_}
	drop_job "$name"
	q -c "TRUNCATE $(sink_of "$kind")"
	spec=$(job_spec "$kind" "$backend" "$topics" earliest "$parallelism")
	server_cpu_snapshot >"$BENCH_OUT/server_cpu.before"
	broker=$(proc_cpu "$BROKER_PID")
	read -r busy0 idle0 steal0 <<<"$(machine_cpu)"
	t0=$(now)
	JOB_ID=$(q -v spec="$spec" <<<"SELECT mailer.create_job('$name', :'spec')")
	if [ "$pin" != none ] || [ -n "$perf_out" ]; then
		JOB_PID=$(wait_job_pid "$name")
		[ "$pin" != none ] && taskset -a -p -c "$pin" "$JOB_PID" >/dev/null
		if [ -n "$perf_out" ]; then
			pid=$(wait_job_pid "$name" "$perf_subtask")
			[ "${pid:-0}" != 0 ] || die "job $name: subtask $perf_subtask did not start"
			perf record -e cpu-clock -g -o "$perf_out" -p "$pid" >>"$LOG" 2>&1 &
			perf_pid=$!
		fi
	fi
	if ! state=$(bench_wait_job "$name" "$timeout" "$expected" 2>>"$LOG"); then
		state=$(q -c "SELECT state FROM mailer.jobs WHERE name = '$name'")
		timed_out=1
	fi
	[ "$timed_out" = 1 ] || [ -z "${JOB_AFTER_WAIT:-}" ] || "$JOB_AFTER_WAIT" "$name"
	t1=$(now)
	read -r busy1 idle1 steal1 <<<"$(machine_cpu)"
	[ -n "$perf_pid" ] && { kill -INT "$perf_pid"; wait "$perf_pid" || true; }
	JOB_PID=$(job_pid "$name")
	[ "$state" = running ] && [ "${JOB_PID:-0}" != 0 ] || die "job $name ended as '$state': $(q -c "SELECT last_error FROM mailer.jobs WHERE name = '$name'")"
	# Every subtask is still running (the job waits for more input): their
	# CPU is all the job's.  A restart would have lost a process's CPU.
	JOB_PIDS=$(subtask_pids "$name")
	[ "$(wc -w <<<"$JOB_PIDS")" = "$parallelism" ] || die "job $name runs subtasks '$JOB_PIDS', not $parallelism"
	restarts=$(q -c "SELECT restarts FROM mailer.jobs WHERE name = '$name'")
	[ "$restarts" = 0 ] || die "job $name restarted $restarts times: $(q -c "SELECT last_error FROM mailer.jobs WHERE name = '$name'")"
	cpu=0
	for pid in $JOB_PIDS; do cpu=$(calc "$cpu + $(proc_cpu "$pid")"); done
	srv=$(server_cpu_since "$BENCH_OUT/server_cpu.before" "$JOB_PIDS")
	broker=$(calc "$(proc_cpu "$BROKER_PID") - $broker")
	records=$(q -c "SELECT records_in FROM mailer.metrics WHERE name = '$name'")
	if [ "$timed_out" = 1 ]; then
		say "  $name: still busy after $timeout s, measured on the $records records read"
		expected=$records
	fi
	[ "$records" -ge "$expected" ] || die "job $name read $records records, expected $expected"
	secs=$(calc "$t1 - $t0")
	JOB_RATE=$(calc "$expected / $secs")
	JOB_CPU_PER_M=$(calc "$cpu * 1000000 / $expected")
	JOB_SERVER_CPU_PER_M=$(calc "$srv * 1000000 / $expected")
	JOB_BROKER_CPU_PER_M=$(calc "$broker * 1000000 / $expected")
	record "$section" "$label" "$backend" "$run" timed_out "$timed_out"
	record "$section" "$label" "$backend" "$run" records_per_s "$JOB_RATE"
	record "$section" "$label" "$backend" "$run" seconds "$secs"
	record "$section" "$label" "$backend" "$run" cpu_s_per_m "$JOB_CPU_PER_M"
	record "$section" "$label" "$backend" "$run" server_cpu_s_per_m "$JOB_SERVER_CPU_PER_M"
	record "$section" "$label" "$backend" "$run" broker_cpu_s_per_m "$JOB_BROKER_CPU_PER_M"
	# Cores kept busy over the run, by the job's processes and by the broker.
	record "$section" "$label" "$backend" "$run" job_cores "$(calc "$cpu / $secs")"
	record "$section" "$label" "$backend" "$run" broker_cores "$(calc "$broker / $secs")"
	# The rest of the machine over the same time: every other process
	# (other work on a shared machine, the harness's psql), idle, stolen.
	record "$section" "$label" "$backend" "$run" other_cores "$(calc "($busy1 - $busy0 - $cpu - $broker - $srv) / $secs")"
	record "$section" "$label" "$backend" "$run" idle_cores "$(calc "($idle1 - $idle0) / $secs")"
	record "$section" "$label" "$backend" "$run" steal_cores "$(calc "($steal1 - $steal0) / $secs")"
	record "$section" "$label" "$backend" "$run" rss_mb "$(proc_mb "$JOB_PID" VmRSS)"
	record "$section" "$label" "$backend" "$run" hwm_mb "$(proc_mb "$JOB_PID" VmHWM)"
	record "$section" "$label" "$backend" "$run" anon_mb "$(proc_mb "$JOB_PID" RssAnon)"
	record "$section" "$label" "$backend" "$run" minor_faults "$(proc_minflt "$JOB_PID")"
	record "$section" "$label" "$backend" "$run" records_out "$(q -c "SELECT records_out FROM mailer.metrics WHERE name = '$name'")"
	q -c "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms), max(duration_ms), count(*)
	        FROM bench.checkpoint_log WHERE job_id = $JOB_ID" | {
		IFS='|' read -r med max n
		record "$section" "$label" "$backend" "$run" ckpt_ms_median "$med"
		record "$section" "$label" "$backend" "$run" ckpt_ms_max "$max"
		record "$section" "$label" "$backend" "$run" checkpoints "$n"
	}
	say "  $section $label $backend run $run: $(printf '%.0f' "$JOB_RATE") records/s, $(printf '%.2f' "$JOB_CPU_PER_M") CPU-s/M$([ "$parallelism" = 1 ] || echo " over $parallelism subtasks"), ${secs%.*} s"
	JOB_NAME=$name
}

# Stop and drop the job.  mailer.memory_state never shrinks by itself: the
# memory backend's row versions of one job would leave the table (and its
# index) bloated for the next, which then runs measurably slower; every job
# starts from a compact one (no other job is running here).
finish_job()
{
	q -c "SELECT mailer.stop_job('$JOB_NAME', '5 minutes')" >/dev/null
	drop_job "$JOB_NAME"
	q -c "VACUUM FULL mailer.memory_state"
}

# The round's raw rate, the ratios' denominator: the median of
# BENCH_RAW_READS reads of the topic.  One read of 5M orders takes about two
# seconds, and one read's rate moved a round's ratios by up to 30%.
raw_consume()
{
	local topic=$1 expected=$2 run=$3 out secs rate cpu i reads=()
	for i in $(seq 1 "$BENCH_RAW_READS"); do
		out=$("$BENCH_DIR/raw_consume" "$KAFKA_BROKERS" "$topic" "$expected") || die "raw_consume failed: $out"
		read -r _ _ _ _ _ secs _ rate _ cpu <<<"$out"
		reads+=("$rate $secs $cpu")
	done
	read -r rate secs cpu <<<"$(printf '%s\n' "${reads[@]}" | sort -n | sed -n "$(( (BENCH_RAW_READS + 1) / 2 ))p")"
	RAW_RATE=$rate
	record throughput raw - "$run" records_per_s "$rate"
	record throughput raw - "$run" seconds "$secs"
	record throughput raw - "$run" cpu_s_per_m "$(calc "$cpu * 1000000 / $expected")"
	say "  raw consume run $run: $rate records/s, cpu $cpu s (the median of $BENCH_RAW_READS reads: $(printf '%s\n' "${reads[@]}" | awk '{ printf "%s%s", sep, $1; sep = ", " }'))"
}

# ---------------------------------------------------------------- sections

MAIN_TOPIC=bench_orders_${BENCH_EVENTS}_${BENCH_KEYS}
THROUGHPUT_PIN=none
[ "${BENCH_THROUGHPUT_PIN:-0}" = 1 ] && [ "$BENCH_PIN_CPU" != none ] && THROUGHPUT_PIN=$BENCH_PIN_CPU
THROUGHPUT_JOBS=${BENCH_THROUGHPUT_JOBS:-passthrough:- append:- totals:rocksdb totals:memory tumbling:rocksdb tumbling:memory sliding:rocksdb sliding:memory session:rocksdb session:memory distinct:rocksdb}

section_throughput()
{
	local where=""
	[ "$THROUGHPUT_PIN" != none ] && where=", each worker on CPU $THROUGHPUT_PIN"
	say "== throughput: $MAIN_TOPIC, $BENCH_RUNS rounds$where"
	for run in $(seq 1 "$BENCH_RUNS"); do
		raw_consume "$MAIN_TOPIC" "$BENCH_EVENTS" "$run"
		for jb in $THROUGHPUT_JOBS; do
			local kind=${jb%%:*} backend=${jb##*:}
			run_job throughput "$kind" "$kind" "$backend" "$run" "[\"$MAIN_TOPIC\"]" "$BENCH_EVENTS" "$THROUGHPUT_PIN"
			record throughput "$kind" "$backend" "$run" ratio_to_raw "$(calc "$JOB_RATE / $RAW_RATE")"
			finish_job
		done
	done
}

# The throughput section's windowed jobs at each of BENCH_PARALLELISM on the
# main topic (8 partitions: at 4, two per subtask).  Every ratio is to
# parallelism 1 of the same round and job; at 2 the CPU ratio is the cost of
# the exchange and the aligned two-phase checkpoints.  Each round starts at
# the next parallelism of the list, so none is always the first to run.
section_parallelism()
{
	local jb kind backend p order i n
	local -A rate cpu
	read -r -a order <<<"$BENCH_PARALLELISM"
	n=${#order[@]}
	say "== parallelism: $MAIN_TOPIC, parallelism ${BENCH_PARALLELISM// /, } on $(nproc) cores, $BENCH_RUNS rounds"
	record parallelism machine - 0 cores "$(nproc)"
	for run in $(seq 1 "$BENCH_RUNS"); do
		for jb in $BENCH_PARALLELISM_JOBS; do
			kind=${jb%%:*} backend=${jb##*:}
			rate=() cpu=()
			for i in $(seq 0 $((n - 1))); do
				p=${order[$(((i + run - 1) % n))]}
				JOB_PARALLELISM=$p run_job parallelism "${kind}_p$p" "$kind" "$backend" "$run" "[\"$MAIN_TOPIC\"]" "$BENCH_EVENTS"
				rate[$p]=$JOB_RATE cpu[$p]=$JOB_CPU_PER_M
				finish_job
			done
			[ -n "${rate[1]:-}" ] || continue
			for p in "${order[@]}"; do
				[ "$p" = 1 ] && continue
				record parallelism "${kind}_p$p" "$backend" "$run" rate_ratio_to_p1 "$(calc "${rate[$p]} / ${rate[1]}")"
				record parallelism "${kind}_p$p" "$backend" "$run" cpu_ratio_to_p1 "$(calc "${cpu[$p]} / ${cpu[1]}")"
			done
			say "  parallelism $kind $backend run $run, ratios to 1:$(for p in "${order[@]}"; do
				[ "$p" = 1 ] || printf ' at %s %.2fx records/s, %.2fx CPU/record;' "$p" "$(calc "${rate[$p]} / ${rate[1]}")" "$(calc "${cpu[$p]} / ${cpu[1]}")"
			done)"
		done
	done
}

flink_build()
{
	local build=$BENCH_DIR/flink-build
	[ -z "${FLINK_CP:-}" ] || return 0
	say "flink: building test/bench/flink (mvn -B -q package)"
	mvn -B -q -f test/bench/flink/pom.xml -Dmaven.repo.local="$MAILER_CACHE_DIR/m2" \
		-Dbench.build.dir="$build" package </dev/null >>"$LOG" 2>&1 ||
		die "the Flink job did not build; see $LOG"
	FLINK_CP="$build/classes:$build/lib/*"
}

section_flink()
{
	local pin=() mailer_pin=none
	if [ "$BENCH_PIN_CPU" != none ]; then
		pin=(taskset -c "$BENCH_PIN_CPU")
		mailer_pin=$BENCH_PIN_CPU
	fi
	flink_build
	say "== flink: tumbling window, RocksDB, 1 s checkpoints, parallelism 1, CPU ${BENCH_PIN_CPU}"
	for run in $(seq 1 "$BENCH_RUNS"); do
		local mailer_eps flink_eps out
		run_job flink mailer tumbling rocksdb "$run" "[\"$MAIN_TOPIC\"]" "$BENCH_EVENTS" "$mailer_pin"
		finish_job
		mailer_eps=$(calc "1000000 / $JOB_CPU_PER_M")
		record flink mailer rocksdb "$run" events_per_cpu_s "$mailer_eps"

		rm -rf "$BENCH_DIR/flink-ckpt"
		out=$("${pin[@]}" java -Xms1g -Xmx1g -XX:+UseG1GC \
			--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED \
			-cp "$FLINK_CP" mailer.bench.OrderTotals "$KAFKA_BROKERS" "$MAIN_TOPIC" \
			"$OUT_OF_ORDERNESS_S" "$IDLE_TIMEOUT_S" "$BENCH_DIR/flink-ckpt" \
			</dev/null 2>>"$BENCH_OUT/flink.log" | tail -1) || die "the Flink job failed; see $BENCH_OUT/flink.log"
		# flink events N windows W seconds S cpu_seconds C process_cpu_seconds P
		read -r _ _ events _ windows _ secs _ cpu _ pcpu <<<"$out"
		flink_eps=$(calc "$BENCH_EVENTS / $cpu")
		record flink flink rocksdb "$run" records_per_s "$(calc "$BENCH_EVENTS / $secs")"
		record flink flink rocksdb "$run" seconds "$secs"
		record flink flink rocksdb "$run" cpu_s_per_m "$(calc "$cpu * 1000000 / $BENCH_EVENTS")"
		record flink flink rocksdb "$run" process_cpu_s_per_m "$(calc "$pcpu * 1000000 / $BENCH_EVENTS")"
		record flink flink rocksdb "$run" events_per_cpu_s "$flink_eps"
		record flink flink rocksdb "$run" windowed_events "$events"
		record flink flink rocksdb "$run" windows "$windows"
		record flink ratio - "$run" mailer_over_flink_per_cpu "$(calc "$mailer_eps / $flink_eps")"
		say "  flink run $run: $(printf '%.0f' "$(calc "$BENCH_EVENTS / $secs")") records/s, $flink_eps events/CPU-s (mailer $mailer_eps), $events events in $windows windows"
	done
}

# ---- kafka_sink (issue 14): the same orders from the main topic into a
# Kafka topic, exactly once, by mailer's Kafka sink, by raw librdkafka
# (raw_consume_produce.c: consume, produce in one transaction per second)
# and by Flink's KafkaSink (EXACTLY_ONCE, 1 s checkpoints).  Each run
# writes to a fresh output topic, which is counted read_committed after the
# clock stopped.  The engine's CPU: mailer's worker plus the rest of the
# server (the outbox's WAL), the raw program, Flink's JVM; the broker's is
# shown apart (the transactions' cost lands there).
KSINK_TOPIC=bench_kafka_sink_out
KSINK_EMPTY_TOPIC=bench_kafka_sink_empty

# A fresh, empty output topic.
ksink_topic()
{
	test/services/kafka.sh delete-topic "$KSINK_TOPIC" >>"$LOG" 2>&1 || die "cannot delete topic $KSINK_TOPIC"
	test/services/kafka.sh create-topic "$KSINK_TOPIC" 8 >>"$LOG" 2>&1 || die "cannot create topic $KSINK_TOPIC"
}

# The records a read_committed consumer sees in the output topic.
ksink_count()
{
	timeout 600 kcat -C -b "$KAFKA_BROKERS" -t "$KSINK_TOPIC" -X isolation.level=read_committed -e -q -f '\n' 2>>"$LOG" | wc -l
}

# run_job's JOB_AFTER_WAIT: wait_job has returned, so the newest checkpoint
# covers the whole input (and wait_job also waits for the publish); the
# clock stops once every subtask's Kafka sink shows nothing pending, which
# this checks rather than assumes.  (published_epoch only moves with epochs
# that had records, so it need not reach the newest checkpoint's epoch.)
ksink_wait_published()
{
	local name=$1 ok
	for _ in $(seq 1 3000); do
		ok=$(q -c "SELECT count(*) > 0 AND bool_and(published_epoch > 0 AND pending_records = 0)
		             FROM mailer.kafka_sinks WHERE job = '$name'")
		[ "$ok" = t ] && return 0
		sleep 0.2
	done
	die "job $name: its Kafka sink still has records pending after 10 minutes: $(q -c "SELECT string_agg(to_jsonb(s)->>'last_error', '; ') FROM mailer.kafka_sinks s WHERE job = '$name'")"
}

# Flink's KafkaSinkBench in MODE over TOPIC; sets KSINK_OUT to its result
# line and KSINK_BROKER to the broker's CPU seconds meanwhile.
ksink_flink_run()
{
	local mode=$1 topic=$2 broker
	rm -rf "$BENCH_DIR/flink-ckpt"
	broker=$(proc_cpu "$BROKER_PID")
	KSINK_OUT=$("${KSINK_PIN[@]}" java -Xms1g -Xmx1g -XX:+UseG1GC \
		--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED \
		-cp "$FLINK_CP" mailer.bench.KafkaSinkBench "$KAFKA_BROKERS" "$topic" "$KSINK_TOPIC" "$mode" \
		"$BENCH_DIR/flink-ckpt" "$BENCH_EVENTS" </dev/null 2>>"$BENCH_OUT/flink.log" | tail -1) ||
		die "the Flink Kafka sink job failed; see $BENCH_OUT/flink.log"
	KSINK_BROKER=$(calc "$(proc_cpu "$BROKER_PID") - $broker")
}

# The state backend of a kafka_sink job (as the results show it).
ksink_backend() { if [ "$1" = totals ]; then echo rocksdb; else echo -; fi; }

section_kafka_sink()
{
	local run kind mailer_pin=none out secs rate cpu pcpu txns delivered broker n
	local -A eps startup
	KSINK_PIN=()
	if [ "$BENCH_PIN_CPU" != none ]; then
		KSINK_PIN=(taskset -c "$BENCH_PIN_CPU")
		mailer_pin=$BENCH_PIN_CPU
	fi
	flink_build
	test/services/kafka.sh create-topic "$KSINK_EMPTY_TOPIC" 8 >>"$LOG" 2>&1 || die "cannot create topic $KSINK_EMPTY_TOPIC"
	say "== kafka_sink: $MAIN_TOPIC to Kafka exactly once (mailer, raw librdkafka, Flink KafkaSink EXACTLY_ONCE), 1 s checkpoints/transactions, CPU $BENCH_PIN_CPU"
	# Flink's fixed cost: the MiniCluster's start, the job's deployment and
	# its end, over an empty topic; the report shows Flink's CPU net of it.
	for kind in $BENCH_KAFKA_SINK_JOBS; do
		ksink_topic
		ksink_flink_run "$kind" "$KSINK_EMPTY_TOPIC"
		read -r _ _ _ _ secs _ cpu _ <<<"$KSINK_OUT"
		startup[$kind]=$cpu
		record kafka_sink "flink_$kind" "$(ksink_backend "$kind")" 0 startup_cpu_s "$cpu"
		say "  flink $kind over an empty topic: $cpu CPU-s, $secs s"
	done
	for run in $(seq 1 "$BENCH_RUNS"); do
		eps=()
		ksink_topic
		broker=$(proc_cpu "$BROKER_PID")
		out=$("${KSINK_PIN[@]}" "$BENCH_DIR/raw_consume_produce" "$KAFKA_BROKERS" "$MAIN_TOPIC" "$KSINK_TOPIC" \
			"$BENCH_EVENTS" "$BENCH_EVENTS" 1000 2>>"$LOG") || die "raw_consume_produce failed: $out"
		broker=$(calc "$(proc_cpu "$BROKER_PID") - $broker")
		# messages N bytes B seconds S rate R cpu_seconds C transactions T delivered D
		read -r _ _ _ _ _ secs _ rate _ cpu _ txns _ delivered <<<"$out"
		n=$(ksink_count)
		eps[raw]=$(calc "$BENCH_EVENTS / $cpu")
		record kafka_sink raw - "$run" records_per_s "$rate"
		record kafka_sink raw - "$run" seconds "$secs"
		record kafka_sink raw - "$run" cpu_s_per_m "$(calc "$cpu * 1000000 / $BENCH_EVENTS")"
		record kafka_sink raw - "$run" broker_cpu_s_per_m "$(calc "$broker * 1000000 / $BENCH_EVENTS")"
		record kafka_sink raw - "$run" records_per_cpu_s "${eps[raw]}"
		record kafka_sink raw - "$run" transactions "$txns"
		record kafka_sink raw - "$run" records_out_topic "$n"
		say "  kafka_sink raw run $run: $rate records/s, $cpu CPU-s, $txns transactions, $n records in the topic"
		[ "$n" = "$BENCH_EVENTS" ] || say "  WARNING: raw: $n records in $KSINK_TOPIC, expected $BENCH_EVENTS"
		for kind in $BENCH_KAFKA_SINK_JOBS; do
			local backend
			backend=$(ksink_backend "$kind")
			ksink_topic
			JOB_AFTER_WAIT=ksink_wait_published \
				run_job kafka_sink "mailer_$kind" "kafka_$kind" "$backend" "$run" "[\"$MAIN_TOPIC\"]" "$BENCH_EVENTS" "$mailer_pin"
			finish_job
			n=$(ksink_count)
			eps[mailer_$kind]=$(calc "1000000 / ($JOB_CPU_PER_M + $JOB_SERVER_CPU_PER_M)")
			record kafka_sink "mailer_$kind" "$backend" "$run" records_per_cpu_s "${eps[mailer_$kind]}"
			record kafka_sink "mailer_$kind" "$backend" "$run" records_out_topic "$n"
			say "  kafka_sink mailer $kind run $run: $n records in the topic, ${eps[mailer_$kind]} records/CPU-s (worker + server)"
			[ "$kind" != passthrough ] || [ "$n" = "$BENCH_EVENTS" ] ||
				say "  WARNING: mailer passthrough: $n records in $KSINK_TOPIC, expected $BENCH_EVENTS"

			ksink_topic
			ksink_flink_run "$kind" "$MAIN_TOPIC"
			# flink records N seconds S cpu_seconds C process_cpu_seconds P
			read -r _ _ _ _ secs _ cpu _ pcpu <<<"$KSINK_OUT"
			n=$(ksink_count)
			eps[flink_$kind]=$(calc "$BENCH_EVENTS / $cpu")
			record kafka_sink "flink_$kind" "$backend" "$run" records_per_s "$(calc "$BENCH_EVENTS / $secs")"
			record kafka_sink "flink_$kind" "$backend" "$run" seconds "$secs"
			record kafka_sink "flink_$kind" "$backend" "$run" cpu_s_per_m "$(calc "$cpu * 1000000 / $BENCH_EVENTS")"
			record kafka_sink "flink_$kind" "$backend" "$run" process_cpu_s_per_m "$(calc "$pcpu * 1000000 / $BENCH_EVENTS")"
			record kafka_sink "flink_$kind" "$backend" "$run" broker_cpu_s_per_m "$(calc "$KSINK_BROKER * 1000000 / $BENCH_EVENTS")"
			record kafka_sink "flink_$kind" "$backend" "$run" records_per_cpu_s "${eps[flink_$kind]}"
			record kafka_sink "flink_$kind" "$backend" "$run" net_cpu_s_per_m "$(calc "($cpu - ${startup[$kind]}) * 1000000 / $BENCH_EVENTS")"
			record kafka_sink "flink_$kind" "$backend" "$run" records_out_topic "$n"
			say "  kafka_sink flink $kind run $run: $(printf '%.0f' "$(calc "$BENCH_EVENTS / $secs")") records/s, $cpu CPU-s, $n records in the topic"
			[ "$kind" != passthrough ] || [ "$n" = "$BENCH_EVENTS" ] ||
				say "  WARNING: flink passthrough: $n records in $KSINK_TOPIC, expected $BENCH_EVENTS"

			# Records per CPU-second, within this round.
			record kafka_sink "ratio_$kind" - "$run" mailer_over_raw_per_cpu "$(calc "${eps[mailer_$kind]} / ${eps[raw]}")"
			record kafka_sink "ratio_$kind" - "$run" flink_over_raw_per_cpu "$(calc "${eps[flink_$kind]} / ${eps[raw]}")"
			record kafka_sink "ratio_$kind" - "$run" mailer_over_flink_per_cpu "$(calc "${eps[mailer_$kind]} / ${eps[flink_$kind]}")"
			record kafka_sink "ratio_$kind" - "$run" mailer_over_flink_net_per_cpu \
				"$(calc "${eps[mailer_$kind]} * ($cpu - ${startup[$kind]}) / $BENCH_EVENTS")"
			record kafka_sink "ratio_$kind" - "$run" mailer_over_raw_rate "$(calc "$JOB_RATE / $rate")"
		done
	done
}

# ---- sink (issue 16): one checkpoint of BENCH_SINK_ROWS changed keys.  A
# stateless job maps each order of a topic where every customer comes once
# to a row of bench.sink_upsert (bench.totals' columns and primary key); its
# interval is an hour, so its one checkpoint is the one mailer.max_buffered_rows
# (100000 by default) or the end of the input makes.  That checkpoint's
# duration_ms (the sink's statements, the checkpoint row: the job has no
# state) is set against psql running INSERT ... SELECT ... ON CONFLICT DO
# UPDATE of the same rows into the same table, timed inside its transaction
# as duration_ms is (the commit of neither is counted).  "new": the table is
# empty; "existing": it holds every key already (each row is updated).
# Before each measured write the table is made the same: truncated, loaded
# (for "existing") and vacuumed.
SINK_TOPIC=bench_sink_${BENCH_SINK_ROWS}

# "time cpu" of process PID every 20 ms, until killed: the CPU a stretch
# of its wall-clock time took.
cpu_sampler()
{
	while :; do
		printf '%s %s\n' "$(now)" "$(proc_cpu "$1")"
		sleep 0.02
	done
}

# The CPU seconds of FILE's samples from time FROM to time TO: the last
# sample at or before FROM to the first at or after TO.
cpu_between()
{
	awk -v a="$2" -v b="$3" '$1 <= a { c0 = $2 } $1 >= b && !done { c1 = $2; done = 1 } END { printf "%.3f", c1 - c0 }' "$1"
}

# Make bench.sink_upsert empty (new) or hold bench.sink_rows (existing).
sink_table_reset()
{
	q -c "TRUNCATE bench.sink_upsert" >/dev/null
	[ "$1" = new ] || q -c "INSERT INTO bench.sink_upsert SELECT * FROM bench.sink_rows" >/dev/null
	q -c "VACUUM ANALYZE bench.sink_upsert" >/dev/null
}

# The worker's memory at a checkpoint that emits many rows: the sliding
# job with emit update over the sink section's orders (a key each, six
# seconds of event time: one pane), checkpointed once, when its 100k
# changed panes reach mailer.max_buffered_rows.  That checkpoint emits the
# four windows of every key, which go to the sink in slices.
sink_sliding_memory()
{
	local run=$1 name=bench_sink_sliding spec sampler rows
	drop_job "$name"
	q -c "TRUNCATE bench.windows" >/dev/null
	spec=$(job_spec sliding_update rocksdb "[\"$SINK_TOPIC\"]")
	spec=${spec/'"interval": "1 second"'/'"interval": "1 hour"'}
	JOB_ID=$(q -v spec="$spec" <<<"SELECT mailer.create_job('$name', :'spec')")
	sample_memory "$name" "$BENCH_OUT/sink_memory.txt" &
	sampler=$!
	bench_wait_job "$name" "$BENCH_JOB_TIMEOUT" >/dev/null ||
		die "job $name: $(q -c "SELECT last_error FROM mailer.jobs WHERE name = '$name'")"
	kill "$sampler"; wait "$sampler" 2>/dev/null || true
	rows=$(q -c "SELECT count(*) FROM bench.windows")
	[ "$rows" = $((4 * BENCH_SINK_ROWS)) ] || die "job $name left $rows rows in bench.windows, expected $((4 * BENCH_SINK_ROWS))"
	[ "$(q -c "SELECT count(*) FROM bench.checkpoint_log WHERE job_id = $JOB_ID AND records_in > 0")" = 1 ] ||
		die "job $name wrote its rows in more than one checkpoint"
	record_memory_peaks sink sliding_update rocksdb "$run" "$BENCH_OUT/sink_memory.txt"
	record sink sliding_update rocksdb "$run" ckpt_ms "$(q -c "SELECT max(duration_ms) FROM bench.checkpoint_log WHERE job_id = $JOB_ID")"
	say "  sink sliding_update run $run: $rows window rows in one checkpoint, the worker's own memory peaks at $(awk '{ m = $1 + $2 > m ? $1 + $2 : m } END { printf "%.0f", m / 1024 }' "$BENCH_OUT/sink_memory.txt") MB"
	JOB_NAME=$name
	finish_job
}

section_sink()
{
	local run case name spec ms t0 t1 rows have_rows=0 sampler cpu bpid psql_job
	local -A job_rps psql_rps job_cpu
	say "== sink: one checkpoint upserting $BENCH_SINK_ROWS keys, mailer's sink against psql INSERT ... ON CONFLICT"
	ensure_topic "$SINK_TOPIC" "$BENCH_SINK_ROWS" "$BENCH_SINK_ROWS" cycle
	q -c "SET client_min_messages = warning" \
		-c "DROP TABLE IF EXISTS bench.sink_upsert, bench.sink_rows" \
		-c "CREATE TABLE bench.sink_upsert (LIKE bench.totals INCLUDING ALL)" >/dev/null
	name=bench_sink_upsert
	spec=$(cat <<-EOF
	{"source": {"type": "kafka", "brokers": "$KAFKA_BROKERS", "topics": ["$SINK_TOPIC"], "start": "earliest"},
	 "steps": [{"map": {"customer_id": "value->>'customer_id'", "orders": "(value->>'order_id')::bigint",
	                    "total": "(value->>'amount')::numeric"}}],
	 "sink": {"type": "table", "table": "bench.sink_upsert"},
	 "checkpoint": {"interval": "1 hour"}}
	EOF
	)
	for run in $(seq 1 "$BENCH_RUNS"); do
		for case in new existing; do
			sink_table_reset "$case"
			drop_job "$name"
			JOB_ID=$(q -v spec="$spec" <<<"SELECT mailer.create_job('$name', :'spec')")
			JOB_PID=$(wait_job_pid "$name")
			cpu_sampler "$JOB_PID" >"$BENCH_OUT/sink_cpu.txt" &
			sampler=$!
			bench_wait_job "$name" "$BENCH_JOB_TIMEOUT" >/dev/null ||
				die "job $name: $(q -c "SELECT last_error FROM mailer.jobs WHERE name = '$name'")"
			sleep 0.1
			kill "$sampler"; wait "$sampler" 2>/dev/null || true
			rows=$(q -c "SELECT count(*) FROM bench.sink_upsert")
			[ "$rows" = "$BENCH_SINK_ROWS" ] || die "job $name left $rows rows in bench.sink_upsert, expected $BENCH_SINK_ROWS"
			# The checkpoint that wrote the rows: the first to count every
			# record; its row is inserted (committed_at) once duration_ms is taken.
			read -r ms t1 <<<"$(q -F ' ' -c "SELECT duration_ms, extract(epoch FROM committed_at) FROM bench.checkpoint_log
				WHERE job_id = $JOB_ID AND records_in >= $BENCH_SINK_ROWS ORDER BY epoch LIMIT 1")"
			cpu=$(cpu_between "$BENCH_OUT/sink_cpu.txt" "$(calc "$t1 - $ms / 1000")" "$t1")
			[ "$(q -c "SELECT count(*) FROM bench.checkpoint_log WHERE job_id = $JOB_ID AND records_in > 0")" = 1 ] ||
				die "job $name wrote its rows in more than one checkpoint: BENCH_SINK_ROWS above mailer.max_buffered_rows ($(q -c "SHOW mailer.max_buffered_rows"))?"
			JOB_NAME=$name
			finish_job
			job_rps[$case]=$(calc "$BENCH_SINK_ROWS * 1000 / $ms")
			job_cpu[$case]=$cpu
			record sink "mailer_$case" - "$run" ckpt_ms "$ms"
			record sink "mailer_$case" - "$run" rows_per_s "${job_rps[$case]}"
			record sink "mailer_$case" - "$run" cpu_s "$cpu"

			if [ "$have_rows" = 0 ]; then
				q -c "CREATE TABLE bench.sink_rows AS SELECT * FROM bench.sink_upsert" >/dev/null
				have_rows=1
			fi
			sink_table_reset "$case"
			# The statement alone, in its transaction: milliseconds by the
			# server's clock, CPU of its backend sampled meanwhile.
			{
				q -c "SELECT pg_backend_pid()" -c "SELECT pg_sleep(0.2)" -c "BEGIN" -c "SELECT extract(epoch FROM clock_timestamp())" \
					-c "INSERT INTO bench.sink_upsert SELECT * FROM bench.sink_rows ON CONFLICT (customer_id) DO UPDATE SET orders = EXCLUDED.orders, total = EXCLUDED.total" \
					-c "SELECT extract(epoch FROM clock_timestamp())" -c "SELECT pg_sleep(0.2)" -c "COMMIT" >"$BENCH_OUT/sink_psql.txt"
			} &
			psql_job=$!
			for _ in $(seq 1 200); do
				bpid=$(head -1 "$BENCH_OUT/sink_psql.txt" 2>/dev/null || true)
				[ -n "$bpid" ] && break
				sleep 0.01
			done
			[ -n "$bpid" ] || die "psql of the sink section did not start"
			cpu_sampler "$bpid" >"$BENCH_OUT/sink_cpu.txt" &
			sampler=$!
			wait "$psql_job" || die "psql's INSERT ... ON CONFLICT failed"
			kill "$sampler"; wait "$sampler" 2>/dev/null || true
			# Lines: the pid, then the two clocks (pg_sleep prints empty lines).
			read -r _ t0 t1 <<<"$(grep -v '^$' "$BENCH_OUT/sink_psql.txt" | paste -sd' ')"
			ms=$(calc "($t1 - $t0) * 1000")
			cpu=$(cpu_between "$BENCH_OUT/sink_cpu.txt" "$t0" "$t1")
			psql_rps[$case]=$(calc "$BENCH_SINK_ROWS * 1000 / $ms")
			record sink "psql_$case" - "$run" ckpt_ms "$ms"
			record sink "psql_$case" - "$run" rows_per_s "${psql_rps[$case]}"
			record sink "psql_$case" - "$run" cpu_s "$cpu"
			record sink "ratio_$case" - "$run" psql_over_mailer "$(calc "${psql_rps[$case]} / ${job_rps[$case]}")"
			# Rows per CPU-second, psql's over mailer's (0 CPU: too short to see).
			[ "$(calc "($cpu > 0 && ${job_cpu[$case]} > 0)")" = 1 ] &&
				record sink "ratio_$case" - "$run" psql_over_mailer_cpu "$(calc "${job_cpu[$case]} / $cpu")"
			say "  sink $case keys run $run: mailer $(printf '%.0f' "${job_rps[$case]}") rows/s (${job_cpu[$case]} CPU-s), psql $(printf '%.0f' "${psql_rps[$case]}") rows/s ($cpu CPU-s), psql/mailer $(printf '%.2f' "$(calc "${psql_rps[$case]} / ${job_rps[$case]}")")"
		done
		sink_sliding_memory "$run"
	done
	q -c "DROP TABLE bench.sink_rows, bench.sink_upsert" >/dev/null
}

# The topic for a key count: the main topic when it has that many keys,
# else one where every key comes in turn (distinct keys = min(events, keys)).
state_topic()
{
	if [ "$1" = "$BENCH_KEYS" ]; then echo "$MAIN_TOPIC"; else echo "bench_orders_${BENCH_EVENTS}_$1_cycle"; fi
}

# Restore after kill -9 of the worker: PostgreSQL restarts every backend
# (crash recovery), the launcher restarts the job, and one new order on the
# poke topic makes the restored job commit a checkpoint.
measure_restore()
{
	local keys=$1 backend=$2 run=$3 epoch t0 t_up="" t_run="" t_ckpt="" pid pglog=$MAILER_RUN_DIR/postgresql.log off line
	epoch=$(q -c "SELECT max(epoch) FROM mailer.checkpoints WHERE job_id = $JOB_ID")
	off=$(stat -c %s "$pglog")
	t0=$(now)
	kill -9 "$JOB_PID"
	"$BENCH_DIR/produce" "$KAFKA_BROKERS" bench_poke 1 1 --first "$((1000000000 + RANDOM))" >/dev/null
	for _ in $(seq 1 6000); do
		if [ -z "$t_run" ]; then
			pid=$(job_pid "$JOB_NAME" 2>/dev/null || echo 0)
			[ "${pid:-0}" != 0 ] && [ "$pid" != "$JOB_PID" ] && t_run=$(now)
		else
			[ "$(q -c "SELECT count(*) FROM mailer.checkpoints WHERE job_id = $JOB_ID AND epoch > $epoch" 2>/dev/null || echo 0)" -gt 0 ] &&
				{ t_ckpt=$(now); break; }
		fi
		sleep 0.05
	done
	[ -n "$t_ckpt" ] || die "job $JOB_NAME did not commit a checkpoint within 5 minutes of kill -9"
	# When the server accepted connections again after its crash restart:
	# the postmaster logs it with a millisecond timestamp.
	line=$(tail -c +"$((off + 1))" "$pglog" | grep -m1 'ready to accept connections' || true)
	[ -n "$line" ] && t_up=$(date -d "$(cut -d' ' -f1-3 <<<"$line")" +%s.%N)
	record state "keys_$keys" "$backend" "$run" restore_s "$(calc "$t_ckpt - $t0")"
	[ -n "$t_up" ] && record state "keys_$keys" "$backend" "$run" restore_server_up_s "$(calc "$t_up - $t0")"
	record state "keys_$keys" "$backend" "$run" restore_job_running_s "$(calc "$t_run - $t0")"
	record state "keys_$keys" "$backend" "$run" state_restore_ms \
		"$(q -c "SELECT state_restore_ms FROM mailer.metrics WHERE name = '$JOB_NAME'")"
	say "  restore after kill -9: server up ${t_up:+$(calc "$t_up - $t0")} s, job running $(calc "$t_run - $t0") s, new checkpoint $(calc "$t_ckpt - $t0") s"
	JOB_PID=$(job_pid "$JOB_NAME")
}

# mailer.metrics.last_checkpoint_ms, sampled while a job runs (it is the
# duration of the newest checkpoint, commit included).
sample_last_checkpoint()
{
	local name=$1 file=$2
	while :; do
		q -c "SELECT last_checkpoint_epoch, last_checkpoint_ms, state_checkpoint_ms FROM mailer.metrics WHERE name = '$name'" 2>/dev/null
		sleep 0.5
	done >"$file"
}

# The memory of a job's workers (every subtask), sampled every 0.2 s until
# the caller kills the sampler when the job ends, from /proc/<pid>/status:
# one line "RssAnon RssFile RssShmem VmHWM" (kB), summed over the subtasks
# running then, per sample.  The pids are looked up again when one is gone
# (a restart) and every 5 s (a subtask that started late).  VmHWM is the
# kernel's peak of all three together, per process; the worker's own
# memory is its anonymous pages (heap, RocksDB's and librdkafka's buffers,
# its threads' stacks) and the pages of its files (the binaries and
# libraries it maps, shared with every backend); RssShmem is PostgreSQL's
# shared memory (the shared buffers) as far as the worker has touched it,
# which every backend that reads or writes the same tables counts as well.
sample_memory()
{
	local name=$1 file=$2 pids='' pid i=0 gone
	while :; do
		gone=
		for pid in $pids; do [ -d "/proc/$pid" ] || gone=1; done
		if [ -z "$pids" ] || [ -n "$gone" ] || [ $((i % 25)) = 0 ]; then
			pids=$(subtask_pids "$name" 2>/dev/null || true)
		fi
		i=$((i + 1))
		if [ -n "$pids" ]; then
			for pid in $pids; do cat "/proc/$pid/status" 2>/dev/null; done |
				awk '$1 == "RssAnon:" { a += $2 } $1 == "RssFile:" { f += $2 } $1 == "RssShmem:" { s += $2 }
					 $1 == "VmHWM:" { h += $2 } END { if (h) print a, f, s, h }' || true
		fi
		sleep 0.2
	done >"$file"
}

# The peaks of sample_memory's file, in MB: of the workers' own memory
# (anonymous + file pages, in the same sample), of their anonymous pages,
# of the shared memory they touched, and of the kernel's peaks of all
# (VmHWM, summed over the subtasks); and the median and 99th percentile of
# the own memory over the samples, since a single sample (a hash table's
# doubling, a compaction) makes the peak.  Without a sample, nothing is
# recorded (empty, not 0).
record_memory_peaks()
{
	local section=$1 label=$2 backend=$3 run=$4 file=$5
	awk '{ print $1 + $2, $1, $3, $4 }' "$file" | sort -n |
		awk '{ own[NR] = $1; if ($2 > ma) ma = $2; if ($3 > ms) ms = $3; if ($4 > mh) mh = $4 }
			 END { if (NR) { i = int(NR * 0.99); if (i < NR * 0.99) i++
				printf "%.1f %.1f %.1f %.1f %.1f %.1f\n", own[NR] / 1024, ma / 1024, ms / 1024, mh / 1024,
					own[int((NR + 1) / 2)] / 1024, own[i] / 1024 } }' | {
		read -r private anon shmem hwm p50 p99 || true
		record "$section" "$label" "$backend" "$run" peak_private_mb "${private:-}"
		record "$section" "$label" "$backend" "$run" peak_anon_mb "${anon:-}"
		record "$section" "$label" "$backend" "$run" peak_shmem_mb "${shmem:-}"
		record "$section" "$label" "$backend" "$run" peak_total_mb "${hwm:-}"
		record "$section" "$label" "$backend" "$run" own_p50_mb "${p50:-}"
		record "$section" "$label" "$backend" "$run" own_p99_mb "${p99:-}"
	}
}

section_state()
{
	say "== state: keyed running totals over ${BENCH_STATE_KEYS// /, } keys"
	test/services/kafka.sh create-topic bench_poke 1 >>"$LOG" 2>&1
	local keys topic sampler memory_sampler
	for keys in $BENCH_STATE_KEYS; do
		topic=$(state_topic "$keys")
		ensure_topic "$topic" "$BENCH_EVENTS" "$keys" $([ "$topic" = "$MAIN_TOPIC" ] || echo cycle)
	done
	for run in $(seq 1 "$BENCH_RUNS"); do
		for keys in $BENCH_STATE_KEYS; do
			topic=$(state_topic "$keys")
			for backend in $BENCH_STATE_BACKENDS; do
				local name=bench_keys_${keys}
				sample_last_checkpoint "$name" "$BENCH_OUT/last_ckpt.txt" &
				sampler=$!
				sample_memory "$name" "$BENCH_OUT/memory.txt" &
				memory_sampler=$!
				run_job state "keys_$keys" totals "$backend" "$run" "[\"$topic\", \"bench_poke\"]" "$BENCH_EVENTS"
				kill "$sampler" "$memory_sampler"; wait "$sampler" "$memory_sampler" 2>/dev/null || true
				record_memory_peaks state "keys_$keys" "$backend" "$run" "$BENCH_OUT/memory.txt"
				for col in 2:last_ckpt_ms 3:state_ckpt_ms; do
					awk -F'|' -v c="${col%%:*}" 'NF == 3 && $c != "" && !seen[$1]++ { print $c }' "$BENCH_OUT/last_ckpt.txt" | sort -n |
						awk '{ v[NR] = $1 } END { if (NR) printf "%s %s\n", v[int((NR + 1) / 2)], v[NR] }' | {
						read -r med max || true
						record state "keys_$keys" "$backend" "$run" "${col#*:}_median" "${med:-}"
						record state "keys_$keys" "$backend" "$run" "${col#*:}_max" "${max:-}"
					}
				done
				record state "keys_$keys" "$backend" "$run" distinct_keys "$(q -c 'SELECT count(*) FROM bench.totals')"
				if [ "$backend" = rocksdb ]; then
					record state "keys_$keys" "$backend" "$run" disk_mb \
						"$(du -sm "$PGDATA_OWNER_DIR/job_$JOB_ID" | cut -f1)"
				else
					record state "keys_$keys" "$backend" "$run" disk_mb \
						"$(q -c "SELECT round(coalesce(sum(pg_column_size(m.*)), 0) / 1048576.0, 1) FROM mailer.memory_state m WHERE job_id = $JOB_ID")"
				fi
				measure_restore "$keys" "$backend" "$run"
				record state "keys_$keys" "$backend" "$run" restored_rss_mb "$(proc_mb "$JOB_PID" VmRSS)"
				finish_job
				q -c "VACUUM bench.totals"
			done
		done
	done
}

section_latency()
{
	local max rate name=bench_latency ids=2000000000
	max=$(awk -F'\t' '$1 == "throughput" && $2 == "append" && $5 == "records_per_s" { print $6 }' "$RESULTS" |
		sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
	if [ -z "$max" ]; then
		say "latency: measuring the maximum rate of the append job first"
		run_job latency append append - 0 "[\"$MAIN_TOPIC\"]" "$BENCH_EVENTS"
		finish_job
		max=$JOB_RATE
	fi
	say "== latency: append job (every order a row), 1 s checkpoints, max sustainable rate $max records/s"
	test/services/kafka.sh create-topic bench_latency 8 >>"$LOG" 2>&1
	for run in $(seq 1 "$BENCH_RUNS"); do
		for pct in 50 80; do
			local events stats sent
			rate=$(calc "int($max * $pct / 100)")
			events=$(calc "int($rate * $BENCH_LATENCY_SECONDS)")
			drop_job "$name"
			q -c "TRUNCATE bench.latency"
			q -v spec="$(job_spec latency - '["bench_latency"]' latest)" <<<"SELECT mailer.create_job('$name', :'spec')" >/dev/null
			JOB_PID=$(wait_job_pid "$name")
			# Running and assigned: a first wait returns once it has polled.
			q -c "SELECT mailer.wait_job('$name', '1 minute')" >/dev/null
			sleep 2
			# produced N seconds S rate R errors E: R is the rate the producer kept.
			sent=$("$BENCH_DIR/produce" "$KAFKA_BROKERS" bench_latency "$events" "$BENCH_KEYS" --rate "$rate" --first "$ids")
			echo "$sent" >>"$LOG"
			ids=$((ids + events))
			q -c "SELECT mailer.wait_job('$name', '30 minutes')" >/dev/null
			stats=$(q -F ' ' -c "
				SELECT count(*),
				       percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),
				       percentile_cont(0.99) WITHIN GROUP (ORDER BY ms),
				       max(ms)
				  FROM (SELECT extract(epoch FROM seen) * 1000 - sent / 1000.0 AS ms
				          FROM bench.latency) l")
			read -r n p50 p99 pmax <<<"$stats"
			[ "$n" = "$events" ] || die "latency job wrote $n rows, expected $events"
			record latency "rate_${pct}pct" - "$run" target_records_per_s "$rate"
			record latency "rate_${pct}pct" - "$run" produced_records_per_s "$(awk '{ print $6 }' <<<"$sent")"
			record latency "rate_${pct}pct" - "$run" p50_ms "$p50"
			record latency "rate_${pct}pct" - "$run" p99_ms "$p99"
			record latency "rate_${pct}pct" - "$run" max_ms "$pmax"
			say "  latency ${pct}% ($rate/s) run $run: p50 $(printf '%.0f' "$p50") ms, p99 $(printf '%.0f' "$p99") ms, max $(printf '%.0f' "$pmax") ms"
			JOB_NAME=$name
			finish_job
		done
	done
}

# perf of one job for BENCH_PROFILE_SECONDS: the report's top, by shared
# object, by symbol (self) and by symbol with its callees.  Above
# parallelism 1, of subtask 1 (a subtask, not the coordinator).
profile_job()
{
	local kind=$1 backend=$2 par=${3:-1} base=$BENCH_OUT/perf-$1-$2 label=$1 subtask=0 who=worker
	if [ "$par" != 1 ]; then
		base=$base-p$par label=${kind}_p$par subtask=1 who="subtask 1 of $par"
	fi
	say "== profile: $kind on $backend, $who (perf record -e cpu-clock -g, ${BENCH_PROFILE_SECONDS} s at most)"
	JOB_PARALLELISM=$par JOB_PERF_SUBTASK=$subtask \
		run_job profile "$label" "$kind" "$backend" 1 "[\"$MAIN_TOPIC\"]" "$BENCH_EVENTS" none "$base.data" "$BENCH_PROFILE_SECONDS"
	finish_job
	# Whole reports into files first: head on a live pipe would SIGPIPE perf.
	perf report -i "$base.data" --stdio --no-children -g none --sort dso >"$base.dso.txt" 2>/dev/null
	perf report -i "$base.data" --stdio --no-children -g none --sort dso,symbol >"$base.self.txt" 2>/dev/null
	perf report -i "$base.data" --stdio --children -g none --sort symbol >"$base.children.txt" 2>/dev/null
	perf report -i "$base.data" --stdio --no-children --percent-limit 2 -g caller,0.5,callee,function,percent \
		--sort symbol >"$base.callgraph.txt" 2>/dev/null
	top() { grep -v -e '^#' -e '^$' "$1" | sed -E 's/[[:space:]]+-[[:space:]]+-[[:space:]]*$//; s/[[:space:]]+$//' | head -"$2" || true; }
	{
		echo "# perf record -e cpu-clock -g -p <$who>: job $kind, backend $backend, parallelism $par, $(printf '%.0f' "$JOB_RATE") records/s, $(printf '%.2f' "$JOB_CPU_PER_M") CPU-s/M (all subtasks)"
		echo "# by shared object"
		top "$base.dso.txt" 12
		echo
		echo "# by symbol, self time"
		top "$base.self.txt" 40
		echo
		echo "# by symbol, callees included"
		top "$base.children.txt" 50
		echo
	} >>"$BENCH_OUT/profile.txt"
}

section_profile()
{
	local jb kind backend par done_profiles=""
	: >"$BENCH_OUT/profile.txt"
	for jb in $BENCH_PROFILE_JOBS; do
		if [ "$jb" = hottest ]; then
			# The job with the most CPU per record in the throughput section.
			jb=$(awk -F'\t' '$1 == "throughput" && $5 == "cpu_s_per_m" && $2 != "raw" { s[$2 ":" $3] += $6; n[$2 ":" $3]++ }
				END { for (k in s) print s[k] / n[k], k }' "$RESULTS" | sort -gr | head -1 | cut -d' ' -f2 || true)
			[ -n "$jb" ] || jb=sliding:rocksdb
		fi
		IFS=: read -r kind backend par _ <<<"$jb"
		backend=${backend:-rocksdb} par=${par:-1}
		[[ " $done_profiles " == *" $kind:$backend:$par "* ]] && continue
		done_profiles="$done_profiles $kind:$backend:$par"
		profile_job "$kind" "$backend" "$par"
	done
	say "profile: $BENCH_OUT/profile.txt"
}

# ---------------------------------------------------------------- scrape

# The pid of the server's "mailer http" worker (empty when there is none),
# by its process title: a child of the postmaster.
http_pid()
{
	ps -o pid=,args= --ppid "$PM_PID" | awk '$2 == "postgres:" && / mailer http/ { print $1; exit }'
}

# Send the requests of one phase once a second for BENCH_SCRAPE_SECONDS:
# each argument is a path, fetched in turn by one curl (keep-alive, as a
# scraper does).  Prints the CPU the HTTP worker used as a share of one
# core over the phase, then the mean bytes and seconds of one round.
scrape_phase()
{
	local pid=$1; shift
	local port token urls=() cpu0 cpu1 t0 t1 next bytes=0 secs=0 rounds=0 out
	port=$(q -c "SHOW mailer.http_port")
	token=$(q -c "SHOW mailer.http_token")
	for path in "$@"; do urls+=(-o /dev/null "http://127.0.0.1:$port$path"); done
	cpu0=$(proc_cpu "$pid") t0=$(now)
	next=$t0
	while [ "$(calc "($(now) < $t0 + $BENCH_SCRAPE_SECONDS)")" = 1 ]; do
		if [ ${#urls[@]} -gt 0 ]; then
			out=$(curl -s ${token:+-H "Authorization: Bearer $token"} \
				-w '%{http_code} %{size_download} %{time_total}\n' "${urls[@]}") || die "curl of the HTTP endpoint failed"
			awk '$1 != 200 { bad = 1 } END { exit bad }' <<<"$out" || die "the HTTP endpoint answered: $out"
			bytes=$(awk -v b="$bytes" '{ b += $2 } END { print b }' <<<"$out")
			secs=$(awk -v s="$secs" '{ s += $3 } END { print s }' <<<"$out")
			rounds=$((rounds + 1))
		fi
		next=$(awk -v a="$next" 'BEGIN { printf "%.3f", a + 1 }')
		sleep "$(awk -v a="$next" -v b="$(now)" 'BEGIN { printf "%.3f", (a > b ? a - b : 0) }')"
	done
	cpu1=$(proc_cpu "$pid") t1=$(now)
	echo "$(calc "($cpu1 - $cpu0) / ($t1 - $t0)") $(calc "$bytes / ($rounds > 0 ? $rounds : 1)") $(calc "$secs / ($rounds > 0 ? $rounds : 1)")"
}

section_scrape()
{
	local run pid port i n c b s restore=0 idle scrape dash details=()
	say "scrape: $BENCH_SCRAPE_JOBS jobs, the HTTP worker's CPU idle, scraped and polled by a dashboard, ${BENCH_SCRAPE_SECONDS}s each"
	# Room for the jobs, and the endpoint on if the cluster has none.
	port=$(q -c "SHOW mailer.http_port")
	if [ "$(q -c "SHOW mailer.max_jobs")" -lt "$BENCH_SCRAPE_JOBS" ] || [ "$port" = 0 ]; then
		restore=1
		q -c "ALTER SYSTEM SET mailer.max_jobs = $((BENCH_SCRAPE_JOBS + 8))" \
			-c "ALTER SYSTEM SET max_worker_processes = $((BENCH_SCRAPE_JOBS + 16))" >/dev/null
		[ "$port" != 0 ] || q -c "ALTER SYSTEM SET mailer.http_port = $((PGPORT + 1000))" >/dev/null
		test/services/pg.sh restart >>"$LOG" 2>&1 || die "restart failed; see $LOG"
		PM_PID=$(head -1 "$PGDATA/postmaster.pid")
	fi
	pid=$(http_pid)
	[ -n "$pid" ] || die "no \"mailer http\" process (is mailer.http_port set?)"
	# Jobs left by an interrupted run go first.
	q -c "SELECT mailer.drop_job(name) FROM mailer.job WHERE name LIKE 'bench_scrape_%'" >/dev/null
	q -c "SET client_min_messages = warning" -c "DROP TABLE IF EXISTS bench_scrape" -c "CREATE TABLE bench_scrape (order_id bigint, amount numeric)" >/dev/null
	for i in $(seq 1 "$BENCH_SCRAPE_JOBS"); do
		q -c "SELECT mailer.create_job('bench_scrape_$i', \$\$
			{\"source\": {\"type\": \"generator\", \"rate\": 10},
			 \"steps\": [{\"map\": {\"order_id\": \"(value->>'order_id')::bigint\", \"amount\": \"(value->>'amount')::numeric\"}}],
			 \"sink\": {\"type\": \"table\", \"table\": \"bench_scrape\"}}\$\$)" >/dev/null
	done
	for _ in $(seq 1 600); do
		n=$(q -c "SELECT count(*) FROM mailer.jobs j JOIN mailer.metrics m USING (name)
			WHERE j.name LIKE 'bench_scrape_%' AND j.state = 'running' AND m.last_checkpoint_at IS NOT NULL" 2>>"$LOG" || echo 0)
		[ "$n" = "$BENCH_SCRAPE_JOBS" ] && break
		sleep 0.5
	done
	[ "$n" = "$BENCH_SCRAPE_JOBS" ] || die "only $n of $BENCH_SCRAPE_JOBS scrape jobs are running"
	for i in $(seq 1 20); do details+=("/api/jobs/bench_scrape_$i"); done
	for run in $(seq 1 "$BENCH_RUNS"); do
		idle=$(scrape_phase "$pid")
		scrape=$(scrape_phase "$pid" /metrics /api/jobs)
		dash=$(scrape_phase "$pid" /api/jobs "${details[@]}")
		read -r c _ _ <<<"$idle"; record scrape idle - "$run" cpu_share "$c"
		read -r c b s <<<"$scrape"
		record scrape metrics_and_jobs - "$run" cpu_share "$c"
		record scrape metrics_and_jobs - "$run" bytes_per_round "$b"
		record scrape metrics_and_jobs - "$run" seconds_per_round "$s"
		say "scrape round $run: idle $(calc "${idle%% *} * 100")% of a core; /metrics + /api/jobs each second $(calc "$c * 100")% ($b bytes, ${s}s a round); dashboard polling $(calc "${dash%% *} * 100")%"
		read -r c b s <<<"$dash"
		record scrape dashboard - "$run" cpu_share "$c"
		record scrape dashboard - "$run" bytes_per_round "$b"
		record scrape dashboard - "$run" seconds_per_round "$s"
	done
	q -c "SELECT mailer.drop_job(name) FROM mailer.job WHERE name LIKE 'bench_scrape_%'" -c "DROP TABLE bench_scrape" >/dev/null
	if [ "$restore" = 1 ]; then
		q -c "ALTER SYSTEM RESET mailer.max_jobs" -c "ALTER SYSTEM RESET max_worker_processes" -c "ALTER SYSTEM RESET mailer.http_port" >/dev/null
		test/services/pg.sh restart >>"$LOG" 2>&1 || die "restart failed; see $LOG"
		PM_PID=$(head -1 "$PGDATA/postmaster.pid")
	fi
}

# ---------------------------------------------------------------- pulsar

PULSAR_TOPIC=public/default/bench_orders_${BENCH_PULSAR_EVENTS}_${BENCH_KEYS}
PULSAR_CHUNK=100000

# Orders FROM to TO as lines, the Kafka topics' values without a timestamp
# of their own (the passthrough job reads only the amount).
pulsar_orders()
{
	awk -v from="$1" -v to="$2" -v keys="$BENCH_KEYS" 'BEGIN {
		for (i = from; i <= to; i++)
			printf "{\"order_id\": %d, \"customer_id\": \"c%d\", \"amount\": %d.%02d, \"ts\": \"2024-01-01T00:00:00.000000Z\"}\n",
				i, i % keys, i % 500, i % 100
	}'
}

# Messages in a Pulsar topic (one per entry: pulsar_tool's producer does
# not batch), 0 when it has none or does not exist.
pulsar_count()
{
	test/services/pulsar.sh stats "$1" 2>/dev/null | sed -n 's/.*"numberOfEntries":\([0-9]*\).*/\1/p' | grep . || echo 0
}

# EVENTS orders into a Pulsar topic, in chunks, each from the same producer
# with the sequence ids going on, so memory stays small.
pulsar_orders_produce()
{
	local topic=$1 events=$2 from
	for ((from = 1; from <= events; from += PULSAR_CHUNK)); do
		pulsar_orders "$from" "$((from + PULSAR_CHUNK - 1 < events ? from + PULSAR_CHUNK - 1 : events))" |
			test/services/pulsar.sh produce "$topic" bench "$((from - 1))" >/dev/null 2>>"$LOG" ||
			die "producing to Pulsar topic $topic failed; see $LOG"
	done
}

# The raw WebSocket reader: every message parsed and acknowledged, with the
# source's receive queue (RECEIVER_QUEUE of source_pulsar.c), nothing printed.
pulsar_raw_read()
{
	local run=$1 t0 t1 cpu broker TIMEFORMAT='%U %S'
	broker=$(proc_cpu "$BROKER_PID")
	t0=$(now)
	cpu=$( { time PULSAR_TOOL_QUIET=1 PULSAR_TOOL_QUEUE=1000 PULSAR_TOOL_LINGER_MS=0 PULSAR_TOOL_TIMEOUT=$BENCH_JOB_TIMEOUT \
		test/pulsar_tool/pulsar_tool "$PULSAR_URL" read "$PULSAR_TOPIC" earliest "$BENCH_PULSAR_EVENTS" >/dev/null 2>>"$LOG"; } 2>&1 ) ||
		die "the raw Pulsar reader failed; see $LOG"
	t1=$(now)
	broker=$(calc "$(proc_cpu "$BROKER_PID") - $broker")
	RAW_RATE=$(calc "$BENCH_PULSAR_EVENTS / ($t1 - $t0)")
	record pulsar raw - "$run" broker_cpu_s_per_m "$(calc "$broker * 1000000 / $BENCH_PULSAR_EVENTS")"
	record pulsar raw - "$run" records_per_s "$RAW_RATE"
	record pulsar raw - "$run" seconds "$(calc "$t1 - $t0")"
	record pulsar raw - "$run" cpu_s_per_m "$(calc "(${cpu% *} + ${cpu#* }) * 1000000 / $BENCH_PULSAR_EVENTS")"
	say "  raw Pulsar reader run $run: $(printf '%.0f' "$RAW_RATE") records/s, cpu ${cpu% *} + ${cpu#* } s"
}

section_pulsar()
{
	local broker_pid=$BROKER_PID out
	if ! out=$(test/services/pulsar.sh start 2>&1); then
		echo "$out" >>"$LOG"
		say "== pulsar: skipped: Pulsar could not start: $(sed -n 's/.*ERROR: //p' <<<"$out" | tail -1)"
		return 0
	fi
	echo "$out" >>"$LOG"
	say "== pulsar: $PULSAR_TOPIC, $BENCH_RUNS rounds"
	make -s -C test/pulsar_tool PG_CONFIG="$PG_CONFIG" >>"$LOG" 2>&1 || die "could not build test/pulsar_tool; see $LOG"
	# Not partitioned: one reader on both sides.
	topic_once pulsar "$PULSAR_TOPIC" "$BENCH_PULSAR_EVENTS" 0 pulsar_count "" \
		pulsar_orders_produce "$PULSAR_TOPIC" "$BENCH_PULSAR_EVENTS"
	# run_job's broker CPU is Pulsar's here.
	BROKER_PID=$(cat "$PULSAR_DIR/pulsar.pid" 2>/dev/null || echo 0)
	for run in $(seq 1 "$BENCH_RUNS"); do
		pulsar_raw_read "$run"
		JOB_SOURCE='{"type": "pulsar", "service_url": "'$PULSAR_URL'", "topic": "persistent://'$PULSAR_TOPIC'", "format": "json"}' \
			run_job pulsar passthrough passthrough - "$run" '[]' "$BENCH_PULSAR_EVENTS"
		record pulsar passthrough - "$run" ratio_to_raw "$(calc "$JOB_RATE / $RAW_RATE")"
		finish_job
	done
	BROKER_PID=$broker_pid
}

# ---------------------------------------------------------------- report

report()
{
	q -P footer=off \
		-c "CREATE TEMP TABLE r (section text, job text, backend text, run int, metric text, value double precision)" \
		-c "\\copy r FROM '$RESULTS' WITH (NULL '')" \
		-f test/bench/report.sql >"$BENCH_OUT/tables.txt" 2>>"$LOG" || say "report failed; see $LOG"
	cat "$BENCH_OUT/tables.txt"
}

machine()
{
	echo "machine: $(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), $(free -g | awk '/^Mem:/ { print $2 }') GiB, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "software: $("$PG_BINDIR/postgres" --version), librdkafka $(if [ -n "${RDKAFKA_PREFIX:-}" ]; then sed -n 's/^Version: //p' "$RDKAFKA_PREFIX/lib/pkgconfig/rdkafka.pc"; else dpkg-query -W -f='${Version}' librdkafka1 2>/dev/null; fi), RocksDB $(dpkg-query -W -f='${Version}' 'librocksdb[0-9]*' 2>/dev/null | head -c 20), Kafka $KAFKA_VERSION, $(java -version 2>&1 | head -1), Flink $(sed -n 's:.*<flink.version>\(.*\)</flink.version>.*:\1:p' test/bench/flink/pom.xml)"
	echo "settings: BENCH_EVENTS=$BENCH_EVENTS BENCH_SINK_ROWS=$BENCH_SINK_ROWS BENCH_RUNS=$BENCH_RUNS BENCH_KEYS=$BENCH_KEYS BENCH_STATE_KEYS='$BENCH_STATE_KEYS' BENCH_SECTIONS='$BENCH_SECTIONS' BENCH_PARALLELISM='$BENCH_PARALLELISM' BENCH_PARALLELISM_JOBS='$BENCH_PARALLELISM_JOBS' BENCH_PIN_CPU=$BENCH_PIN_CPU BENCH_JOB_TIMEOUT=$BENCH_JOB_TIMEOUT BENCH_LATENCY_SECONDS=$BENCH_LATENCY_SECONDS BENCH_KAFKA_SINK_JOBS='$BENCH_KAFKA_SINK_JOBS' BENCH_PULSAR_EVENTS=$BENCH_PULSAR_EVENTS BENCH_SCRAPE_JOBS=$BENCH_SCRAPE_JOBS BENCH_SCRAPE_SECONDS=$BENCH_SCRAPE_SECONDS"
}

# ---------------------------------------------------------------- main

# Minutes and seconds.
mmss() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# Run step NAME: a banner with its number before, its time after, so that
# a person watching a run of hours sees where it is.
step()
{
	local name=$1 t0=$SECONDS
	STEP_NO=$((STEP_NO + 1))
	say "==== step $STEP_NO/${#STEPS[@]}: $name (at $(mmss $((SECONDS - start)))) ===="
	case $name in
	setup) setup ;;
	topic) ensure_topic "$MAIN_TOPIC" "$BENCH_EVENTS" "$BENCH_KEYS" ;;
	report) report ;;
	*) "section_$name" ;;
	esac
	say "==== step $STEP_NO/${#STEPS[@]}: $name done in $(mmss $((SECONDS - t0))) ===="
}

start=$SECONDS
STEP_NO=0
STEPS=(setup)
# Only the scrape and pulsar sections do without the Kafka orders.
[ -z "$(tr ' ' '\n' <<<"$BENCH_SECTIONS" | grep -vx -e scrape -e pulsar -e '')" ] || STEPS+=(topic)
for s in throughput parallelism flink kafka_sink sink state latency profile pulsar scrape; do
	if section_on "$s"; then STEPS+=("$s"); fi
done
STEPS+=(report)
machine | tee -a "$LOG"
say "steps: ${STEPS[*]}"
for s in "${STEPS[@]}"; do
	step "$s"
done
say "done in $(( (SECONDS - start) / 60 )) min; results in $BENCH_OUT"
