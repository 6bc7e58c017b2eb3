#!/usr/bin/env bash
# The Kafka to Kafka part of `make demo` (README, "Kafka to Kafka"), run by
# test/demo.sh once the services run, the extension is fresh and the topic
# "orders" holds the orders of the table demo_orders.
#
# Two jobs chain topic to topic through Kafka sinks:
#   orders --enrich_orders--> enriched_orders --running_totals--> customer_totals
# enrich_orders is stateless: it drops the orders without a positive amount
# and adds an amount band and the net amount (before a 20% VAT) to each;
# running_totals keeps running totals per customer and writes the customers
# that changed at each checkpoint.  The script waits until both sinks have
# published their last checkpoint, shows the output topic as a read_committed
# consumer sees it, and fails unless every order was published exactly once
# and the totals equal the same sums computed in SQL over demo_orders.
set -euo pipefail
. "$(dirname "$0")/services/env.sh"
cd "$MAILER_ROOT"

psql_demo() { "$PG_BINDIR/psql" -X -v ON_ERROR_STOP=1 -q "$@"; }
# Everything committed to a topic now, as a read_committed consumer sees it.
consume() { kcat -C -b "$KAFKA_BROKERS" -t "$1" -X isolation.level=read_committed -e -q "${@:2}"; }

fail()
{
	echo "ERROR: $*" >&2
	psql_demo -c "SELECT name, state, waiting_for, last_error FROM mailer.jobs" >&2 || true
	psql_demo -c "SELECT * FROM mailer.kafka_sinks" >&2 || true
	exit 1
}

# Wait until JOB has checkpointed all its input available now and its Kafka
# sink has published every record of its checkpoints: a checkpoint writes
# its records to the outbox, and they reach the topic only after it has
# committed.  wait_job waits for that publish too; the view shows it as an
# empty outbox.  (published_epoch moves only with epochs that had records.)
wait_published()
{
	local job=$1 epoch deadline=$((SECONDS + 60))
	psql_demo -Atc "SELECT mailer.wait_job('$job', '2 minutes')" >/dev/null
	until epoch=$(psql_demo -Atc "SELECT max(published_epoch) FROM mailer.kafka_sinks WHERE job = '$job'
	                               HAVING bool_and(pending_records = 0 AND published_epoch IS NOT NULL)") &&
		[ -n "$epoch" ]; do
		[ $SECONDS -lt $deadline ] || fail "job $job's Kafka sink has records left to publish after 60 s"
		sleep 0.2
	done
	echo "$job: published through checkpoint $epoch, none pending"
}

echo
echo "==== Kafka to Kafka: orders -> enriched_orders -> customer_totals"
echo "== fresh topics 'enriched_orders' (4 partitions) and 'customer_totals' (1, compacted)"
for topic in enriched_orders customer_totals; do
	test/services/kafka.sh delete-topic "$topic" >/dev/null
done
test/services/kafka.sh create-topic enriched_orders 4
# Only a customer's latest totals matter, so compaction may drop older ones.
test/services/kafka.sh create-topic customer_totals 1 --config cleanup.policy=compact

echo "== job 1, enrich_orders: a stateless map; the value is a JSON object, the key the customer"
psql_demo <<SQL
SELECT mailer.create_job('enrich_orders', \$\${
  "source": {"type": "kafka", "brokers": "$KAFKA_BROKERS", "topic": "orders",
             "start": "earliest", "format": "json"},
  "steps": [
    {"filter": "(value->>'amount')::numeric > 0"},
    {"map":    {"amount": "(value->>'amount')::numeric"}},
    {"map":    {"band": "CASE WHEN amount < 25 THEN 'small' WHEN amount < 75 THEN 'medium' ELSE 'large' END",
                "net_amount": "round(amount / 1.2, 2)"}}
  ],
  "sink":   {"type": "kafka", "brokers": "$KAFKA_BROKERS", "topic": "enriched_orders",
             "key": "value->'customer_id'",
             "value": "value || jsonb_build_object('amount_band', band, 'net_amount', net_amount)"}
}\$\$) AS job_id;
SQL

echo "== job 2, running_totals: running totals per customer; the default key and value"
psql_demo <<SQL
SELECT mailer.create_job('running_totals', \$\${
  "source": {"type": "kafka", "brokers": "$KAFKA_BROKERS", "topic": "enriched_orders",
             "start": "earliest", "format": "json"},
  "steps": [
    {"key_by":    {"customer_id": "value->>'customer_id'"}},
    {"aggregate": {"orders":       "count(*)",
                   "large_orders": "count(CASE WHEN value->>'amount_band' = 'large' THEN 1 END)",
                   "total":        "sum((value->>'amount')::numeric)",
                   "net_total":    "sum((value->>'net_amount')::numeric)"}}
  ],
  "sink":   {"type": "kafka", "brokers": "$KAFKA_BROKERS", "topic": "customer_totals"}
}\$\$) AS job_id;
SQL

echo "== waiting until both sinks have published everything (mailer.kafka_sinks)"
wait_published enrich_orders
wait_published running_totals
psql_demo -c "SELECT * FROM mailer.kafka_sinks ORDER BY job, subtask"

echo "== enriched_orders: the first records of partition 0"
consume enriched_orders -p 0 -c 3 -f 'key=%k value=%s\n'

echo "== customer_totals, read_committed: one record per customer and checkpoint in which it changed"
consume customer_totals -f 'key=%k value=%s\n'

echo "== the check: every order once in enriched_orders, each customer's latest totals equal SQL's"
psql_demo <<'SQL'
SET client_min_messages = warning;
DROP TABLE IF EXISTS enriched_orders_read, customer_totals_read;
CREATE TABLE enriched_orders_read (value jsonb);
CREATE TABLE customer_totals_read (key jsonb, value jsonb);
SQL
consume enriched_orders -f '%s\n' | psql_demo -c '\copy enriched_orders_read FROM pstdin'
consume customer_totals -f '%k\t%s\n' | psql_demo -c '\copy customer_totals_read FROM pstdin'
# One row per order read twice or never, then per customer whose latest
# totals (the most orders: totals only grow) differ from demo_orders'.
mismatches=$(psql_demo -At <<'SQL'
WITH read AS (
  SELECT (value->>'order_id')::int AS order_id, count(*) AS times
    FROM enriched_orders_read GROUP BY 1)
SELECT format('order %s: read %s times', coalesce(o.order_id, r.order_id), coalesce(r.times, 0))
  FROM (SELECT order_id FROM demo_orders WHERE amount > 0) o
  FULL JOIN read r USING (order_id)
 WHERE r.times IS DISTINCT FROM 1;

WITH expected AS (
  SELECT jsonb_build_object('customer_id', customer_id) AS key,
         jsonb_build_object('customer_id', customer_id,
                            'orders', count(*),
                            'large_orders', count(*) FILTER (WHERE amount >= 75),
                            'total', sum(amount),
                            'net_total', sum(round(amount / 1.2, 2))) AS value
    FROM demo_orders WHERE amount > 0 GROUP BY customer_id),
latest AS (
  SELECT DISTINCT ON (key) key, value
    FROM customer_totals_read ORDER BY key, (value->>'orders')::bigint DESC)
SELECT format('key %s: expected %s, read %s', coalesce(e.key, l.key), e.value, l.value)
  FROM expected e FULL JOIN latest l USING (key)
 WHERE e.value IS DISTINCT FROM l.value;
SQL
)
[ -z "$mismatches" ] || fail "the topics disagree with demo_orders:
$mismatches"
psql_demo -c "SELECT count(DISTINCT key) AS customers, sum((value->>'orders')::bigint) AS orders,
                     sum((value->>'total')::numeric) AS total
                FROM (SELECT DISTINCT ON (key) key, value FROM customer_totals_read
                       ORDER BY key, (value->>'orders')::bigint DESC) AS latest"
echo "OK: enriched_orders holds each order once, and customer_totals' latest totals equal SQL's over demo_orders."

echo
echo "The services keep running: psql -h $PGHOST -p $PGPORT -U $PGUSER $PGDATABASE"
echo "Stop them with: make services-down"
