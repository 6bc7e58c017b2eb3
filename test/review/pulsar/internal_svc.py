# An internal HTTP service on loopback (think: a metadata or admin endpoint), not Pulsar.
import sys
from http.server import HTTPServer, BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): sys.stderr.write("GOT %s %s\n" % (self.command, self.path)); sys.stderr.flush()
    def do_GET(self):
        b = b'{"internal":"db_password=hunter2; aws_secret=AKIA-EXAMPLE", "path":"' + self.path.encode() + b'"}'
        self.send_response(403); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
