#!/bin/bash
# exactly once through a broker restart while reading batched entries (reader reopened after a mid-batch id)
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH; cd "$ROOT/test/review/pulsar"; [ -f BatchProduce.class ] && [ -f PropsProduce.class ] || javac -d . -cp "$HOME/.cache/mailer/pulsar-4.0.7/libs/*" "$ROOT"/test/pulsar_java/*.java
T=rs_$RANDOM; L=~/.cache/mailer/pulsar-4.0.7/libs; N=${N:-4000}
curl -s -X PUT http://127.0.0.1:28343/admin/v2/persistent/public/default/$T
java -cp "$L/*:." BatchProduce pulsar://127.0.0.1:26343 persistent://public/default/$T 1 $N 100 >/dev/null 2>&1
psql -X -q -c "ALTER SYSTEM SET mailer.batch_size = 37" -c "SELECT pg_reload_conf()" >/dev/null
psql -X -q -c "DROP TABLE IF EXISTS rs; CREATE TABLE rs (i int)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int + 0*length(pg_sleep(0.004)::text)\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"rs\", \"mode\": \"append\"},
 \"state\": {\"backend\": \"memory\"}, \"checkpoint\": {\"interval\": \"300 milliseconds\"}}\$\$)" >/dev/null
sleep 4; echo "rows before the restart: $(psql -X -At -c 'select count(*) from rs')"
$ROOT/test/services/pulsar.sh restart >/dev/null 2>&1; echo "restarted; rows: $(psql -X -At -c 'select count(*) from rs')"
for t in $(seq 90); do c=$(psql -X -At -c "select count(*) from rs"); [ "$c" -ge $N ] && break; sleep 1; done; sleep 3
psql -X -At -c "SELECT count(*) AS n, count(DISTINCT i), min(i), max(i) FROM rs"
psql -X -At -c "SELECT state, last_error FROM mailer.jobs WHERE name='$T'"
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" -c "ALTER SYSTEM RESET mailer.batch_size" -c "SELECT pg_reload_conf()" >/dev/null
