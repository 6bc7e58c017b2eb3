#!/usr/bin/env python3
# internal_service.py PORT STATUS LOG: an HTTP service on loopback that is
# not Pulsar (think: a metadata or admin endpoint), answering every GET
# with STATUS and a body holding a secret, and appending each request's
# path to LOG. The tests point a Pulsar job's service_url at it: the
# job's last_error must never show the body, and the paths show what the
# server was made to ask.
import sys
from http.server import HTTPServer, BaseHTTPRequestHandler

PORT, STATUS, LOG = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        with open(LOG, 'a') as f:
            f.write(self.path + '\n')
        body = b'{"internal": "db_password=hunter2", "partitions": 1, "ledgerId": 1, "entryId": 1}'
        if STATUS != 200:
            body = b'{"reason": "db_password=hunter2"}'
        self.send_response(STATUS)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)


HTTPServer(('127.0.0.1', PORT), Handler).serve_forever()
