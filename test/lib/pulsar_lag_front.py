#!/usr/bin/env python3
# pulsar_lag_front.py PORT TARGET_PORT FLAG LOG: a pass-through front for the Pulsar
# standalone (tests of the Pulsar lag). While the file FLAG holds
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
import re, sys, threading, time
from tcp_proxy import pass_through, read_head, serve_forever

PORT, TARGET, FLAG, LOG = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
lock = threading.Lock()


def mode():
    try:
        with open(FLAG) as f:
            return f.read().strip()
    except OSError:
        return ''


def refuse(c):
    c.sendall(b'HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
    c.close()


def serve(c):
    buf, path = read_head(c)
    if buf is None:
        return
    m = mode()
    with lock, open(LOG, 'a') as f:
        f.write('%.3f %s %s\n' % (time.time(), m or '-', path))
    if m in ('hangall', 'hangws') and path.startswith('/ws/'):
        return refuse(c)
    if m in ('hang', 'hangall', 'hangws') and path.endswith('/lastMessageId') or m == 'hangall' and path.endswith('/internalStats'):
        time.sleep(60)
        c.close()
        return
    if m == 'p1' and re.search(r'-partition-1([/?]|$)', path) and (
            path.startswith('/ws/') or path.endswith('/lastMessageId') or path.endswith('/internalStats')):
        return refuse(c)
    if m == 'p1ws' and path.startswith('/ws/') and re.search(r'-partition-1([/?]|$)', path):
        return refuse(c)
    pass_through(c, buf, path, TARGET)


serve_forever(PORT, serve)
