#!/usr/bin/env python3
# ws404_broker.py PORT PARTITIONS LOG: a Pulsar admin API that answers (a
# topic of PARTITIONS partitions) while every WebSocket upgrade is refused
# at once (HTTP 404), appending each request's path to LOG: the tests
# count what an outage of the readers costs the broker.
import sys, json
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        with open(sys.argv[3], 'a') as f:
            f.write(self.path + '\n')
        if self.path.startswith('/ws/'):
            self.send_response(404)
            self.send_header('Content-Length', '0')
            self.end_headers()
            return
        if self.path.endswith('/partitions'):
            body = {"partitions": int(sys.argv[2])}
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
