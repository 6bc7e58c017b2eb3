#!/usr/bin/env python3
# tcp_proxy.py LISTEN_PORT TARGET_HOST TARGET_PORT: forward every TCP
# connection on 127.0.0.1:LISTEN_PORT to the target, both ways, until
# killed. The tests put it between a job and the Pulsar standalone: killing
# it takes the broker away at once (connections refused and reset), without
# the 20 s a broker restart takes.
import socket
import sys
import threading


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def read_head(c):
    """An HTTP request's head read from c, and its path; (None, None) if c closed first."""
    buf = b''
    while b'\r\n\r\n' not in buf:
        d = c.recv(65536)
        if not d:
            c.close()
            return None, None
        buf += d
    return buf, buf.split(b'\r\n', 1)[0].decode().split(' ')[1]


def pass_through(c, buf, path, target):
    """The request (head buf) passed to 127.0.0.1:target, and the reply back, both ways until closed."""
    t = socket.create_connection(('127.0.0.1', target))
    # One request per connection, so that each is seen by the front.
    if not path.startswith('/ws/'):
        buf = buf.replace(b'\r\n\r\n', b'\r\nConnection: close\r\n\r\n', 1)
    t.sendall(buf)
    threading.Thread(target=pipe, args=(c, t), daemon=True).start()
    pipe(t, c)


def serve_forever(port, serve):
    """serve(connection) in a thread for every connection on 127.0.0.1:port."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(('127.0.0.1', port))
    listener.listen(64)
    while True:
        c, _ = listener.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def main():
    port, host, target = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(('127.0.0.1', port))
    listener.listen(128)
    print('ready', flush=True)
    while True:
        client, _ = listener.accept()
        try:
            server = socket.create_connection((host, target), timeout=5)
            server.settimeout(None)
        except OSError:
            client.close()
            continue
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


if __name__ == '__main__':
    main()
