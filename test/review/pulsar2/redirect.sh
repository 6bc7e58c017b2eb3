#!/bin/bash
# A plain role's job: the "broker" answers the reader's WebSocket upgrade with a
# 302 to another host:port and any path. libwebsockets follows it (no
# LCCSCF_HTTP_NO_FOLLOW_REDIRECT in pulsar_ws.c open_session), so the worker
# GETs a path of the broker's choosing, which README "Security" says never happens.
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH
LOG=/tmp/mailer-pulsar/redirect.log; rm -f $LOG
python3 "$ROOT/test/review/pulsar2/redirect_broker.py" 28991 'http://127.0.0.1:28992/internal/admin/delete-everything?confirm=yes' $LOG 28992 & P=$!
sleep 1
psql -X -q -c "DROP ROLE IF EXISTS plain_r2" -c "CREATE ROLE plain_r2 LOGIN" -c "GRANT USAGE ON SCHEMA mailer TO plain_r2" -c "GRANT CREATE ON SCHEMA public TO plain_r2" 2>&1 | grep -v NOTICE
psql -X -q -U plain_r2 -c "DROP TABLE IF EXISTS rd_t; CREATE TABLE rd_t (value jsonb)" -c "SELECT mailer.create_job('rd', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28991\", \"topic\": \"persistent://a/b/c\"},
 \"sink\": {\"type\": \"table\", \"table\": \"rd_t\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}}\$\$)" >/dev/null
sleep 6
psql -X -At -U plain_r2 -c "SELECT state, last_error FROM mailer.jobs WHERE name='rd'"
echo "--- requests seen (port path):"; sort $LOG | uniq -c
psql -X -q -U plain_r2 -c "SELECT mailer.stop_job('rd')" -c "SELECT mailer.drop_job('rd')" -c "DROP TABLE rd_t" >/dev/null
psql -X -q -c "REVOKE CREATE ON SCHEMA public FROM plain_r2" -c "REVOKE USAGE ON SCHEMA mailer FROM plain_r2" -c "DROP ROLE plain_r2"
kill $P
echo "expected: only 28991 /admin/v2/persistent/a/b/c/... and /ws/v2/reader/persistent/a/b/c?...; a line for 28992 means the redirect was followed"
