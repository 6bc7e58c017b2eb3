#!/bin/bash
# how fast a job drains a backlog (acks go out one per lws_service: flow control throttles the reader?)
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH; cd "$ROOT/test/review/pulsar"; [ -f BatchProduce.class ] && [ -f PropsProduce.class ] || javac -d . -cp "$HOME/.cache/mailer/pulsar-4.0.7/libs/*" "$ROOT"/test/pulsar_java/*.java
T=tp_$RANDOM; L=~/.cache/mailer/pulsar-4.0.7/libs; N=${N:-50000}
curl -s -X PUT http://127.0.0.1:28343/admin/v2/persistent/public/default/$T
java -cp "$L/*:." BatchProduce pulsar://127.0.0.1:26343 persistent://public/default/$T 1 $N ${B:-1} >/dev/null 2>&1
psql -X -q -c "DROP TABLE IF EXISTS tp; CREATE TABLE tp (k text PRIMARY KEY, n bigint)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"key_by\": {\"k\": \"'x'\"}}, {\"aggregate\": {\"n\": \"count(*)\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"tp\"}, \"state\": {\"backend\": \"memory\"}}\$\$)" >/dev/null
s=$(date +%s.%N)
for t in $(seq 240); do c=$(psql -X -At -c "SELECT coalesce(sum(n),0) FROM tp"); [ "$c" -ge $N ] && break; sleep 0.5; done
e=$(date +%s.%N); pid=$(psql -X -At -c "SELECT pid FROM mailer.jobs WHERE name='$T'")
echo "$c of $N records in $(echo "$e - $s" | bc) s; worker CPU $(awk '{print ($14+$15)/100}' /proc/$pid/stat) s"
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" >/dev/null
