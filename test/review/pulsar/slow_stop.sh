#!/bin/bash
# stop_job against a broker whose internalStats hangs: each partition's reader opening blocks 2 s, in one poll
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH; cd "$ROOT/test/review/pulsar"; [ -f BatchProduce.class ] && [ -f PropsProduce.class ] || javac -d . -cp "$HOME/.cache/mailer/pulsar-4.0.7/libs/*" "$ROOT"/test/pulsar_java/*.java
psql -X -q -c "DROP TABLE IF EXISTS ss; CREATE TABLE ss (value jsonb)" -c "SELECT mailer.create_job('ss', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28999\", \"topic\": \"persistent://public/default/slow\", \"start\": \"latest\"},
 \"sink\": {\"type\": \"table\", \"table\": \"ss\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}}\$\$)" >/dev/null
sleep ${WAIT:-5}
psql -X -At -c "SELECT state, pid, last_error FROM mailer.jobs WHERE name='ss'"
s=$(date +%s.%N); psql -X -At -c "SELECT mailer.stop_job('ss', '120 s')"; e=$(date +%s.%N)
echo "stop_job took $(echo "$e - $s" | bc) s"
psql -X -q -c "SELECT mailer.drop_job('ss')" >/dev/null
