#!/usr/bin/env python3
# pulsar_lag_fake_stats.py PORT: a fake Pulsar admin API for the lag's JSON
# arithmetic (review probe): one non-partitioned topic whose lastMessageId
# is 9:0 and whose internalStats lists ledgers of 2^63-1 entries each (a
# broken or hostile broker); WebSocket upgrades are refused (404), so the
# reader never reads and stays at "earliest".
import sys
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

PORT = int(sys.argv[1])
BIG = 9223372036854775807


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        p = self.path.split('?')[0]
        if p.endswith('/partitions'):
            body = '{"partitions":0}'
        elif p.endswith('/lastMessageId'):
            body = '{"ledgerId":9,"entryId":0,"partitionIndex":-1,"batchIndex":-1}'
        elif p.endswith('/internalStats'):
            body = ('{"lastConfirmedEntry":"9:0","ledgers":[{"ledgerId":5,"entries":%d},{"ledgerId":6,"entries":%d},'
                    '{"ledgerId":7,"entries":2},{"ledgerId":9,"entries":0}],"cursors":{}}' % (BIG, BIG))
        else:
            self.send_response(404)
            self.send_header('Content-Length', '0')
            self.end_headers()
            return
        b = body.encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)


ThreadingHTTPServer(('127.0.0.1', PORT), H).serve_forever()
