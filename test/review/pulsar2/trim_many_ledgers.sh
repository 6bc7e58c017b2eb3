#!/bin/bash
# Retention deletes the ledger a slow job reads, on a topic that has more than
# ~90 ledgers (any busy topic with the retention README advises: a ledger rolls
# every 50000 entries). internalStats is then longer than PulsarSource.http_body
# (8 kB), http_write cuts it, stats_ledger finds no ']' and returns -1, and
# check_retention returns without a report, at every refresh, forever.
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; cd "$ROOT"; . test/services/env.sh; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH
U=http://127.0.0.1:28343/admin/v2/persistent/public/default; T=tml_$RANDOM; NL=${NL:-130}
curl -s -X PUT $U/$T; curl -s -X POST -H 'Content-Type: application/json' -d false $U/$T/deduplicationEnabled
curl -s -X POST -H 'Content-Type: application/json' -d '{"retentionTimeInMinutes":0,"retentionSizeInMB":0}' $U/$T/retention; sleep 2
PAD=$(head -c 1000 /dev/zero | tr '\0' x)
# ledger 1: 8000 messages; then NL ledgers of one small message each
for i in $(seq 1 8000); do echo "{\"i\":$i}"; done | test/services/pulsar.sh produce public/default/$T >/dev/null
for l in $(seq 1 $NL); do curl -s -X PUT $U/$T/unload; echo "{\"i\":$((100000+l))}" | test/services/pulsar.sh produce public/default/$T >/dev/null; done
echo "internalStats: $(curl -s $U/$T/internalStats | wc -c) bytes, $(curl -s $U/$T/internalStats | grep -o ledgerId | wc -l) ledgers"
psql -X -q -c "DROP TABLE IF EXISTS tml; CREATE TABLE tml (i int)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int + 0*length(pg_sleep(0.003)::text)\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"tml\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}, \"checkpoint\": {\"interval\": \"300 milliseconds\"}}\$\$)" >/dev/null
sleep 2; echo "rows before trim: $(psql -X -At -c 'select count(*) from tml')"
# a durable subscription at the second ledger: retention 0 deletes the first ledger only
L2=$(curl -s $U/$T/internalStats | python3 -c "import json,sys; print(json.load(sys.stdin)['ledgers'][1]['ledgerId'])")
curl -s -X PUT -H 'Content-Type: application/json' -d "{\"ledgerId\":$L2,\"entryId\":0,\"partitionIndex\":-1}" $U/$T/subscription/hold
curl -s -X POST $U/$T/trim; sleep 1
echo "after trim: $(curl -s $U/$T/internalStats | grep -o ledgerId | wc -l) ledgers"
for t in $(seq 60); do c=$(psql -X -At -c "select count(*) from tml where i > 100000"); [ "$c" -ge $NL ] && break; sleep 1; done; sleep 12
psql -X -At -c "SELECT 'rows', count(*) filter (where i <= 8000), count(*) filter (where i > 100000) FROM tml" -c "SELECT 'job', state, coalesce(last_error,'<none>') FROM mailer.jobs WHERE name='$T'"
echo "expected: a WARNING and last_error that ledger ... was deleted (retention) with messages unread"
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" >/dev/null; curl -s -X DELETE "$U/$T?force=true"
