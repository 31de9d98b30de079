"""A tiny blocking RESP2 client over a TCP socket (stdlib only).

Enough for control commands (INFO, FLUSHALL, SCRIPT LOAD, ...) and for the
contention driver: one request, one reply, errors raised as RespError.
"""

import socket


def free_port():
    """A free TCP port on the loopback address."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class RespError(Exception):
    """An error reply from the server."""


def encode(args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        else:
            b = str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


class Redis:
    def __init__(self, port, host="127.0.0.1", timeout=None):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rf = self.sock.makefile("rb")

    def close(self):
        try:
            self.rf.close()
            self.sock.close()
        except OSError:
            pass

    def send(self, *args):
        self.sock.sendall(encode(args))

    def read(self):
        line = self.rf.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by server")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body.decode()
        if kind == b"-":
            raise RespError(body.decode(errors="replace"))
        if kind == b":":
            return int(body)
        if kind == b"$":
            n = int(body)
            if n < 0:
                return None
            data = self.rf.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(body)
            if n < 0:
                return None
            return [self.read() for _ in range(n)]
        raise ConnectionError("unexpected reply %r" % line[:40])

    def call(self, *args):
        self.send(*args)
        return self.read()

    def info(self, section=""):
        """INFO as a dict of strings (all sections merged)."""
        raw = self.call("INFO", section) if section else self.call("INFO")
        out = {}
        for line in raw.decode().splitlines():
            if line and not line.startswith("#") and ":" in line:
                k, v = line.split(":", 1)
                out[k] = v
        return out
