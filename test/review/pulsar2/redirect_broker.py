#!/usr/bin/env python3
# redirect_broker.py PORT TARGET_URL LOG: a "broker" whose admin API answers
# like Pulsar (topic not partitioned, one message) and whose WebSocket upgrade
# answers 302 Location: TARGET_URL. Every request (of any port given to it) is
# logged, so one sees whether the worker follows the redirect.
import sys, json, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
PORT, TARGET, LOG = int(sys.argv[1]), sys.argv[2], sys.argv[3]

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        with open(LOG, 'a') as f:
            f.write('%d %s\n' % (self.server.server_address[1], self.path))
        if self.server.server_address[1] != PORT:
            b = b'internal'
            self.send_response(403); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
            return
        if self.path.startswith('/ws/'):
            self.send_response(302); self.send_header('Location', TARGET); self.send_header('Content-Length', '0'); self.end_headers()
            return
        if self.path.endswith('/partitions'):
            body = {"partitions": 0}
        elif self.path.endswith('/lastMessageId'):
            body = {"ledgerId": 5, "entryId": 3}
        else:
            body = {"ledgers": [{"ledgerId": 5, "entries": 4}]}
        b = json.dumps(body).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)

ports = [PORT] + [int(p) for p in sys.argv[4:]]
for p in ports[1:]:
    threading.Thread(target=ThreadingHTTPServer(('127.0.0.1', p), H).serve_forever, daemon=True).start()
ThreadingHTTPServer(('127.0.0.1', PORT), H).serve_forever()
