# Admin API answers (N partitions); every WebSocket upgrade is refused at once (HTTP 404).
import sys, json
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path.startswith('/ws/'):
            self.send_response(404); self.send_header('Content-Length', '0'); self.end_headers(); return
        if self.path.endswith('/partitions'): body = {"partitions": int(sys.argv[2])}
        elif self.path.endswith('/lastMessageId'): body = {"ledgerId": 5, "entryId": 3}
        else: body = {"ledgers": [{"ledgerId": 5}]}
        b = json.dumps(body).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
