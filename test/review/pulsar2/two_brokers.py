#!/usr/bin/env python3
# two_brokers.py PORT TARGET_PORT OTHER: a front for the standalone that acts as
# one broker of a cluster of two, where partition OTHER of every topic is owned
# by the other broker: Pulsar's topic-level admin calls (lastMessageId,
# internalStats) on it answer 307 to the owner, as a real broker does; the
# partition metadata and the WebSocket API (any broker serves them) pass.
import socket, sys, threading
PORT, TARGET, OTHER = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            b.sendall(d)
    except OSError: pass
    for s in (a, b):
        try: s.shutdown(socket.SHUT_RDWR)
        except OSError: pass

def serve(c):
    buf = b''
    while b'\r\n\r\n' not in buf:
        d = c.recv(65536)
        if not d: c.close(); return
        buf += d
    line = buf.split(b'\r\n', 1)[0].decode()
    path = line.split(' ')[1]
    if ('-partition-%s/' % OTHER) in path and (path.endswith('/lastMessageId') or path.endswith('/internalStats')):
        c.sendall(b'HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:1' + path.encode() +
                  b'\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
        c.close(); return
    t = socket.create_connection(('127.0.0.1', TARGET))
    if not path.startswith('/ws/'):
        buf = buf.replace(b'\r\n\r\n', b'\r\nConnection: close\r\n\r\n', 1)
    t.sendall(buf)
    threading.Thread(target=pipe, args=(c, t), daemon=True).start()
    pipe(t, c)

l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind(('127.0.0.1', PORT)); l.listen(64)
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
