#!/usr/bin/env python3
# fake_pulsar.py PORT MODE PARTITIONS [LOG [LOCATION]]: a Pulsar broker that is not
# one, for the Pulsar source's tests of a broker in trouble. Its admin API
# answers the partition metadata (PARTITIONS: 0 for a topic that is not
# partitioned), lastMessageId 5:3 and internalStats (ledger 5, 4 entries)
# at once, but for what MODE says:
#   slow-admin  internalStats and the WebSocket upgrade hang (a loaded broker)
#   stall-ws    the WebSocket upgrade is taken and never answered
#   refuse-ws   every WebSocket upgrade is refused at once (HTTP 404)
#   redirect-ws every WebSocket upgrade is answered 302 Location: LOCATION
#   close-ws    every WebSocket upgrade is taken, then the session closed
#               (code 1000) with LOCATION as the close frame's reason text
# Each request's path is appended to LOG when given.
import sys, time, json, base64, hashlib
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

PORT, MODE, PARTITIONS = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
LOG = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None
LOCATION = sys.argv[5] if len(sys.argv) > 5 else None


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if LOG:
            with open(LOG, 'a') as f:
                f.write(self.path + '\n')
        upgrade = self.path.startswith('/ws/')
        if upgrade and MODE == 'refuse-ws':
            self.send_response(404)
            self.send_header('Content-Length', '0')
            self.end_headers()
            return
        if upgrade and MODE == 'redirect-ws':
            self.send_response(302)
            self.send_header('Location', LOCATION)
            self.send_header('Content-Length', '0')
            self.end_headers()
            return
        if upgrade and MODE == 'close-ws':
            key = self.headers['Sec-WebSocket-Key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
            self.protocol_version = 'HTTP/1.1'
            self.send_response(101)
            self.send_header('Upgrade', 'websocket')
            self.send_header('Connection', 'Upgrade')
            self.send_header('Sec-WebSocket-Accept',
                             base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
            self.end_headers()
            payload = b'\x03\xe8' + LOCATION.encode()[:120]
            self.wfile.write(bytes([0x88, len(payload)]) + payload)
            self.wfile.flush()
            time.sleep(1)
            self.close_connection = True
            return
        if upgrade or (MODE == 'slow-admin' and self.path.endswith('/internalStats')):
            time.sleep(3600)
            return
        if self.path.endswith('/partitions'):
            body = {"partitions": PARTITIONS}
        elif self.path.endswith('/lastMessageId'):
            body = {"ledgerId": 5, "entryId": 3}
        else:
            body = {"ledgers": [{"ledgerId": 5, "entries": 4}]}
        b = json.dumps(body).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)


ThreadingHTTPServer(('127.0.0.1', PORT), H).serve_forever()
