#!/usr/bin/env python3
"""A stand-in for the mailer HTTP worker, to work on web/mailer-dashboard.*
without PostgreSQL or Kafka: serves the page's files and canned /api JSON
whose counters move every second.

    python3 test/lib/dashboard_fixture.py PORT [--token T]

Jobs: "orders" (window + aggregate, running), "audit" (stateless, a last
error with markup in it, dead letters), and "flaky", which exists only during
the first 20 s of each minute (a job that appears and disappears). The API
answers 500 during seconds 50-52 of each minute, to see the error banner.
"""
import json
import math
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

WEB = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'web')
START = time.time()
TOKEN = sys.argv[sys.argv.index('--token') + 1] if '--token' in sys.argv else None
FILES = {'/': 'mailer-dashboard.html', '/index.html': 'mailer-dashboard.html',
         '/mailer-dashboard.js': 'mailer-dashboard.js',
         '/mailer-dashboard.css': 'mailer-dashboard.css'}
TYPES = {'html': 'text/html; charset=utf-8', 'js': 'text/javascript; charset=utf-8',
         'css': 'text/css; charset=utf-8'}


def iso(t):
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(t))


def counters(name, t):
    """Cumulative counters of a job at unix time t (deterministic)."""
    age = max(0.0, t - START + 30)
    speed = {'orders': 120, 'audit': 40, 'flaky': 10}[name]
    rin = int(age * speed + 3 * speed * math.sin(age / 5))  # monotone, not flat
    dead = int(age / 9) if name == 'audit' else 0
    late = int(age / 13) if name == 'orders' else 0
    filtered = rin // 20
    out = rin - filtered - dead - late if name != 'orders' else rin // 10
    return {'records_in': rin, 'records_accepted': rin - filtered - dead - late,
            'records_out': out, 'records_filtered': filtered,
            'records_dead_lettered': dead, 'records_skipped': 0, 'records_late': late}


# --flaky-polls A:B: "flaky" is listed only by the A-th to B-th /api/jobs
# answers (1-based), to watch a job appear or disappear under a headless
# browser's virtual time, which runs far ahead of the wall clock.
FLAKY_POLLS = (tuple(int(x) for x in sys.argv[sys.argv.index('--flaky-polls') + 1].split(':'))
               if '--flaky-polls' in sys.argv else None)
list_polls = 0


def exists(name, t):
    if name != 'flaky':
        return True
    if FLAKY_POLLS:
        return FLAKY_POLLS[0] <= list_polls <= FLAKY_POLLS[1]
    return int(t) % 60 < 20


def summary(name, t):
    m = counters(name, t)
    has_wm = name == 'orders'
    m.update({'input_rate': 120.0, 'consumer_lag': int(50 + 40 * ((t % 11) / 11)),
              'watermark': iso(t - 3) if has_wm else None,
              'watermark_delay_seconds': 3.0 + (t % 5) / 2 if has_wm else None,
              'last_checkpoint_epoch': int(t - START) // 2 + 1,
              'last_checkpoint_at': iso(t - 1),
              'last_checkpoint_ms': 12 + int(t) % 9,
              'state_bytes': 123456 if has_wm else None})
    err = None
    if name == 'audit':
        err = 'value is not JSON: <img src=x onerror=alert(1)> "quoted"'
    return {'name': name, 'state': {'orders': 'running', 'audit': 'waiting', 'flaky': 'restarting'}[name],
            'waiting_for': 'table' if name == 'audit' else None, 'desired_state': 'running',
            'pid': 4242, 'restarts': 3 if name == 'flaky' else 0,
            'last_error': err, 'last_error_at': iso(START) if err else None,
            'parallelism': 2 if name == 'orders' else 1, 'created_at': iso(START - 3600),
            'metrics': m}


def detail(name, t):
    d = summary(name, t)
    m = d['metrics']
    steps_out = m['records_in'] - m['records_filtered'] - m['records_dead_lettered'] - m['records_skipped']
    topo = [{'stage': 'source', 'label': 'kafka: %s (4 partitions)' % name, 'in': None, 'out': m['records_in']},
            {'stage': 'steps', 'label': 'filter, map', 'in': m['records_in'], 'out': steps_out,
             'dropped': m['records_in'] - steps_out}]
    if name == 'orders':
        topo += [{'stage': 'key_by', 'label': 'customer_id', 'in': steps_out, 'out': steps_out},
                 {'stage': 'window', 'label': 'tumbling 1 minute', 'in': steps_out, 'out': steps_out,
                  'late': m['records_late']},
                 {'stage': 'aggregate', 'label': 'count, sum(total)', 'in': steps_out, 'out': m['records_out']}]
    topo.append({'stage': 'sink', 'label': 'table public.%s (upsert)' % name, 'in': m['records_out'],
                 'out': m['records_out']})
    now = int(t)
    ats = [s for s in range(now - 599, now + 1) if s >= START - 120 and exists(name, s)]
    hist = {'interval_seconds': 1, 'at': ats or [now]}
    for k in ('records_in', 'records_out', 'records_dead_lettered', 'records_late'):
        hist[k] = [counters(name, s)[k] for s in ats]
    hist['consumer_lag'] = [int(50 + 40 * ((s % 11) / 11)) for s in ats]
    hist['watermark_delay_seconds'] = [(3.0 + (s % 5) / 2 if s % 40 else None) if name == 'orders' else None
                                       for s in ats]
    hist['last_checkpoint_ms'] = [12 + s % 9 for s in ats]
    hist['restarts'] = [d['restarts'] if s > START - 60 else 0 for s in ats]
    d.update({'plan': 'source kafka %s\n  -> filter, map\n  -> sink table public.%s' % (name, name),
              'topology': topo,
              'partitions': [{'subtask': p % 2, 'topic': name, 'partition': p, 'position': m['records_in'] // 4,
                              'end_offset': m['records_in'] // 4 + 12, 'lag': 12, 'records_in': m['records_in'] // 4,
                              'watermark': iso(t - 3), 'idle': p == 3, 'ahead': False, 'offsets_skipped': 0} for p in range(4)],
              'subtasks': [{'subtask': 0, 'pid': 4242, 'state': d['state'], 'records_in': m['records_in'],
                            'records_out': m['records_out'], 'last_error': d['last_error']}],
              'checkpoint_duration': {'bounds': [0.005, 0.01], 'counts': [1, 2, 3], 'count': 3, 'sum': 0.02},
              'history': hist})
    return d


class Handler(BaseHTTPRequestHandler):
    def send(self, code, body, ctype='application/json', extra=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(data)))
        self.send_header('Cache-Control', 'no-store')
        self.send_header('X-Content-Type-Options', 'nosniff')
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split('?')[0]
        if path in FILES:
            name = FILES[path]
            with open(os.path.join(WEB, name), 'rb') as f:
                body = f.read()
            extra = [('Content-Security-Policy', "default-src 'self'")] if name.endswith('html') else []
            return self.send(200, body, TYPES[name.rsplit('.', 1)[1]], extra)
        if TOKEN and self.headers.get('Authorization') != 'Bearer ' + TOKEN:
            return self.send(401, {'error': 'unauthorized'}, extra=[('WWW-Authenticate', 'Bearer')])
        t = time.time()
        if 50 <= int(t) % 60 < 53:
            return self.send(500, {'error': 'internal error'})
        names = [n for n in ('orders', 'audit', 'flaky') if exists(n, t)]
        if path == '/api/jobs':
            global list_polls
            list_polls += 1
            names = [n for n in ('orders', 'audit', 'flaky') if exists(n, t)]
            return self.send(200, {'generated_at': iso(t), 'jobs': [summary(n, t) for n in names]})
        if path.startswith('/api/jobs/'):
            name = unquote(path[len('/api/jobs/'):])
            if name in names:
                return self.send(200, detail(name, t))
            return self.send(404, {'error': 'no job named "%s"' % name})
        return self.send(404, {'error': 'not found'})

    def log_message(self, *args):
        pass


if __name__ == '__main__':
    ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), Handler).serve_forever()
