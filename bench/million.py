#!/usr/bin/env python3
"""A million locks against a million strings: LOCK.ACQUIRE lock:%012d <token> PX
3600000 (exclusive locks) side by side with SET lock:%012d <token> NX PX 3600000
(what a user stores without the module), on ONE server process with the module
loaded, sides alternating run by run; a third side, FLOOR.SET of a minimal
module type (bench/floor/typefloor.c) that keeps only the token, shows what the
server spends on any module-typed key whatever the module stores; a fourth,
FLOOR.LOCK of the same type, adds what any fenced lock must do on top (count a
fence, make the expiry absolute, propagate the grant as its exact effect with
RedisModule_Replicate, answer [token, fence]).

Figures per side (fresh server per run): server CPU to create the keys (the
commands sent by `redis-cli --pipe`; utime+stime of the server process), RDB
bytes (SAVE), DEBUG RELOAD (wall time and server CPU: save and load), and
used_memory per key. Ratio = module / strings (lower is better).

Usage: million.py --server BIN [--server BIN ...] --module libredislock.so
       [--out bench/million.md] [--server-cpus 0] [--client-cpus 1]
Knobs: BENCH_MILLION_REPS (runs per side, default 3), BENCH_SCALE (keys = 1M x scale).
Loopback only; every server is started and stopped here.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from native import Server, ServerBench  # noqa: E402
from waiting import build_floor  # noqa: E402

REPS = max(1, int(os.environ.get("BENCH_MILLION_REPS", "3")))
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
KEYS = max(10_000, int(1_000_000 * SCALE))
TOKEN = b"owner-token-0123456789"  # 22 bytes, as the suite's memory pair
PX = b"3600000"
SIDES = {
    "module": lambda key: [b"LOCK.ACQUIRE", key, TOKEN, b"PX", PX],
    "strings": lambda key: [b"SET", key, TOKEN, b"NX", b"PX", PX],
    "floor": lambda key: [b"FLOOR.SET", key, TOKEN, b"PX", PX],
    "lock floor": lambda key: [b"FLOOR.LOCK", key, TOKEN, b"PX", PX],
}
TARGETS = {"create": 1.25, "rdb": 1.15, "reload": 1.20}


def commands_file(work, side):
    path = os.path.join(work, side.replace(" ", "-") + ".resp")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            for start in range(0, KEYS, 50_000):
                chunk = []
                for i in range(start, min(KEYS, start + 50_000)):
                    args = SIDES[side](b"lock:%012d" % i)
                    chunk.append(b"*%d\r\n" % len(args)
                                 + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
                f.write(b"".join(chunk))
    return path


def run(binary, module, floor, work, side, server_cpus, client_cpus):
    s = Server(binary, module, work, "million", server_cpus, ["--loadmodule", floor])
    try:
        base_mem = int(s.c.info("memory")["used_memory"])
        pin = ["taskset", "-c", client_cpus] if client_cpus else []
        cpu0 = s.cpu()
        with open(commands_file(work, side), "rb") as f:
            out = subprocess.run(pin + ["redis-cli", "-p", str(s.port), "--pipe"], stdin=f,
                                 capture_output=True, text=True)
        create_cpu = s.cpu() - cpu0
        if "errors: 0" not in out.stdout or int(s.c.call("DBSIZE")) != KEYS:
            raise RuntimeError("%s: creation failed: %s %s" % (side, out.stdout, out.stderr))
        mem = int(s.c.info("memory")["used_memory"]) - base_mem
        s.c.call("SAVE")
        rdb = os.path.getsize(os.path.join(s.dir, "snapshot.rdb"))
        cpu0, t0 = s.cpu(), time.monotonic()
        s.c.call("DEBUG", "RELOAD", "NOSAVE")
        reload_s, reload_cpu = time.monotonic() - t0, s.cpu() - cpu0
        if int(s.c.call("DBSIZE")) != KEYS:
            raise RuntimeError("%s: DEBUG RELOAD lost keys" % side)
        return {"create": create_cpu, "rdb": rdb, "reload": reload_s, "reload_cpu": reload_cpu,
                "mem": mem / KEYS}
    finally:
        s.stop()


def bench_server(binary, module, floor, work, server_cpus, client_cpus):
    version = ServerBench.short_name(subprocess.run([binary, "--version"], capture_output=True,
                                                    text=True).stdout.strip())
    res = {side: [] for side in SIDES}
    order = list(SIDES)
    for rep in range(REPS):
        for side in (order if rep % 2 == 0 else order[::-1]):
            res[side].append(run(binary, module, floor, work, side, server_cpus, client_cpus))
            print("[%s] run %d %s: %s" % (version, rep + 1, side, res[side][-1]), flush=True)

    def med(side, what):
        return statistics.median(r[what] for r in res[side])

    rows = []
    figures = [("create", "server CPU to create the keys (s)", "%.2f"),
               ("rdb", "RDB bytes", "{:,.0f}"),
               ("reload", "DEBUG RELOAD, wall (s)", "%.2f"),
               ("reload_cpu", "DEBUG RELOAD, server CPU (s)", "%.2f"),
               ("mem", "used_memory per key (bytes)", "%.1f")]
    for what, label, fmt in figures:
        m, n, fl = med("module", what), med("strings", what), med("floor", what)
        lf = med("lock floor", what)
        show = (lambda v: fmt.format(v)) if "{" in fmt else (lambda v: fmt % v)
        target = TARGETS.get(what)
        verdict = ""
        if target:
            verdict = "≤ %.2f: %s" % (target, "met" if m / n <= target else "**not met**")
        rows.append("| %s | %s | %s | %.2f | %s | %.2f | %s | %.2f | %s |" % (
            label, show(m), show(n), m / n, show(fl), m / fl, show(lf), m / lf, verdict))
    return version, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", action="append", required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "million.md"))
    ap.add_argument("--server-cpus", default=os.environ.get("BENCH_SERVER_CPUS", ""))
    ap.add_argument("--client-cpus", default="")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="redislock-million.")
    try:
        floor = build_floor(work, "typefloor")
        sections = [bench_server(b, a.module, floor, work, a.server_cpus, a.client_cpus) for b in a.server]
    finally:
        subprocess.run(["rm", "-rf", work])
    lines = ["# A million locks against a million strings", "",
             "Written by `bench/million.py` (`make bench`, or `BENCH_ONLY=million bench/run.sh`): %s keys "
             "`lock:%%012d` with a 22-byte token and a 1 h lease, created by `redis-cli --pipe` as "
             "`LOCK.ACQUIRE` (module), `SET … NX PX` (strings) and `FLOOR.SET` of a minimal module type "
             "that keeps only the token (floor, bench/floor/typefloor.c), and `FLOOR.LOCK` of the same type, "
             "which also counts a fence, makes the expiry absolute, propagates the grant as its exact effect "
             "(`RedisModule_Replicate`) and answers `[token, fence]` (lock floor: what any fenced lock costs "
             "through the module API); one server process with both "
             "modules loaded, a fresh one per run, %d runs per side, alternating; medians. "
             "Ratio = module / strings; the floor ratios = module / floor." % ("{:,}".format(KEYS), REPS), ""]
    for version, rows in sections:
        lines += ["## " + version, "",
                  "| figure | module | strings | ratio | floor | module / floor | lock floor "
                  "| module / lock floor | target |",
                  "|---|---|---|---|---|---|---|---|---|"] + rows + [""]
    with open(a.out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
