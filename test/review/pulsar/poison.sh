#!/bin/bash
# a legitimate message the frame parser refuses wedges the job (no dead letter, restarts forever)
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH; cd "$ROOT/test/review/pulsar"; [ -f BatchProduce.class ] && [ -f PropsProduce.class ] || javac -d . -cp "$HOME/.cache/mailer/pulsar-4.0.7/libs/*" "$ROOT"/test/pulsar_java/*.java
KIND=${1:-props}; T=po_${KIND}_$RANDOM; L=~/.cache/mailer/pulsar-4.0.7/libs
curl -s -X PUT http://127.0.0.1:28343/admin/v2/persistent/public/default/$T
java -cp "$L/*:." PropsProduce pulsar://127.0.0.1:26343 persistent://public/default/$T $KIND >/dev/null 2>&1 || echo produce failed
psql -X -q -c "DROP TABLE IF EXISTS po; CREATE TABLE po (value jsonb)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"sink\": {\"type\": \"table\", \"table\": \"po\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}}\$\$)" >/dev/null
sleep 8
psql -X -At -c "SELECT state, restarts, last_error FROM mailer.jobs WHERE name='$T'" 2>&1 || psql -X -At -c "SELECT state, last_error FROM mailer.jobs WHERE name='$T'"
psql -X -At -c "SELECT 'rows', count(*) FROM po" -c "SELECT 'dead letters', count(*) FROM mailer.dead_letters WHERE job = '$T'" 2>&1 | head -3
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" >/dev/null
