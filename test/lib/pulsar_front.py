#!/usr/bin/env python3
# pulsar_front.py PORT TARGET_PORT PARTITION LOCATION [LOG]: a front for the
# Pulsar standalone on TARGET_PORT that acts as one broker of a cluster
# where PARTITION of every topic is owned by another broker: the
# topic-level admin calls of that partition (lastMessageId, internalStats)
# are answered 307 Location: LOCATION, "{path}" in it replaced by the
# request's path, as a broker that does not own a topic answers (Pulsar
# adds ?authoritative=false|true). Anything else, the partition metadata
# and the WebSocket API (any broker serves them), passes through. Each
# request's path is appended to LOG when given.
import sys, threading
from tcp_proxy import pass_through, read_head, serve_forever

PORT, TARGET, OTHER, LOCATION = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
LOG = sys.argv[5] if len(sys.argv) > 5 else None
lock = threading.Lock()


def serve(c):
    buf, path = read_head(c)
    if buf is None:
        return
    if LOG:
        with lock, open(LOG, 'a') as f:
            f.write(path + '\n')
    if ('-partition-%s/' % OTHER) in path and (path.endswith('/lastMessageId') or path.endswith('/internalStats')):
        c.sendall(b'HTTP/1.1 307 Temporary Redirect\r\nLocation: ' + LOCATION.replace('{path}', path).encode() +
                  b'\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
        c.close()
        return
    pass_through(c, buf, path, TARGET)


serve_forever(PORT, serve)
