#!/usr/bin/env python3
# slow_broker.py PORT PARTITIONS: a Pulsar admin API that answers the
# partition metadata and lastMessageId at once but hangs on everything
# else (internalStats: a loaded broker, a GC pause). The Pulsar source's
# tests point a job at it to measure how long the worker is blocked.
import sys, time, json
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path.endswith('/partitions'):
            body = {"partitions": int(sys.argv[2])}
        elif self.path.endswith('/lastMessageId'):
            body = {"ledgerId": 5, "entryId": 3}
        else:
            time.sleep(60)
            body = {}
        b = json.dumps(body).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)


ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
