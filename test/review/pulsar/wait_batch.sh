#!/bin/bash
# wait_job returns before a Java-batched entry is fully handed out
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH; cd "$ROOT/test/review/pulsar"; [ -f BatchProduce.class ] && [ -f PropsProduce.class ] || javac -d . -cp "$HOME/.cache/mailer/pulsar-4.0.7/libs/*" "$ROOT"/test/pulsar_java/*.java
T=rb_$RANDOM; L=~/.cache/mailer/pulsar-4.0.7/libs
curl -s -X PUT http://127.0.0.1:28343/admin/v2/persistent/public/default/$T
psql -X -q -c "ALTER SYSTEM SET mailer.batch_size = 7" -c "SELECT pg_reload_conf()" >/dev/null
psql -X -q -c "DROP TABLE IF EXISTS wb; CREATE TABLE wb (i int)" -c "SELECT mailer.create_job('wb_$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int + 0*length(pg_sleep(0.003)::text)\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"wb\", \"mode\": \"append\"},
 \"state\": {\"backend\": \"memory\"}, \"checkpoint\": {\"interval\": \"100 milliseconds\"}}\$\$)" >/dev/null
sleep 3
java -cp "$L/*:." BatchProduce pulsar://127.0.0.1:26343 persistent://public/default/$T 1 1000 100 >/dev/null 2>&1
curl -s http://127.0.0.1:28343/admin/v2/persistent/public/default/$T/lastMessageId; echo
psql -X -At -c "SELECT mailer.wait_job('wb_$T')" -c "SELECT count(*) AS rows_after_wait_job FROM wb"
sleep 6; psql -X -At -c "SELECT count(*) AS rows_later FROM wb"
psql -X -q -c "SELECT mailer.stop_job('wb_$T')" -c "SELECT mailer.drop_job('wb_$T')" -c "ALTER SYSTEM RESET mailer.batch_size" -c "SELECT pg_reload_conf()" >/dev/null
