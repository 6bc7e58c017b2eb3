#!/bin/bash
# a plain role makes the server GET any host:port and reads the answer's body in last_error
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); . /work/envs/pulsar.env; export PGUSER=postgres PGDATABASE=mailer PATH=/opt/pg-pulsar/usr/lib/postgresql/15/bin:$PATH; cd "$ROOT/test/review/pulsar"; [ -f BatchProduce.class ] && [ -f PropsProduce.class ] || javac -d . -cp "$HOME/.cache/mailer/pulsar-4.0.7/libs/*" "$ROOT"/test/pulsar_java/*.java
psql -X -q -c "DROP ROLE IF EXISTS plain_r" -c "CREATE ROLE plain_r LOGIN" -c "GRANT USAGE ON SCHEMA mailer TO plain_r" -c "GRANT CREATE ON SCHEMA public TO plain_r" 2>&1 | grep -v NOTICE
psql -X -q -U plain_r -c "DROP TABLE IF EXISTS ssrf_t; CREATE TABLE ssrf_t (value jsonb)" -c "SELECT mailer.create_job('ssrf', \$\${
 \"source\": {\"type\": \"pulsar\", \"service_url\": \"http://127.0.0.1:28997\", \"topic\": \"persistent://a/b/c\"},
 \"sink\": {\"type\": \"table\", \"table\": \"ssrf_t\", \"mode\": \"append\"}, \"state\": {\"backend\": \"memory\"}}\$\$)" 2>&1
sleep 4
psql -X -At -U plain_r -c "SELECT state, last_error FROM mailer.jobs WHERE name='ssrf'"
psql -X -q -U plain_r -c "SELECT mailer.stop_job('ssrf')" -c "SELECT mailer.drop_job('ssrf')" -c "DROP TABLE ssrf_t" >/dev/null
psql -X -q -c "REVOKE CREATE ON SCHEMA public FROM plain_r" -c "REVOKE USAGE ON SCHEMA mailer FROM plain_r" -c "DROP ROLE plain_r"
