#!/usr/bin/env bash
# `make demo`: the order-totals job of the README's tour, end to end, on a
# local PostgreSQL and a local Kafka broker.  Installs what is missing,
# builds, starts the services (leaving them running for you to explore),
# produces sample orders to the topic "orders" (keeping them in the table
# demo_orders too), runs the job (at parallelism 2, to show its subtasks: the
# results are those of one worker) and prints the result table,
# mailer.subtasks and mailer.metrics.  Then test/demo_kafka.sh runs the
# README's "Kafka to Kafka" pipeline on the same orders.
#
# `make demo-kafka` (test/demo.sh kafka) does the same setup and orders, then
# only the Kafka to Kafka part.
set -euo pipefail
. "$(dirname "$0")/services/env.sh"
cd "$MAILER_ROOT"

part=${1:-all}
case $part in
all | kafka) ;;
*) echo "usage: $0 [kafka]" >&2; exit 2 ;;
esac

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)

psql_demo() { "$PG_BINDIR/psql" -X -v ON_ERROR_STOP=1 -q "$@"; }

test/services/deps.sh
test/services/kafka.sh fetch
make -s PG_CONFIG="$PG_CONFIG"
"${sudo[@]}" make -s PG_CONFIG="$PG_CONFIG" install
# An earlier run's jobs would start again with the server and read the
# topics deleted below: drop them first (a worker reading a deleted and
# recreated topic can hang at its exit in librdkafka, holding up the
# server's shutdown).
if test/services/pg.sh status >/dev/null; then
	psql_demo -c "SET client_min_messages = warning; DROP EXTENSION IF EXISTS mailer CASCADE" || true
fi
test/services/pg.sh restart
test/services/kafka.sh start

echo
echo "== a fresh topic 'orders' (8 partitions) and a fresh extension"
test/services/kafka.sh delete-topic orders >/dev/null
test/services/kafka.sh create-topic orders 8
psql_demo <<'SQL'
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS mailer CASCADE;
CREATE EXTENSION mailer;
SQL

echo "== 20,000 sample orders over 10 minutes of event time, a few of them bad"
# Event times advance 30 ms per order with up to 3 s of disorder; every 2,500th
# order has a negative amount (filtered out) and two messages are not JSON
# (dead letters): the jobs keep going.  The table demo_orders keeps the
# orders (all but the two bad messages) for test/demo_kafka.sh to check its
# results against.
psql_demo <<'SQL'
DROP TABLE IF EXISTS demo_orders;
CREATE TABLE demo_orders AS
  SELECT i AS order_id, 'c' || (i % 20) AS customer_id,
         CASE WHEN i % 2500 = 0 THEN -1 ELSE round((1 + (i * 7919 % 9900) / 100.0)::numeric, 2) END AS amount,
         timestamptz '2025-06-01 12:00:00+00' + (i * 30 - (i * 37 % 3000)) * interval '1 millisecond' AS ts
    FROM generate_series(0, 19999) AS i;
SQL
psql_demo -Atc "
  (SELECT customer_id || E'\t' ||
          json_build_object('order_id', order_id, 'customer_id', customer_id, 'amount', amount, 'ts', ts)::text
     FROM demo_orders ORDER BY order_id)
  UNION ALL SELECT E'c1\tnot json at all'
  UNION ALL SELECT E'c2\t{\"order_id\": \"broken\"'" |
	kcat -b "$KAFKA_BROKERS" -P -t orders -K $'\t' -z lz4

if [ "$part" = kafka ]; then
	test/demo_kafka.sh
	exit
fi

echo "== the sink table customer_totals"
psql_demo <<'SQL'
DROP TABLE IF EXISTS customer_totals;
CREATE TABLE customer_totals (
    customer_id  text,
    window_start timestamptz,
    window_end   timestamptz,
    orders       bigint,
    total        numeric,
    PRIMARY KEY (customer_id, window_start));
SQL

echo "== the job"
psql_demo <<SQL
SELECT mailer.create_job('order_totals', \$\${
  "source":     {"type": "kafka", "brokers": "$KAFKA_BROKERS", "topic": "orders",
                 "start": "earliest", "format": "json"},
  "event_time": "(value->>'ts')::timestamptz",
  "watermark":  {"max_out_of_orderness": "5 seconds", "idle_timeout": "30 seconds"},
  "steps": [
    {"filter":    "(value->>'amount')::numeric > 0"},
    {"key_by":    {"customer_id": "value->>'customer_id'"}},
    {"window":    {"type": "tumbling", "size": "1 minute"}},
    {"aggregate": {"orders": "count(*)", "total": "sum((value->>'amount')::numeric)"}}
  ],
  "sink":       {"type": "table", "table": "customer_totals", "mode": "upsert"},
  "checkpoint": {"interval": "1 second"},
  "parallelism": 2
}\$\$) AS job_id;
SELECT mailer.wait_job('order_totals', '2 minutes') AS state;
SQL

echo "== customer_totals: one row per customer and minute whose window the watermark has passed"
psql_demo -c "SELECT window_start, count(*) AS customers, sum(orders) AS orders, sum(total) AS total
                FROM customer_totals GROUP BY 1 ORDER BY 1"
psql_demo -c "SELECT * FROM customer_totals ORDER BY window_start, customer_id LIMIT 5"
echo "== mailer.subtasks: the job runs as two workers, each reading 4 partitions and owning half the customers"
psql_demo -c "SELECT name, subtask, pid, state, records_in, records_accepted, records_out FROM mailer.subtasks"
echo "== mailer.metrics"
psql_demo -x -c "SELECT * FROM mailer.metrics"
echo "== mailer.dead_letters"
psql_demo -c "SELECT topic, partition, \"offset\", stage, error, convert_from(value, 'UTF8') AS value FROM mailer.dead_letters"
echo "The last minute stays open until later events move the watermark past it."
echo

test/demo_kafka.sh
