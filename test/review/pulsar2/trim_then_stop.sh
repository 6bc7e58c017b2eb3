#!/bin/bash
# Retention deletes the ledger a slow job is reading; the reader goes on in the
# next ledger. The deletion is noticed only at the next metadata refresh (up to
# 5 s later, check_retention via switched_from, kept in memory only). A stop_job
# (or a crash, or a server restart) in that window: the checkpoint now holds a
# position in the new ledger, the next run has nothing to compare, and the loss
# (MODE=kill: a SIGKILL of the worker instead of stop_job)
# is never reported (no WARNING, last_error empty).
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; cd "$ROOT"; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH
L=~/.cache/mailer/pulsar-4.0.7/libs; J=/tmp/mailer-pulsar/pj2; mkdir -p $J; [ -f $J/BatchProduce.class ] || javac -d $J -cp "$L/*" test/pulsar_java/*.java
U=http://127.0.0.1:28343/admin/v2/persistent/public/default; T=tts_$RANDOM; N=6000
curl -s -X PUT $U/$T; curl -s -X POST -H 'Content-Type: application/json' -d false $U/$T/deduplicationEnabled; curl -s -X POST -H 'Content-Type: application/json' -d '{"retentionTimeInMinutes":0,"retentionSizeInMB":0}' $U/$T/retention; sleep 2
java -cp "$L/*:$J" BatchProduce pulsar://127.0.0.1:26343 persistent://public/default/$T 1 $N 1 >/dev/null 2>&1
curl -s -X PUT $U/$T/unload; sleep 2
psql -X -q -c "DROP TABLE IF EXISTS tts; CREATE TABLE tts (i int)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int + 0*length(pg_sleep(0.002)::text)\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"tts\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}, \"checkpoint\": {\"interval\": \"300 milliseconds\"}}\$\$)" >/dev/null
sleep 3; echo "rows before trim: $(psql -X -At -c 'select count(*) from tts')"
curl -s -X POST $U/$T/trim
# the next ledger gets messages at once, so the reader switches ledgers
java -cp "$L/*:$J" BatchProduce pulsar://127.0.0.1:26343 persistent://public/default/$T 100001 200 1 >/dev/null 2>&1
for t in $(seq 300); do m=$(psql -X -At -c "select coalesce(max(i),0) from tts"); [ "$m" -gt 100000 ] && break; sleep 0.1; done
if [ "${MODE:-stop}" = kill ]; then
  # SIGKILL of the worker: the postmaster restarts every backend; the job resumes from its last checkpoint
  pid=$(psql -X -At -c "SELECT pid FROM mailer.jobs WHERE name='$T'"); echo "kill -9 $pid"; kill -9 $pid; sleep 8
else
  psql -X -At -c "SELECT 'stop', mailer.stop_job('$T')"
  psql -X -At -c "SELECT 'start', mailer.start_job('$T')" >/dev/null
fi
sleep 15
psql -X -At -c "SELECT 'rows', count(*), count(*) filter (where i > 100000), count(distinct i) FROM tts" -c "SELECT 'job', state, coalesce(last_error,'<none>') FROM mailer.jobs WHERE name='$T'"
echo "WARNINGs in the server log about $T:"; grep -c "was deleted (retention)" <(grep "$T" $PGDATA/../postgresql.log 2>/dev/null || grep -r "$T" /tmp/mailer-pulsar/postgresql.log)
echo "expected: fewer than $N old rows were read (retention deleted them), and a WARNING + last_error saying so"
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" >/dev/null
