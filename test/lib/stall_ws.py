#!/usr/bin/env python3
# stall_ws.py PORT: a Pulsar admin API that answers (a topic that is not
# partitioned, its lastMessageId and stats) and a WebSocket service that
# takes the upgrade request and never answers it (a hung WS service). The
# Pulsar source's tests measure the worker's wake-ups meanwhile.
import sys, time, json
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path.startswith('/ws/'):
            time.sleep(3600)
            return
        if self.path.endswith('/partitions'):
            body = {"partitions": 0}
        elif self.path.endswith('/lastMessageId'):
            body = {"ledgerId": 5, "entryId": 3}
        else:
            body = {"ledgers": [{"ledgerId": 5, "entries": 4}]}
        b = json.dumps(body).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)


ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
