#!/bin/bash
# start "latest", parallelism 2, a 1-partition topic: subtask 1 owns no partition, so it never counts as
# positioned; a partition added later is resolved to "latest" by it, skipping what was written before its refresh
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH
T=la_$RANDOM
test/services/pulsar.sh create-topic public/default/$T 1 >/dev/null
psql -X -q -c "DROP TABLE IF EXISTS la; CREATE TABLE la (k text PRIMARY KEY, n bigint)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\", \"start\": \"latest\"},
 \"steps\": [{\"key_by\": {\"k\": \"value->>'k'\"}}, {\"aggregate\": {\"n\": \"count(*)\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"la\"}, \"state\": {\"backend\": \"rocksdb\"}, \"parallelism\": 2,
 \"checkpoint\": {\"interval\": \"1 second\"}}\$\$)" >/dev/null
sleep 8
psql -X -At -c "SELECT state FROM mailer.jobs WHERE name='$T'"
test/services/pulsar.sh add-partitions public/default/$T 2
for i in $(seq 100); do echo '{"k":"p1"}'; done | test/services/pulsar.sh produce public/default/$T-partition-1 >/dev/null
for i in $(seq 100); do echo '{"k":"p0"}'; done | test/services/pulsar.sh produce public/default/$T-partition-0 >/dev/null
sleep 8
psql -X -At -c "SELECT mailer.wait_job('$T')" -c "SELECT k, n FROM la ORDER BY k"
echo "expected: p0|100 and p1|100"
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" >/dev/null
