#!/usr/bin/env python3
"""Instructions per key, for bench/million.py's four sides, counted by
valgrind's callgrind: creating N keys (the same commands as million.py,
through one connection) and `DEBUG RELOAD` of them (a save and a load),
the whole server counted. Instruction counts do not move with other load,
which the CPU times of million.py do on a shared machine.

Usage: million_callgrind.py --server BIN [--server BIN ...] --module libredislock.so
       [--keys 50000]
Prints one line per server and figure. Not part of `make bench` (a few
minutes per server); run it by hand.
"""

import argparse
import os
import socket
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from handoff_callgrind import Profiled, dumps, profile  # noqa: E402
from million import SIDES  # noqa: E402
from resp import encode  # noqa: E402
from waiting import build_floor  # noqa: E402


def fill(port, side, keys):
    """Sends the side's command for every key, then waits for a PING's answer."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"".join(encode(SIDES[side](b"lock:%012d" % i)) for i in range(keys)))
        s.sendall(encode(["PING"]))
        got = b""
        while not got.endswith(b"+PONG\r\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                raise RuntimeError("the server closed the connection")
            got = got[-16:] + chunk


def measure(server, module, keys):
    work = tempfile.mkdtemp()
    floor = build_floor(work, "typefloor")
    p = Profiled(server, module, floor, work, ["--enable-debug-command", "yes", "--dir", work])
    try:
        for side in SIDES:
            name = side.replace(" ", "")
            p.c.call("FLUSHALL")
            p.control("-i", "on")
            p.control("-z")
            fill(p.port, side, keys)
            p.control("-d", "create-" + name)
            p.control("-i", "off")
            if int(p.c.call("DBSIZE")) != keys:
                raise RuntimeError("%s: %s keys, not %d" % (side, p.c.call("DBSIZE"), keys))
            p.control("-i", "on")
            p.control("-z")
            p.c.call("DEBUG", "RELOAD")
            p.control("-d", "reload-" + name)
            p.control("-i", "off")
    finally:
        p.stop()
    return {k: profile(path, False)[0] / keys for k, path in dumps(work).items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", action="append", required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--keys", type=int, default=50000)
    args = ap.parse_args()
    for server in args.server:
        per_key = measure(server, os.path.abspath(args.module), args.keys)
        for what in ("create", "reload"):
            sides = {s: per_key["%s-%s" % (what, s.replace(" ", ""))] for s in SIDES}
            m = sides["module"]
            print("%s %s: %s; module / strings %.2f, module / floor %.2f, module / lock floor %.2f, "
                  "floor / strings %.2f, lock floor / strings %.2f" % (
                      server, what,
                      ", ".join("%s %d" % (s, round(v)) for s, v in sides.items()),
                      m / sides["strings"], m / sides["floor"], m / sides["lock floor"],
                      sides["floor"] / sides["strings"], sides["lock floor"] / sides["strings"]),
                  flush=True)


if __name__ == "__main__":
    main()
