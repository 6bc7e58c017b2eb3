#!/bin/bash
# A stored position whose ledger id is larger than any the broker now has (the
# cluster behind the service URL was rebuilt, or DNS fails over to a replica
# cluster, whose ledger ids are its own). Simulated here by moving the
# checkpoint's ledger id up (as superuser), since wiping the standalone takes
# a minute. hand_out drops every later message as "already handed out" (its
# id is below pp->last), and check_retention skips the report ("another
# topic's id": from.ledger > oldest). Nothing is ever read again; state
# running, last_error empty, wait_job says all is committed.
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; cd "$ROOT"; . test/services/env.sh; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH
U=http://127.0.0.1:28343/admin/v2/persistent/public/default; T=fi_$RANDOM
curl -s -X PUT $U/$T
for i in 1 2 3 4 5; do echo "{\"i\":$i}"; done | test/services/pulsar.sh produce public/default/$T >/dev/null
psql -X -q -c "DROP TABLE IF EXISTS fi; CREATE TABLE fi (i int)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"fi\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}, \"checkpoint\": {\"interval\": \"300 milliseconds\"}}\$\$)" >/dev/null
sleep 3; psql -X -At -c "SELECT mailer.wait_job('$T')" -c "SELECT mailer.stop_job('$T')" >/dev/null
echo "stored position: $(psql -X -At -c "SELECT positions FROM mailer.checkpoints c JOIN mailer.job j USING (job_id) WHERE j.name='$T' ORDER BY epoch DESC LIMIT 1")"
# ledger id 10^9 (field 1 varint), entry 4: what a position of the other cluster looks like here
NEWID=$(python3 -c "
import base64
def v(f,x):
    b=bytes([f<<3])
    while True:
        c=x&0x7f; x>>=7
        b+=bytes([c|(0x80 if x else 0)])
        if not x: return b
print(base64.b64encode(v(1,10**9)+v(2,4)).decode())")
psql -X -q -c "UPDATE mailer.checkpoints c SET positions = jsonb_build_object('persistent://public/default/$T', jsonb_build_object('0', '$NEWID')) FROM mailer.job j WHERE j.job_id = c.job_id AND j.name = '$T'"
psql -X -At -c "SELECT mailer.start_job('$T')" >/dev/null; sleep 3
for i in 6 7 8 9 10; do echo "{\"i\":$i}"; done | test/services/pulsar.sh produce public/default/$T >/dev/null
sleep 12
psql -X -At -c "SELECT 'wait_job', mailer.wait_job('$T', '20 s')" -c "SELECT 'rows', count(*), string_agg(i::text, ',' ORDER BY i) FROM fi" -c "SELECT 'job', state, coalesce(last_error, '<none>') FROM mailer.jobs WHERE name='$T'" -c "SELECT 'metrics', partition, position, records_in FROM mailer.partition_metrics WHERE name='$T'"
echo "expected: rows 6..10 read, or the job saying its position is not one of this topic"
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" >/dev/null; curl -s -X DELETE "$U/$T?force=true"
