#!/bin/bash
# exactly once through SIGKILLs with batched entries (restart from an id in the middle of a batch)
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH; cd "$ROOT/test/review/pulsar"; [ -f BatchProduce.class ] && [ -f PropsProduce.class ] || javac -d . -cp "$HOME/.cache/mailer/pulsar-4.0.7/libs/*" "$ROOT"/test/pulsar_java/*.java
T=kb_$RANDOM; L=~/.cache/mailer/pulsar-4.0.7/libs; N=${N:-3000}; B=${B:-100}
curl -s -X PUT http://127.0.0.1:28343/admin/v2/persistent/public/default/$T
psql -X -q -c "ALTER SYSTEM SET mailer.batch_size = ${BS:-37}" -c "SELECT pg_reload_conf()" >/dev/null
psql -X -q -c "DROP TABLE IF EXISTS kb; CREATE TABLE kb (i int)" -c "SELECT mailer.create_job('kb_$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28343\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int + 0*length(pg_sleep(0.002)::text)\"}}],
 \"sink\": {\"type\": \"table\", \"table\": \"kb\", \"mode\": \"append\"},
 \"state\": {\"backend\": \"memory\"}, \"checkpoint\": {\"interval\": \"300 milliseconds\"}}\$\$)" >/dev/null
sleep 3
java -cp "$L/*:." BatchProduce pulsar://127.0.0.1:26343 persistent://public/default/$T 1 $N $B >/dev/null 2>&1
for k in 1 2 3 4 5; do
  sleep 1.3
  pid=$(psql -X -At -c "SELECT coalesce(pid,0) FROM mailer.jobs WHERE name='kb_$T'")
  echo "kill $k pid $pid rows $(psql -X -At -c 'select count(*) from kb' 2>/dev/null)"
  [ "$pid" != 0 ] && kill -9 $pid
  sleep 2; until psql -X -At -c "select 1" >/dev/null 2>&1; do sleep 0.5; done
done
for t in $(seq 60); do c=$(psql -X -At -c "select count(*) from kb"); [ "$c" -ge $N ] && break; sleep 1; done
sleep 3
psql -X -At -c "SELECT count(*) AS n, count(DISTINCT i) AS distinct_i, min(i), max(i) FROM kb"
psql -X -At -c "SELECT last_error FROM mailer.jobs WHERE name='kb_$T'"
psql -X -q -c "SELECT mailer.stop_job('kb_$T')" -c "SELECT mailer.drop_job('kb_$T')" -c "ALTER SYSTEM RESET mailer.batch_size" -c "SELECT pg_reload_conf()" >/dev/null
