#!/bin/bash
# parse_pulsar accepts a bracketed IPv6 service URL (check_service_host); does the job read through it?
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; cd "$ROOT"; . test/services/env.sh; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH
python3 - <<'PY' &
import socket, threading
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            b.sendall(d)
    except OSError: pass
    for s in (a, b):
        try: s.shutdown(socket.SHUT_RDWR)
        except OSError: pass
l = socket.socket(socket.AF_INET6); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind(('::1', 28994)); l.listen(64)
while True:
    c, _ = l.accept(); t = socket.create_connection(('127.0.0.1', 28343))
    threading.Thread(target=pipe, args=(c, t), daemon=True).start(); threading.Thread(target=pipe, args=(t, c), daemon=True).start()
PY
P=$!; sleep 1
U=http://127.0.0.1:28343/admin/v2/persistent/public/default; T=v6_$RANDOM; curl -s -X PUT $U/$T
for i in 1 2 3; do echo "{\"i\":$i}"; done | test/services/pulsar.sh produce public/default/$T >/dev/null
psql -X -q -c "DROP TABLE IF EXISTS v6; CREATE TABLE v6 (i int)" -c "SELECT mailer.create_job('$T', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://[::1]:28994\", \"topic\": \"persistent://public/default/$T\"},
 \"steps\": [{\"map\": {\"i\": \"(value->>'i')::int\"}}], \"sink\": {\"type\": \"table\", \"table\": \"v6\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}}\$\$)" >/dev/null
sleep 6; psql -X -At -c "SELECT 'rows', count(*) FROM v6" -c "SELECT 'job', state, coalesce(last_error,'<none>') FROM mailer.jobs WHERE name='$T'"
psql -X -q -c "SELECT mailer.stop_job('$T')" -c "SELECT mailer.drop_job('$T')" >/dev/null; curl -s -X DELETE "$U/$T?force=true"; kill $P
echo "expected: rows 3"
