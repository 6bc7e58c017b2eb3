#!/bin/bash
# finding 9: a ledger deleted by retention while the reader is open: messages skipped, nothing reported
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; cd "$ROOT/test/review/pulsar"; [ -f BatchProduce.class ] || javac -d . -cp "$HOME/.cache/mailer/pulsar-4.0.7/libs/*" BatchProduce.java PropsProduce.java; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH; U=http://127.0.0.1:28343/admin/v2/persistent/public/default; T=to_$RANDOM; N=12000; curl -s -X PUT $U/$T; curl -s -X POST -H 'Content-Type: application/json' -d false $U/$T/deduplicationEnabled; curl -s -X POST -H 'Content-Type: application/json' -d '{"retentionTimeInMinutes":0,"retentionSizeInMB":0}' $U/$T/retention; sleep 2
L=~/.cache/mailer/pulsar-4.0.7/libs; java -cp "$L/*:$PWD" BatchProduce pulsar://127.0.0.1:26343 persistent://public/default/$T 1 $N 1 >/dev/null 2>&1
curl -s -X PUT $U/$T/unload; sleep 2
psql -X -q -c "DROP TABLE IF EXISTS trm; CREATE TABLE trm (i int)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int + 0*length(pg_sleep(0.002)::text)\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"trm\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}, \"checkpoint\": {\"interval\": \"300 milliseconds\"}}\$\$)" >/dev/null
sleep 4; echo "rows $(psql -X -At -c 'select count(*) from trm')"; curl -s -X POST $U/$T/trim; curl -s $U/$T/internalStats | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['ledgers'])"
for t in $(seq 60); do c=$(psql -X -At -c "select count(*) from trm"); [ "$c" -ge $N ] && break; sleep 1; done; sleep 3
psql -X -At -c "SELECT count(*), count(distinct i), max(i) FROM trm" -c "SELECT state, last_error FROM mailer.jobs WHERE name='$T'"; psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" >/dev/null
