# Admin API answers; the WebSocket upgrade is accepted on TCP and never answered (a hung WS service).
import sys, time, json
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path.startswith('/ws/'):
            time.sleep(3600); return
        if self.path.endswith('/partitions'): body = {"partitions": 0}
        elif self.path.endswith('/lastMessageId'): body = {"ledgerId": 5, "entryId": 3}
        else: body = {"ledgers": [{"ledgerId": 5}]}
        b = json.dumps(body).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
