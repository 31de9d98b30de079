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
  pool     The burst again with more waiters (10k, 20k and 50k, as far as
           the limit on open files allows), the module against the module
           that only blocks (below), once per size: how what the server
           keeps grows, and the module's share of it.
  disconnect
           Worst PING from another connection, and the server's main
           thread's CPU, while N waiters' connections close because the
           process holding them is killed, the server running
           (bench/waitstalls.py): the module's exclusive, shared, semaphore
           and multi-key waiters against the floor (blockfloor.c, below) and
           BLPOP waiters, DISCONNECT_REPS runs per side on fresh servers,
           alternating: median and max.
  storm    Worst PING while many leases end together, some with a waiter,
           against plain keys and the floor's keys (bench/waitstalls.py),
           STALL_REPS runs per side on fresh servers: median and max.
Floors, minimal modules built here with cc (bench/floor/): for the hot lock,
lockfloor.c, the least a FIFO lock in a module can be (FLOOR.ACQUIRE /
FLOOR.RELEASE: the owner in a module-type value with a lease, waiters
blocked with RedisModule_BlockClient and handed the lock by the release,
the grant replicated with RedisModule_Replicate) — what the module API costs
a blocking handoff — and the same lock in full (FLOOR.XACQUIRE /
FLOOR.XRELEASE: the module's arguments, a timeout, the token redacted,
keyspace events), hot runs only; for memory, blockfloor.c, whose command only blocks the
client and is unblocked all at once — what the server spends per module
waiter whatever the module does; for keys that expire, typefloor.c, a
module type that keeps only a token.
Ratio = module / native or module / floor (lower is better). Servers pinned
to CPU 0 and the clients to CPU 1 when run.sh passes the CPUs.

Usage: waiting.py --server BIN [--server BIN ...] --module libredislock.so
       [--out bench/waiting.md] [--server-cpus 0] [--client-cpus 1]
Knobs: BENCH_WAITING_REPS (runs per side, default 3), BENCH_WAITING_DISCONNECT_REPS
(default 6), BENCH_WAITING_STALL_REPS (default 5), BENCH_SCALE.
Loopback only; every server is started and stopped here.
"""

import argparse
import multiprocessing as mp
import os
import resource
import shutil
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
from waitstalls import DISCONNECT_SIDES, disconnect_run, storm_run  # noqa: E402

REPS = max(1, int(os.environ.get("BENCH_WAITING_REPS", "3")))
STALL_REPS = max(1, int(os.environ.get("BENCH_WAITING_STALL_REPS", "5")))
DISCONNECT_REPS = max(1, int(os.environ.get("BENCH_WAITING_DISCONNECT_REPS", "6")))
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
RUN_S = max(0.5, 3.0 * SCALE)
WORKERS = 8
WAITERS = max(100, int(5000 * SCALE))
HOT_KEY = "hot"
# Pool scaling: the burst with this many waiters, as far as the limit on
# open files allows (the server needs one per client, and this driver too).
POOL_WANTED = [max(1000, int(n * SCALE)) for n in (10_000, 20_000, 50_000)]
FD_HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
FD_SPARE = 600
POOL_MAX = FD_HARD - FD_SPARE if FD_HARD != resource.RLIM_INFINITY else POOL_WANTED[-1]
POOL_SIZES = sorted({min(n, POOL_MAX) for n in POOL_WANTED})
MAXCLIENTS = max([WAITERS] + POOL_SIZES) + 100
# Stalls: waiters whose connections close at once; leases that end together.
DISCONNECT_WAITERS = max(100, int(5000 * SCALE))
STORM_KEYS = max(10_000, int(200_000 * SCALE))
STORM_WAITERS = max(500, int(10_000 * SCALE))
STORM_LEAD_MS = max(2000, int(5000 * SCALE))
STALL_MARGIN_MS = 15.0


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
            if side in ("module", "floor", "full"):
                if side == "module":
                    rep = r.call("LOCK.ACQUIRE", HOT_KEY, token, "PX", 10000, "BLOCK", 5000)
                elif side == "full":
                    # The module's arguments, the server's timeout, redaction, events.
                    rep = r.call("FLOOR.XACQUIRE", HOT_KEY, token, "PX", 10000, "BLOCK", 5000)
                else:
                    # No deadline: the least (the lease of 10 s ends a wait that goes wrong).
                    rep = r.call("FLOOR.ACQUIRE", HOT_KEY, token, 0)
                if rep is None:
                    errors.append("timed out")
                    continue
                release = {"module": "LOCK.RELEASE", "floor": "FLOOR.RELEASE", "full": "FLOOR.XRELEASE"}[side]
                ok = r.call(release, HOT_KEY, token)
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


def memory_run(server, side, waiters=WAITERS):
    """(bytes per blocked waiter, bytes still allocated 2 s after the burst)."""
    c = server.c
    c.call("DEL", "wm")
    before = settle_memory(c)
    socks = []
    try:
        for _ in range(waiters):
            s = socket.create_connection(("127.0.0.1", server.port))
            socks.append((s, s.makefile("rb")))
        wait_for("the connections", lambda: int(c.info("clients")["connected_clients"]) > waiters)
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
        wait_for("the waiters", lambda: blocked_clients(c) >= waiters)
        blocked = settle_memory(c)
        if side == "module":
            c.call("LOCK.RELEASE", "wm", "holder")
        elif side == "floor":
            c.call("FLOOR.SERVE")
        else:
            for i in range(0, waiters, 1000):
                c.call("RPUSH", "wm", *range(i, min(i + 1000, waiters)))
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
    return (blocked - base) / waiters, used_memory(c) - before


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


def alternate(rep, sides):
    return sides if rep % 2 == 0 else sides[::-1]


def bench_server(binary, module, floors, work, server_cpus, client_cpus):
    version = ServerBench.short_name(os.popen("%s --version" % binary).read().strip())
    extra = ["--maxclients", str(MAXCLIENTS)]
    for floor in floors:
        extra += ["--loadmodule", floor]

    def on_fresh_server(fn):
        s = Server(binary, module, work, "waiting", server_cpus, extra)
        try:
            return fn(s)
        finally:
            s.stop()

    def log(what, side, value):
        print("[%s] %s %s: %s" % (version, what, side, value), flush=True)

    hot = {"module": [], "native": [], "floor": [], "full": []}
    mem = {"module": [], "native": [], "floor": []}
    for rep in range(REPS):
        for side in alternate(rep, ("module", "native", "floor", "full")):
            if side == "full":
                h = on_fresh_server(lambda s: hot_run(s, side, client_cpus))
                hot[side].append(h)
                log("run %d" % (rep + 1), side, "hot %s" % h)
                continue
            h, m = on_fresh_server(lambda s: (hot_run(s, side, client_cpus), memory_run(s, side)))
            hot[side].append(h)
            mem[side].append(m)
            log("run %d" % (rep + 1), side, "hot %s, memory %s" % (h, m))
    pool = {}
    for i, n in enumerate(POOL_SIZES):
        for side in alternate(i, ("module", "floor")):
            pool[(n, side)] = on_fresh_server(lambda s: memory_run(s, side, n))[1]
            log("pool %d" % n, side, pool[(n, side)])
    stalls = {("storm", side): [] for side in ("module", "native", "floor")}
    stalls.update({("disconnect", side): [] for side in DISCONNECT_SIDES})
    for rep in range(DISCONNECT_REPS):
        for side in alternate(rep, DISCONNECT_SIDES):
            got = on_fresh_server(lambda s: disconnect_run(s, side, DISCONNECT_WAITERS, client_cpus))
            stalls[("disconnect", side)].append(got)
            log("disconnect %d" % (rep + 1), side, "worst PING %.1f ms, server CPU %.1f ms" % got)
    for rep in range(STALL_REPS):
        for side in alternate(rep, ("module", "native", "floor")):
            got = on_fresh_server(lambda s: storm_run(s, side, STORM_KEYS, STORM_WAITERS, client_cpus,
                                                      STORM_LEAD_MS))
            stalls[("storm", side)].append(got)
            log("storm %d" % (rep + 1), side, "worst PING %.1f ms, done in %.2f s" % got)

    med = statistics.median
    rows = []

    def num(fmt):
        return (lambda v: fmt.format(v)) if "{" in fmt else (lambda v: fmt % v)

    def met(limit):
        return lambda r: ("≤ %.2f: met" % limit) if r <= limit else ("≤ %.2f: **not met**" % limit)

    def row(figure, a, b, fmt, target=lambda r: ""):
        m, n = med(a), med(b)
        r = ratio(m, n)
        rows.append("| %s | %s | %s | %.2f | %s |" % (figure, num(fmt)(m), num(fmt)(n), r, target(r)))

    def of(runs, what):
        return [x[what] for x in runs]

    cpu = "us_per_section"
    row("hot lock, %d clients, no work: server CPU per section (µs), module / BLPOP" % WORKERS,
        of(hot["module"], cpu), of(hot["native"], cpu), "%.1f", met(1.1))
    row("the same, module / lock floor (the module API's least for a FIFO lock)",
        of(hot["module"], cpu), of(hot["floor"], cpu), "%.1f")
    row("the same, lock floor / BLPOP", of(hot["floor"], cpu), of(hot["native"], cpu), "%.1f")
    row("the same, module / full lock floor (the module's arguments, a timeout, the token redacted, "
        "keyspace events)", of(hot["module"], cpu), of(hot["full"], cpu), "%.1f")
    row("the same, full lock floor / BLPOP", of(hot["full"], cpu), of(hot["native"], cpu), "%.1f")
    row("hot lock: sections/s, module / BLPOP", of(hot["module"], "rate"), of(hot["native"], "rate"), "{:,.0f}")
    row("hot lock: sections/s, module / lock floor", of(hot["module"], "rate"), of(hot["floor"], "rate"),
        "{:,.0f}")
    row("hot lock: fairness (most / fewest sections per client), module / BLPOP",
        of(hot["module"], "fairness"), of(hot["native"], "fairness"), "%.3f",
        lambda r: ("module ≤ 1.05: met" if med(of(hot["module"], "fairness")) <= 1.05
                   else "module ≤ 1.05: **not met**"))
    row("hot lock: fairness, lock floor", of(hot["floor"], "fairness"), of(hot["native"], "fairness"), "%.3f")
    row("memory per blocked waiter (%s waiters, bytes), module / BLPOP" % "{:,}".format(WAITERS),
        [m[0] for m in mem["module"]], [m[0] for m in mem["native"]], "{:,.0f}", met(1.2))
    row("memory per blocked waiter, module / a module that only blocks (the API's floor)",
        [m[0] for m in mem["module"]], [m[0] for m in mem["floor"]], "{:,.0f}", met(1.1))

    def kept(side):
        return med([m[1] for m in mem[side]])

    rows.append("| used_memory 2 s after the %s waiters were served and gone, over before (bytes), "
                "module / BLPOP | %s | %s | | module within 5 MB: %s |" % (
                    "{:,}".format(WAITERS), "{:,.0f}".format(kept("module")), "{:,.0f}".format(kept("native")),
                    "met" if kept("module") <= 5 * 2**20 else "**not met**"))
    sizes = [(WAITERS, kept("module"), kept("floor"), REPS)] + [
        (n, pool[(n, "module")], pool[(n, "floor")], 1) for n in POOL_SIZES]
    for n, mod, fl, runs in sizes:
        nil = abs(mod - fl) <= max(2**20, 0.01 * abs(fl))
        rows.append("| the same after %s waiters (%s), module / a module that only blocks | %s | %s | %s | "
                    "module's share %s (%+.1f bytes per waiter): %s |" % (
                        "{:,}".format(n), "median of %d runs" % runs if runs > 1 else "one run",
                        "{:,.0f}".format(mod), "{:,.0f}".format(fl), "%.3f" % ratio(mod, fl),
                        "{:,.0f}".format(mod - fl), (mod - fl) / n,
                        "nil (within 1 MB or 1%)" if nil else "**not nil**"))

    def stall_row(figure, scenario, other="native", judged=True):
        m = [w for w, _ in stalls[(scenario, "module")]]
        n = [w for w, _ in stalls[(scenario, other)]]
        d_med, d_max = med(m) - med(n), max(m) - max(n)
        ok = d_med <= STALL_MARGIN_MS and d_max <= STALL_MARGIN_MS
        target = "≤ native + %.0f ms: %s" % (STALL_MARGIN_MS, "met" if ok else "**not met**") if judged else ""
        rows.append("| %s | %.1f (%.1f) | %.1f (%.1f) | %+.1f (%+.1f) ms | %s |" % (
            figure, med(m), max(m), med(n), max(n), d_med, d_max, target))

    def disconnect_rows(kind, name, first):
        ms = [w for w, _ in stalls[("disconnect", kind)]]
        fl = [w for w, _ in stalls[("disconnect", "floor")]]
        d_med, d_max = med(ms) - med(fl), max(ms) - max(fl)
        ok = d_med <= STALL_MARGIN_MS
        figure = ("worst PING while %s waiters' connections close, the process holding them killed "
                  "(ms), median (max) of %d; %s waiters / floor (a module that only blocks)" % (
                      "{:,}".format(DISCONNECT_WAITERS), DISCONNECT_REPS, name)) if first else (
                  "the same, %s waiters / floor" % name)
        rows.append("| %s | %.1f (%.1f) | %.1f (%.1f) | %+.1f (%+.1f) ms | ≤ floor + %.0f ms: %s |" % (
            figure, med(ms), max(ms), med(fl), max(fl), d_med, d_max, STALL_MARGIN_MS,
            "met" if ok else "**not met**"))

    kinds = (("exclusive", "exclusive"), ("shared", "shared"), ("semaphore", "semaphore"),
             ("multi", "multi-key (LOCK.ACQUIREALL, 2 keys)"))
    for i, (kind, name) in enumerate(kinds):
        disconnect_rows(kind, name, i == 0)
    nat = [w for w, _ in stalls[("disconnect", "native")]]
    fl = [w for w, _ in stalls[("disconnect", "floor")]]
    rows.append("| the same, BLPOP waiters / floor | %.1f (%.1f) | %.1f (%.1f) | %+.1f (%+.1f) ms |  |" % (
        med(nat), max(nat), med(fl), max(fl), med(nat) - med(fl), max(nat) - max(fl)))
    for i, (kind, name) in enumerate(kinds):
        row(("the server's main thread's CPU from the kill until every waiter is let go (ms), %s / floor" % name)
            if i == 0 else ("the same, %s / floor" % name),
            [x for _, x in stalls[("disconnect", kind)]], [x for _, x in stalls[("disconnect", "floor")]],
            "%.1f", met(1.1))
    row("the same, BLPOP / floor", [x for _, x in stalls[("disconnect", "native")]],
        [x for _, x in stalls[("disconnect", "floor")]], "%.1f")
    stall_row("worst PING while %s leases end together, %s of them with a waiter (ms), median (max) of %d; "
              "module / as many plain keys expiring" % (
                  "{:,}".format(STORM_KEYS), "{:,}".format(STORM_WAITERS), STALL_REPS), "storm")
    stall_row("the same, module / as many keys of a minimal module type expiring (no waiters)", "storm", "floor",
              judged=False)
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
    if soft < MAXCLIENTS + 500:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY
                                                    else MAXCLIENTS + 1000, hard))
    # The driver and its helpers run on the clients' CPUs (the servers are
    # pinned by the Server class).
    if a.client_cpus:
        os.sched_setaffinity(0, {int(c) for c in a.client_cpus.split(",")})
    work = tempfile.mkdtemp(prefix="redislock-waiting.")
    floors = [build_floor(work, name) for name in ("blockfloor", "lockfloor", "typefloor")]
    capped = [n for n in POOL_WANTED if n > POOL_MAX]
    lines = [
        "# Waiting: the module against a BLPOP mutex",
        "",
        "Written by `bench/waiting.py` (`make bench`, or `BENCH_ONLY=waiting bench/run.sh`): all sides on one",
        "server process with the module and the floors loaded, a fresh one per run, %d runs per side," % REPS,
        "alternating; medians. Module side: `LOCK.ACQUIRE hot <token> PX 10000 BLOCK 5000` then",
        "`LOCK.RELEASE`; native side: `BLPOP hot 5` then `RPUSH hot <token>`; lock floor",
        "(bench/floor/lockfloor.c): `FLOOR.ACQUIRE hot <token> 0` (no deadline) then `FLOOR.RELEASE` — the",
        "owner in a module-type value with a 10 s lease, waiters blocked with `RedisModule_BlockClient` and",
        "handed the lock by the release with `RedisModule_UnblockClient`, each grant replicated as its effect",
        "(`FLOOR.APPLY key token fence unix-ms`, `RedisModule_Replicate`); full lock floor: the same lock",
        "taking the module's arguments (`FLOOR.XACQUIRE hot <token> PX 10000 BLOCK 5000`, `FLOOR.XRELEASE`),",
        "ending waits by the server's blocked-client timeout, redacting the token from SLOWLOG and MONITOR",
        "and sending the module's keyspace events — the least the module's hot commands can cost without",
        "its lock rules. Memory floor:",
        "bench/floor/blockfloor.c, a command that only blocks. Ratio = module / the other side.",
        "Disconnect rows (bench/waitstalls.py): fresh servers, %d runs per side, alternating; the process" % DISCONNECT_REPS,
        "holding the %s waiters' connections is killed while the server runs (pinned to its CPU, the" % (
            "{:,}".format(DISCONNECT_WAITERS)),
        "process on the other), as when a client host's process dies; the window ends when the server has",
        "no blocked client left and the module has let every closed wait go (`waiters_leaving` 0). Floor:",
        "blockfloor.c's `FLOOR.WAIT`, which only blocks (it lets its handles go only when served, so its",
        "figures leave that work out). Storm rows: %d runs per side; the difference is module − the other" % STALL_REPS,
        "side, of the medians (of the maxima); the expiry floor is bench/floor/typefloor.c (a module type",
        "that keeps only a token).",
        "",
    ]
    if capped:
        lines += ["Pool scaling: %s waiters capped at %s here: the hard limit on open files is %s per process "
                  "(`ulimit -Hn`; raising it needs CAP_SYS_RESOURCE), and the server needs one per client."
                  % (" and ".join("{:,}".format(n) for n in capped), "{:,}".format(POOL_MAX),
                     "{:,}".format(FD_HARD)), ""]
    try:
        for binary in a.server:
            version, rows = bench_server(binary, a.module, floors, work, a.server_cpus, a.client_cpus)
            lines += ["## %s" % version, "", "| figure | module | other | ratio | target |",
                      "|---|---|---|---|---|"]
            lines += rows + [""]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(a.out, "w") as f:
        f.write("\n".join(lines))
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
