#!/bin/bash
# a stop while the broker is away writes a checkpoint whose records_in is empty: offsets start again at 0
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH
T=or_$RANDOM
test/services/pulsar.sh create-topic public/default/$T 0 >/dev/null 2>&1 || curl -s -X PUT http://127.0.0.1:28343/admin/v2/persistent/public/default/$T
for i in 1 2 3 4 5; do echo "{\"i\":$i}"; done | test/services/pulsar.sh produce public/default/$T >/dev/null
psql -X -q -c "DROP TABLE IF EXISTS orr; CREATE TABLE orr (\"offset\" bigint PRIMARY KEY, i int)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"orr\"}, \"state\": {\"backend\": \"memory\"}, \"checkpoint\": {\"interval\": \"300 milliseconds\"}}\$\$)" >/dev/null
sleep 4; psql -X -At -c "SELECT mailer.wait_job('$T')" -c "SELECT mailer.stop_job('$T')" >/dev/null
test/services/pulsar.sh stop >/dev/null 2>&1
psql -X -At -c "SELECT mailer.start_job('$T')" >/dev/null; sleep 4; psql -X -At -c "SELECT mailer.stop_job('$T')"
test/services/pulsar.sh start >/dev/null 2>&1
for i in 6 7 8; do echo "{\"i\":$i}"; done | test/services/pulsar.sh produce public/default/$T >/dev/null
psql -X -At -c "SELECT mailer.start_job('$T')" >/dev/null; sleep 6
psql -X -At -c "SELECT mailer.wait_job('$T')" -c "SELECT \"offset\", i FROM orr ORDER BY 1"
echo "expected offsets 0..7 with i 1..8; an upsert on offset overwrote rows if i 6..8 sit at offsets 0..2"
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" >/dev/null
