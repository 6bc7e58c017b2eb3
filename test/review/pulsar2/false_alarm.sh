#!/bin/bash
# Pulsar's default retention (0) deletes a ledger as soon as it rolls, when no
# durable subscription holds it. A job that keeps up with a steadily fed topic
# is never "stalled" at a metadata refresh, so check_retention never notes the
# ledger's length; at a roll followed soon by retention's trim (here an unload, then a
# trim; a broker restart, a bundle move,
# 50000 entries do the same), the reader goes on in the next ledger and the job
# reports a loss: WARNING + last_error "... may have been deleted unread",
# although every message was read (the count below is exact).
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; cd "$ROOT"; . test/services/env.sh; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH
U=http://127.0.0.1:28343/admin/v2/persistent/public/default; T=fa_$RANDOM
curl -s -X PUT $U/$T; curl -s -X POST -H 'Content-Type: application/json' -d false $U/$T/deduplicationEnabled
curl -s -X POST -H 'Content-Type: application/json' -d '{"retentionTimeInMinutes":0,"retentionSizeInMB":0}' $U/$T/retention; sleep 2
psql -X -q -c "DROP TABLE IF EXISTS fa; CREATE TABLE fa (i int)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"fa\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}, \"checkpoint\": {\"interval\": \"300 milliseconds\"}}\$\$)" >/dev/null
N=0
for round in 1 2 3; do
  for b in $(seq 1 8); do seq $((N+1)) $((N+20)) | sed 's/.*/{"i":&}/' | test/services/pulsar.sh produce public/default/$T >/dev/null; N=$((N+20)); sleep 0.5; done
  curl -s -X PUT $U/$T/unload; echo "{\"i\":0}" | test/services/pulsar.sh produce public/default/$T >/dev/null; curl -s -X POST $U/$T/trim
done
seq $((N+1)) $((N+20)) | sed 's/.*/{"i":&}/' | test/services/pulsar.sh produce public/default/$T >/dev/null; N=$((N+20))
sleep 8
psql -X -At -c "SELECT 'wait_job', mailer.wait_job('$T')" -c "SELECT 'rows', count(*) filter (where i > 0), count(distinct i) filter (where i > 0), $N AS produced FROM fa" -c "SELECT 'job', state, coalesce(last_error,'<none>') FROM mailer.jobs WHERE name='$T'"
echo "expected: rows = produced and no report of a deletion"
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" >/dev/null; curl -s -X DELETE "$U/$T?force=true"
