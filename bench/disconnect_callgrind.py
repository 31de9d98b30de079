#!/usr/bin/env python3
"""Instructions per waiter let go when the process holding N waiters'
connections is killed (by hand, not part of `make bench`; needs valgrind).

For each side, a server runs under callgrind with the module and the
blocking floor (bench/floor/blockfloor.c) loaded; N connections block as
bench/waitstalls.py's disconnect scenario has them (exclusive, shared,
semaphore, multi: the module's waiters of each kind behind a held lock;
floor: FLOOR.WAIT; native: BLPOP). Counting starts just before the holding
process is killed and ends 0.5 s after the server has no blocked client and
the module has let every closed wait go. Instruction counts do not move with
other load on the machine (the batching of the closed connections into
turns of the event loop does, a little). Prints one line per side:
instructions per waiter in all, in the module's disconnect callback, in the
server's freeing of released module handles (moduleHandleBlockedClients)
and in the module's timer passes.

Usage: disconnect_callgrind.py --server BIN --module libredislock.so
       [--sides exclusive,shared,semaphore,multi,floor,native] [--waiters 2000]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from native import free_port  # noqa: E402
from resp import Redis  # noqa: E402
from stalls import wait_for  # noqa: E402
from waiting import build_floor  # noqa: E402
from waitstalls import DISCONNECT_SIDES, Holder, _clients, _let_go, _waiter_commands  # noqa: E402

PARTS = (("total", "PROGRAM TOTALS"), ("callback", "redislock::server::waiting::on_disconnect"),
         ("freeing", "moduleHandleBlockedClients"), ("timer", "moduleTimerHandler"))


def inclusive(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    got = {}
    for name, symbol in PARTS:
        for line in out.splitlines():
            if symbol in line:
                got[name] = int(re.match(r"\s*([\d,]+)", line).group(1).replace(",", ""))
                break
    return got


def run(server, module, floor, side, n, work):
    port = free_port()
    out = os.path.join(work, "callgrind.%s" % side)
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out,
                             server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--maxclients", str(n + 200), "--loadmodule", module, "--loadmodule", floor],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                c = Redis(port)
                c.call("PING")
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("the server under callgrind did not start")

        def control(*args):
            subprocess.run(["callgrind_control"] + list(args) + [str(proc.pid)], capture_output=True, check=True)

        with Holder(port, _waiter_commands(c, side, n), "") as holder:
            wait_for("the waiters", lambda: _clients(c)[1] >= n, timeout=300)
            control("-i", "on")
            control("-z")
            holder.kill()
            wait_for("the waiters to go", lambda: _clients(c) == (1, 0) and _let_go(c) == 0, timeout=300)
            time.sleep(0.5)
            control("-d", "gone")
            control("-i", "off")
    finally:
        proc.terminate()
        proc.wait()
    dump = [f for f in os.listdir(work) if f.startswith("callgrind.%s." % side) and f.endswith(".1")]
    return inclusive(os.path.join(work, dump[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--sides", default=",".join(DISCONNECT_SIDES))
    ap.add_argument("--waiters", type=int, default=2000)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="redislock-disconnect-cg.")
    floor = build_floor(work, "blockfloor")
    print("instructions per waiter let go, %d waiters: total / module's disconnect callback / "
          "the server freeing released handles / the module's timer passes" % a.waiters)
    for side in a.sides.split(","):
        got = run(a.server, os.path.abspath(a.module), floor, side, a.waiters, work)
        print("%-10s %s" % (side, " / ".join("%.0f" % (got.get(name, 0) / a.waiters) for name, _ in PARTS)),
              flush=True)


if __name__ == "__main__":
    main()
