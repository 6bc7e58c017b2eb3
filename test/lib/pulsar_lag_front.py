#!/usr/bin/env python3
# pulsar_lag_front.py PORT TARGET_PORT FLAG LOG: a pass-through front for the Pulsar
# standalone (review probes of the Pulsar lag). While the file FLAG holds
# "hang", every lastMessageId request is held 60 s unanswered (a broker
# whose bookie read is slow: lastMessageId reads the last entry, the
# partition metadata does not); while it holds "p1", partition 1's
# lastMessageId and internalStats answer 500 and its WebSocket reader is
# refused (a partition whose broker is away while the others' answer);
# "p1ws": only partition 1's WebSocket reader is refused (a stuck reader);
# "hangall": lastMessageId and internalStats hang, every WebSocket reader
# is refused, the partition metadata answers (the owner broker hung, the
# metadata served by another); "hangws": lastMessageId hangs and every
# WebSocket reader is refused, internalStats and the metadata answer.
# Each request's time and path go to LOG.
import os, re, socket, sys, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from tcp_proxy import pipe

PORT, TARGET, FLAG, LOG = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
lock = threading.Lock()


def mode():
    try:
        with open(FLAG) as f:
            return f.read().strip()
    except OSError:
        return ''


def serve(c):
    buf = b''
    while b'\r\n\r\n' not in buf:
        d = c.recv(65536)
        if not d:
            c.close()
            return
        buf += d
    path = buf.split(b'\r\n', 1)[0].decode().split(' ')[1]
    m = mode()
    with lock, open(LOG, 'a') as f:
        f.write('%.3f %s %s\n' % (time.time(), m or '-', path))
    if m in ('hangall', 'hangws') and path.startswith('/ws/'):
        c.sendall(b'HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
        c.close()
        return
    if m in ('hang', 'hangall', 'hangws') and path.endswith('/lastMessageId') or m == 'hangall' and path.endswith('/internalStats'):
        time.sleep(60)
        c.close()
        return
    if m == 'p1' and re.search(r'-partition-1([/?]|$)', path) and (
            path.startswith('/ws/') or path.endswith('/lastMessageId') or path.endswith('/internalStats')):
        c.sendall(b'HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
        c.close()
        return
    if m == 'p1ws' and path.startswith('/ws/') and re.search(r'-partition-1([/?]|$)', path):
        c.sendall(b'HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
        c.close()
        return
    t = socket.create_connection(('127.0.0.1', TARGET))
    if not path.startswith('/ws/'):
        buf = buf.replace(b'\r\n\r\n', b'\r\nConnection: close\r\n\r\n', 1)
    t.sendall(buf)
    threading.Thread(target=pipe, args=(c, t), daemon=True).start()
    pipe(t, c)


l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('127.0.0.1', PORT))
l.listen(64)
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
