#!/usr/bin/env bash
# Throughput of the keyed totals job (per customer: count(*) and
# sum(amount), upserted into a table) over order events on Kafka, with
# each state backend.  Not run by the tests.
#
#   test/bench/kafka_throughput.sh [EVENTS [PARTITIONS [CUSTOMERS]]]
#
# Uses the running services (test/services/pg.sh start, kafka.sh start;
# settings from test/services/env.sh and the environment).  It produces
# EVENTS (default 1,000,000) events to a new topic, then for each backend
# creates a job reading the topic from the beginning and times it from
# create_job until wait_job returns (all events read, the last checkpoint
# committed): records per second = records_in / seconds.  For scale, it
# also times a plain kcat consume of the topic (librdkafka, no processing).
# The result table is checked against the expected totals.  Set KEEP=1 to
# keep the topic, jobs and tables.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/../services/env.sh"

EVENTS=${1:-1000000}
PARTITIONS=${2:-8}
CUSTOMERS=${3:-5000}
topic=bench_orders_$$_$(date +%s)

psql() { "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", n / s }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

psql -c "SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS mailer"
"$HERE/../services/kafka.sh" create-topic "$topic" "$PARTITIONS" >/dev/null

echo "producing $EVENTS order events ($CUSTOMERS customers) to $topic ($PARTITIONS partitions) ..."
t0=$(now)
psql -c "SELECT 'c' || ((i * 7919) % $CUSTOMERS) || E'\t' || json_build_object('order_id', i,
		'customer_id', 'c' || ((i * 7919) % $CUSTOMERS), 'amount', ((i * 104729) % 100000) / 100.0,
		'ts', timestamptz '2024-01-01 00:00:00+00' + i * interval '1 second')::text
	FROM generate_series(1, $EVENTS::bigint) i" |
	kcat -b "$KAFKA_BROKERS" -P -t "$topic" -z lz4 -K $'\t'
t1=$(now)
echo "  produced in $(secs "$t0" "$t1") s"

t0=$(now)
consumed=$(kcat -b "$KAFKA_BROKERS" -C -t "$topic" -o beginning -e -q -f '\n' | wc -l)
t1=$(now)
raw=$(rate "$consumed" "$(secs "$t0" "$t1")")
echo "  kcat consume (no processing): $consumed records in $(secs "$t0" "$t1") s = $raw records/s"

printf '\n%-8s %10s %9s %12s %8s\n' backend records seconds records/s vs_kcat
for backend in rocksdb memory; do
	job=bench_totals_$backend
	psql -c "SET client_min_messages = warning;
		SELECT mailer.drop_job(name) FROM mailer.jobs WHERE name = '$job';
		DROP TABLE IF EXISTS $job;
		CREATE TABLE $job (customer_id text PRIMARY KEY, orders bigint NOT NULL, total numeric NOT NULL)" >/dev/null
	spec="{\"source\": {\"type\": \"kafka\", \"brokers\": \"$KAFKA_BROKERS\", \"topic\": \"$topic\"},
		\"steps\": [{\"key_by\": {\"customer_id\": \"value->>'customer_id'\"}},
		            {\"aggregate\": {\"orders\": \"count(*)\", \"total\": \"sum((value->>'amount')::numeric)\"}}],
		\"sink\": {\"type\": \"table\", \"table\": \"$job\"},
		\"state\": {\"backend\": \"$backend\"}}"
	t0=$(now)
	psql -c "SELECT mailer.create_job('$job', \$\$$spec\$\$)" >/dev/null
	psql -c "SELECT mailer.wait_job('$job', '30 minutes')" >/dev/null
	t1=$(now)
	s=$(secs "$t0" "$t1")
	n=$(psql -c "SELECT records_in FROM mailer.metrics WHERE name = '$job'")
	check=$(psql -c "SELECT count(*) = $CUSTOMERS AND sum(orders) = $EVENTS FROM $job")
	[ "$check" = t ] || { echo "ERROR: $job does not hold $EVENTS orders of $CUSTOMERS customers" >&2; exit 1; }
	r=$(rate "$n" "$s")
	printf '%-8s %10s %9s %12s %8s\n' "$backend" "$n" "$s" "$r" "$(ratio "$r" "$raw")"
	[ -n "${KEEP:-}" ] || psql -c "SELECT mailer.drop_job('$job'); DROP TABLE $job" >/dev/null
done

[ -n "${KEEP:-}" ] || "$HERE/../services/kafka.sh" delete-topic "$topic" >/dev/null
