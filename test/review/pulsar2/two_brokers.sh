#!/bin/bash
# A 2-partition topic in a cluster of two brokers, the job given one broker's
# URL: partition 1 is owned by the other broker, so lastMessageId and
# internalStats answer 307 there (two_brokers.py plays that cluster in front of
# the standalone). Reading works (the WebSocket service looks topics up), but
# wait_job never gets its marks (take_marks stops at the 307), and a "latest"
# start never resolves: the job waits forever. No single service URL helps:
# the partitions of one topic are spread over the brokers.
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; cd "$ROOT"; . test/services/env.sh; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH
python3 test/review/pulsar2/two_brokers.py 28990 28343 1 & P=$!; sleep 1
T=tb_$RANDOM; test/services/pulsar.sh create-topic public/default/$T 2 >/dev/null
for i in 1 2 3; do echo "{\"i\":$i}"; done | test/services/pulsar.sh produce public/default/$T-partition-0 >/dev/null
for i in 4 5 6; do echo "{\"i\":$i}"; done | test/services/pulsar.sh produce public/default/$T-partition-1 >/dev/null
psql -X -q -c "DROP TABLE IF EXISTS tb; CREATE TABLE tb (i int)" -c "DROP TABLE IF EXISTS tbl; CREATE TABLE tbl (i int)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28990\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int\"}}], \"sink\": {\"type\": \"table\", \"table\": \"tb\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}}\$\$)" -c "SELECT mailer.create_job('l$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28990\", \"topic\": \"persistent://public/default/$T\", \"start\": \"latest\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int\"}}], \"sink\": {\"type\": \"table\", \"table\": \"tbl\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}}\$\$)" >/dev/null
sleep 6
for i in 7 8; do echo "{\"i\":$i}"; done | test/services/pulsar.sh produce public/default/$T-partition-1 >/dev/null
psql -X -At -c "SELECT 'wait_job earliest-job', mailer.wait_job('$T', '15 s')" -c "SELECT 'rows earliest-job', count(*) FROM tb" -c "SELECT 'wait_job latest-job', mailer.wait_job('l$T', '15 s')" -c "SELECT 'rows latest-job', count(*) FROM tbl" -c "SELECT 'job', name, state, coalesce(last_error,'<none>') FROM mailer.jobs WHERE name IN ('$T', 'l$T')"
echo "expected: both wait_job 'running'; earliest-job 8 rows, latest-job 2 rows (7, 8)"
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" -c "SELECT mailer.stop_job('l$T')" -c "SELECT mailer.drop_job('l$T')" >/dev/null; kill $P
