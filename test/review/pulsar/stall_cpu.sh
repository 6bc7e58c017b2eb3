#!/bin/bash
# the worker's CPU while its reader's WebSocket handshake hangs (max_wait 10 ms while not OPEN)
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH; cd "$ROOT/test/review/pulsar"; [ -f BatchProduce.class ] && [ -f PropsProduce.class ] || javac -d . -cp "$HOME/.cache/mailer/pulsar-4.0.7/libs/*" "$ROOT"/test/pulsar_java/*.java
psql -X -q -c "DROP TABLE IF EXISTS st; CREATE TABLE st (value jsonb)" -c "SELECT mailer.create_job('st', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:${PORT:-28996}\", \"topic\": \"persistent://public/default/stall\"},
 \"sink\": {\"type\": \"table\", \"table\": \"st\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}}\$\$)" >/dev/null
sleep 5
pid=$(psql -X -At -c "SELECT pid FROM mailer.jobs WHERE name='st'")
a=$(awk '{print $14+$15}' /proc/$pid/stat); s1=$(grep ctxt /proc/$pid/status | awk '{s+=$2} END {print s}')
sleep 20
b=$(awk '{print $14+$15}' /proc/$pid/stat); s2=$(grep ctxt /proc/$pid/status | awk '{s+=$2} END {print s}')
echo "worker $pid: $((b-a)) ticks CPU (1/100 s) and $((s2-s1)) context switches in 20 s"
psql -X -At -c "SELECT state, last_error FROM mailer.jobs WHERE name='st'"
psql -X -q -c "SELECT mailer.stop_job('st')" -c "SELECT mailer.drop_job('st')" >/dev/null
