#!/usr/bin/env python3
"""Waiting in the server, against the server's own: the module's FIFO lock
(LOCK.ACQUIRE ... BLOCK / LOCK.RELEASE) side by side with the list mutex a
user builds without a module (BLPOP mutex / RPUSH mutex token), on ONE server
process with the module loaded, sides alternating run by run.

Scenarios, each on every server of the matrix:
  hot      WORKERS clients take turns on one lock with no work inside:
           acquire (blocking), release, again, for RUN_S seconds. Figures:
           server CPU per critical section (utime+stime of the server
           process over the run / sections, in µs), sections/s, fairness
           (most / fewest sections of one client).
  memory   N connections block on one key (the module: behind a held lock,
           SHARED, so one release serves them all; BLPOP: on an empty list).
           Figure: used_memory growth per blocked waiter over the same N
           idle connections (the connections themselves excluded).
  burst    Then all N are served at once (the lock released / N elements
           pushed), every reply read, the holds or the list deleted and the
           connections closed; the figure is used_memory 2 s later against
           before the connections were opened.
A third side, for the memory figures only, is a minimal module
(bench/floor/blockfloor.c, built here with cc) whose command only blocks
the client with RedisModule_BlockClient and is unblocked all at once: what
the server spends per module waiter whatever the module does.
Ratio = module / native (lower is better). Servers pinned to CPU 0 and the
clients to CPU 1 when run.sh passes the CPUs.

Usage: waiting.py --server BIN [--server BIN ...] --module libredislock.so
       [--out bench/waiting.md] [--server-cpus 0] [--client-cpus 1]
Knobs: BENCH_WAITING_REPS (runs per side, default 3), BENCH_SCALE.
Loopback only; every server is started and stopped here.
"""

import argparse
import multiprocessing as mp
import os
import resource
import socket
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from native import Server, ServerBench  # noqa: E402
from resp import Redis, encode  # noqa: E402
from stalls import wait_for  # noqa: E402

REPS = max(1, int(os.environ.get("BENCH_WAITING_REPS", "3")))
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
RUN_S = max(0.5, 3.0 * SCALE)
WORKERS = 8
WAITERS = max(100, int(5000 * SCALE))
HOT_KEY = "hot"


def _pin(cpus):
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def _hot_worker(side, idx, port, start_at, end_at, cpus, out):
    _pin(cpus)
    r = Redis(port)
    token = "w%d" % idx
    sections = 0
    errors = []
    try:
        while time.monotonic() < start_at:
            time.sleep(0.0005)
        while time.monotonic() < end_at:
            if side == "module":
                rep = r.call("LOCK.ACQUIRE", HOT_KEY, token, "PX", 10000, "BLOCK", 5000)
                if rep is None:
                    errors.append("timed out")
                    continue
                ok = r.call("LOCK.RELEASE", HOT_KEY, token)
                if ok != 1:
                    errors.append("release replied %r" % (ok,))
            else:
                rep = r.call("BLPOP", HOT_KEY, 5)
                if rep is None:
                    errors.append("timed out")
                    continue
                r.call("RPUSH", HOT_KEY, rep[1])
            sections += 1
    except Exception as e:  # reported, not hidden
        errors.append(repr(e))
    finally:
        r.close()
    out.put((idx, sections, errors))


def hot_run(server, side, cpus):
    c = server.c
    c.call("DEL", HOT_KEY)
    if side == "native":
        c.call("RPUSH", HOT_KEY, "token")
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    start_at = time.monotonic() + 0.3
    end_at = start_at + RUN_S
    procs = [ctx.Process(target=_hot_worker, args=(side, i, server.port, start_at, end_at, cpus, out))
             for i in range(WORKERS)]
    for p in procs:
        p.start()
    while time.monotonic() < start_at:
        time.sleep(0.001)
    cpu0 = server.cpu()
    results = [out.get(timeout=RUN_S + 30) for _ in procs]
    cpu1 = server.cpu()
    for p in procs:
        p.join(timeout=10)
    counts = [n for _, n, _ in results]
    errors = [e for _, _, errs in results for e in errs]
    if errors:
        raise RuntimeError("%s: %s" % (side, errors[:3]))
    total = sum(counts)
    c.call("DEL", HOT_KEY)
    return {
        "us_per_section": (cpu1 - cpu0) * 1e6 / total,
        "rate": total / RUN_S,
        "fairness": max(counts) / max(1, min(counts)),
    }


def used_memory(c):
    return int(c.info("memory")["used_memory"])


def settle_memory(c):
    """used_memory once two reads 100 ms apart agree within 64 KB."""
    last = used_memory(c)
    for _ in range(50):
        time.sleep(0.1)
        now = used_memory(c)
        if abs(now - last) < 65536:
            return now
        last = now
    return last


def blocked_clients(c):
    return int(c.info("clients")["blocked_clients"])


def read_reply(sock_file):
    """Reads one reply off a raw connection (enough of RESP for these)."""
    line = sock_file.readline()
    if line[:1] == b"*":
        for _ in range(int(line[1:-2])):
            read_reply(sock_file)
    elif line[:1] == b"$" and int(line[1:-2]) >= 0:
        sock_file.read(int(line[1:-2]) + 2)
    elif not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed")


def memory_run(server, side):
    """(bytes per blocked waiter, bytes still allocated 2 s after the burst)."""
    c = server.c
    c.call("DEL", "wm")
    before = settle_memory(c)
    socks = []
    try:
        for _ in range(WAITERS):
            s = socket.create_connection(("127.0.0.1", server.port))
            socks.append((s, s.makefile("rb")))
        wait_for("the connections", lambda: int(c.info("clients")["connected_clients"]) > WAITERS)
        if side == "module":
            c.call("LOCK.ACQUIRE", "wm", "holder", "PX", 600000)
        base = settle_memory(c)
        for i, (s, _) in enumerate(socks):
            if side == "module":
                s.sendall(encode(["LOCK.ACQUIRE", "wm", "t%d" % i, "PX", 600000, "SHARED", "BLOCK", 0]))
            elif side == "floor":
                s.sendall(encode(["FLOOR.WAIT"]))
            else:
                s.sendall(encode(["BLPOP", "wm", 0]))
        wait_for("the waiters", lambda: blocked_clients(c) >= WAITERS)
        blocked = settle_memory(c)
        if side == "module":
            c.call("LOCK.RELEASE", "wm", "holder")
        elif side == "floor":
            c.call("FLOOR.SERVE")
        else:
            for i in range(0, WAITERS, 1000):
                c.call("RPUSH", "wm", *range(i, min(i + 1000, WAITERS)))
        for _, f in socks:
            read_reply(f)
        c.call("DEL", "wm")
    finally:
        for s, f in socks:
            f.close()
            s.close()
    # Served, their locks or list gone, their connections closed: what is
    # left 2 s later is what serving them kept.
    wait_for("the connections to close", lambda: int(c.info("clients")["connected_clients"]) <= 2)
    time.sleep(2.0)
    return (blocked - base) / WAITERS, used_memory(c) - before


def ratio(mod, nat):
    return mod / nat if nat else float("nan")


def build_floor(work, name="blockfloor"):
    """Compiles bench/floor/NAME.c against the module API header of the
    redis-module crate the module is built with."""
    import json
    import subprocess
    meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1"], cwd=os.path.dirname(HERE),
                                     capture_output=True, text=True, check=True).stdout)
    manifest = next(p["manifest_path"] for p in meta["packages"] if p["name"] == "redis-module")
    include = os.path.join(os.path.dirname(manifest), "src", "include")
    out = os.path.join(work, name + ".so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-I", include, "-o", out,
                    os.path.join(HERE, "floor", name + ".c")], check=True)
    return out


def bench_server(binary, module, floor, work, server_cpus, client_cpus):
    version = ServerBench.short_name(os.popen("%s --version" % binary).read().strip())
    rows = []
    hot = {"module": [], "native": []}
    mem = {"module": [], "native": [], "floor": []}
    for rep in range(REPS):
        for side in (("module", "native", "floor") if rep % 2 == 0 else ("floor", "native", "module")):
            s = Server(binary, module, work, "waiting", server_cpus,
                       ["--maxclients", str(WAITERS + 100), "--loadmodule", floor])
            try:
                if side != "floor":
                    hot[side].append(hot_run(s, side, client_cpus))
                mem[side].append(memory_run(s, side))
            finally:
                s.stop()
            print("[%s] run %d %s: hot %s, memory %s" % (
                version, rep + 1, side, hot[side][-1] if side in hot else "-", mem[side][-1]), flush=True)

    def med(values):
        return statistics.median(values)

    def row(figure, mod_values, nat_values, fmt, target):
        m, n = med(mod_values), med(nat_values)
        r = ratio(m, n)
        rows.append("| %s | %s | %s | %.2f | %s |" % (figure, fmt(m), fmt(n), r, target(r, m, n)))

    def met(limit):
        return lambda r, m, n: ("≤ %.2f: met" % limit) if r <= limit else ("≤ %.2f: **not met**" % limit)

    row("hot lock, %d clients, no work: server CPU per section (µs)" % WORKERS,
        [h["us_per_section"] for h in hot["module"]], [h["us_per_section"] for h in hot["native"]],
        lambda v: "%.1f" % v, met(1.1))
    row("hot lock: sections/s", [h["rate"] for h in hot["module"]], [h["rate"] for h in hot["native"]],
        lambda v: "{:,.0f}".format(v), lambda r, m, n: "")
    row("hot lock: fairness (most / fewest sections per client)",
        [h["fairness"] for h in hot["module"]], [h["fairness"] for h in hot["native"]],
        lambda v: "%.3f" % v, lambda r, m, n: ("module ≤ 1.05: met" if m <= 1.05 else "module ≤ 1.05: **not met**"))
    row("memory per blocked waiter (%s waiters, bytes)" % "{:,}".format(WAITERS),
        [m[0] for m in mem["module"]], [m[0] for m in mem["native"]], lambda v: "{:,.0f}".format(v), met(1.2))
    row("memory per blocked waiter: against a module that only blocks (the API's floor)",
        [m[0] for m in mem["module"]], [m[0] for m in mem["floor"]], lambda v: "{:,.0f}".format(v), met(1.1))

    def kept(values):
        return med([m[1] for m in values])

    rows.append("| used_memory 2 s after the %s waiters were served and gone, over before (bytes) | %s | %s | "
                "| module within 5 MB: %s |" % (
                    "{:,}".format(WAITERS), "{:,.0f}".format(kept(mem["module"])),
                    "{:,.0f}".format(kept(mem["native"])),
                    "met" if kept(mem["module"]) <= 5 * 2**20 else "**not met**"))
    rows.append("| the same, against the module that only blocks | %s | %s (floor) | | module's share %s |" % (
        "{:,.0f}".format(kept(mem["module"])), "{:,.0f}".format(kept(mem["floor"])),
        "{:,.0f}".format(kept(mem["module"]) - kept(mem["floor"]))))
    return version, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", action="append", required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "waiting.md"))
    ap.add_argument("--server-cpus", default="")
    ap.add_argument("--client-cpus", default="")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < WAITERS + 500:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, WAITERS + 1000), hard))
    work = tempfile.mkdtemp(prefix="redislock-waiting.")
    floor = build_floor(work)
    lines = [
        "# Waiting: the module against a BLPOP mutex",
        "",
        "Written by `bench/waiting.py` (`make bench`, or `BENCH_ONLY=waiting bench/run.sh`): both sides on one",
        "server process with the module loaded, %d runs per side, alternating; medians. Module side:" % REPS,
        "`LOCK.ACQUIRE hot <token> PX 10000 BLOCK 5000` then `LOCK.RELEASE`; native side: `BLPOP hot 5` then",
        "`RPUSH hot <token>`. Ratio = module / native.",
        "",
    ]
    for binary in a.server:
        version, rows = bench_server(binary, a.module, floor, work, a.server_cpus, a.client_cpus)
        lines += ["## %s" % version, "", "| figure | module | BLPOP | ratio | target |", "|---|---|---|---|---|"]
        lines += rows + [""]
    with open(a.out, "w") as f:
        f.write("\n".join(lines))
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
