#!/usr/bin/env python3
"""Where a hot lock's handoffs go: the hot scenario of bench/waiting.py (8
clients taking turns on one lock, no work inside) with the server under
valgrind's callgrind, for three sides on one server process: the module
(LOCK.ACQUIRE ... BLOCK / LOCK.RELEASE), the lock floor
(bench/floor/lockfloor.c: FLOOR.ACQUIRE / FLOOR.RELEASE, the least a FIFO
lock in a module can be) and a BLPOP mutex. Instrumentation is on only
while the clients run a fixed number of sections, so the figures are
instructions per critical section, which other load cannot move.

The report: instructions per section for each side, the module API's entry
points (inclusive, per section) side by side for the module and the floor,
and the functions whose own instructions differ most between them.

Usage: handoff_callgrind.py --server BIN [--server BIN ...] --module libredislock.so
       [--sections 4000] [--reps 3] [--out bench/handoff-callgrind.md]
Not part of `make bench` (a few minutes per server); run it by hand.
"""

import argparse
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from resp import Redis, encode, free_port  # noqa: E402
from stalls import wait_for  # noqa: E402
from waiting import build_floor  # noqa: E402
from waitstalls import Holder  # noqa: E402

WORKERS = 8
KEY = "hot"
DISCONNECT_WAITERS = 5000

# The module API's entry points and the server's blocking machinery
# (Redis names them RM_*, Valkey VM_*; matched by suffix).
PARTS = [
    ("command dispatch (whole module command)", ["ModuleCommandDispatcher"]),
    ("block a client", ["M_BlockClient"]),
    ("unblock a client (from the release)", ["M_UnblockClient"]),
    ("serve unblocked clients (reply callback, reprocess)", ["moduleHandleBlockedClients"]),
    ("replicate an effect", ["M_Replicate"]),
    ("  of which: command lookup", ["lookupCommandByCString"]),
    ("open key", ["M_OpenKey"]),
    ("close key", ["M_CloseKey"]),
    ("set value", ["M_ModuleTypeSetValue"]),
    ("set / read expiry", ["M_SetExpire", "M_SetAbsExpire", "M_GetExpire", "M_GetAbsExpire"]),
    ("delete key", ["M_DeleteKey"]),
    ("timers (create / stop)", ["M_CreateTimer", "M_StopTimer", "M_GetTimerInfo"]),
    ("timer passes", ["moduleTimerHandler"]),
    ("keyspace events", ["M_NotifyKeyspaceEvent"]),
    ("context flags", ["M_GetContextFlags"]),
    ("redact token", ["M_RedactClientCommandArgument"]),
    ("disconnect callback set", ["M_SetDisconnectCallback"]),
    ("replies", ["M_ReplyWithArray", "M_ReplyWithStringBuffer", "M_ReplyWithLongLong",
                 "M_ReplyWithNull", "M_ReplyWithSimpleString", "M_ReplyWithString"]),
    ("allocation (the module's, through the server)", ["M_Alloc", "M_Free", "M_Realloc", "M_Calloc"]),
]


# What letting a waiter go costs, by part (inclusive).
GONE_PARTS = [
    ("free the client (all of it)", ["freeClient"]),
    ("unblock it (the blocked command's own cleanup)", ["unblockClient"]),
    ("the module's disconnect callback", ["on_disconnect"]),
    ("serve unblocked clients (module API)", ["moduleHandleBlockedClients"]),
    ("timer passes (module)", ["moduleTimerHandler"]),
]


def _worker(side, idx, port, sections, go, out):
    r = Redis(port)
    token = "w%d" % idx
    go.wait()
    done = 0
    try:
        for _ in range(sections):
            if side == "module":
                got = r.call("LOCK.ACQUIRE", KEY, token, "PX", 10000, "BLOCK", 5000)
                ok = r.call("LOCK.RELEASE", KEY, token) if got is not None else 0
            elif side == "floor-full":
                got = r.call("FLOOR.XACQUIRE", KEY, token, "PX", 10000, "BLOCK", 5000)
                ok = r.call("FLOOR.XRELEASE", KEY, token) if got is not None else 0
            elif side.startswith("floor"):
                got = r.call("FLOOR.ACQUIRE", KEY, token, 5000 if side == "floor-timeout" else 0)
                ok = r.call("FLOOR.RELEASE", KEY, token) if got is not None else 0
            else:
                got = r.call("BLPOP", KEY, 5)
                ok = r.call("RPUSH", KEY, got[1]) if got is not None else 0
            done += 1 if ok else 0
    finally:
        r.close()
    out.put(done)


class Profiled:
    def __init__(self, server, module, floor, work, extra=()):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             "--callgrind-out-file=%s/callgrind.out.%%p" % work,
             server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--loadmodule", module, "--loadmodule", floor] + list(extra),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                self.c = Redis(self.port)
                self.c.call("PING")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server under callgrind did not start")

    def control(self, *args):
        subprocess.run(["callgrind_control"] + list(args) + [str(self.proc.pid)],
                       capture_output=True, check=True)

    def measure(self, side, per_worker, label=None):
        self.c.call("DEL", KEY)
        if side == "native":
            self.c.call("RPUSH", KEY, "token")
        ctx = mp.get_context("fork")
        go, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(side, i, self.port, per_worker, go, out))
                 for i in range(WORKERS)]
        for p in procs:
            p.start()
        time.sleep(1.0)  # every worker connected
        self.control("-i", "on")
        self.control("-z")
        go.set()
        done = sum(out.get(timeout=900) for _ in procs)
        self.control("-d", label or side)
        self.control("-i", "off")
        for p in procs:
            p.join()
        if done != WORKERS * per_worker:
            raise RuntimeError("%s: %d of %d sections" % (side, done, WORKERS * per_worker))
        return done

    def clients(self):
        info = self.c.info("clients")
        return int(info["connected_clients"]), int(info["blocked_clients"])

    def measure_disconnect(self, side, n):
        """N waiters whose connections all close (their process killed)."""
        self.c.call("DEL", "md")
        if side == "module":
            self.c.call("LOCK.ACQUIRE", "md", "holder", "PX", 600000)
            commands = [encode(["LOCK.ACQUIRE", "md", "w%d" % i, "PX", 600000, "BLOCK", 0]) for i in range(n)]
        elif side == "floor":
            self.c.call("FLOOR.ACQUIRE", "md", "holder", 0)
            commands = [encode(["FLOOR.ACQUIRE", "md", "w%d" % i, 0]) for i in range(n)]
        else:
            commands = [encode(["BLPOP", "md", 0])] * n
        with Holder(self.port, commands, "") as holder:
            wait_for("the waiters", lambda: self.clients()[1] >= n, 600)
            self.control("-i", "on")
            self.control("-z")
            holder.kill()
            wait_for("the waiters to go", lambda: self.clients() == (1, 0), 600)
            self.control("-d", "disconnect-" + side)
            self.control("-i", "off")
        self.c.call("DEL", "md")
        return n

    def stop(self):
        try:
            self.c.call("SHUTDOWN", "NOSAVE")
        except (OSError, ConnectionError):
            pass
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def profile(path, inclusive):
    """(total Ir, {function: Ir}) of one dump, inclusive or self."""
    ann = subprocess.run(["callgrind_annotate", "--inclusive=%s" % ("yes" if inclusive else "no"),
                          "--threshold=100", path], capture_output=True, text=True).stdout
    total, funcs = 0, {}
    for line in ann.splitlines():
        t = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+PROGRAM TOTALS", line)
        if t:
            total = int(t.group(1).replace(",", ""))
            continue
        f = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S*?):(.+?)(?: \[(.*)\])?$", line)
        if f:
            name = f.group(3).strip()
            obj = os.path.basename(f.group(4) or "")
            funcs.setdefault((name, obj), int(f.group(1).replace(",", "")))
    return total, funcs


def calls(path):
    """{function: calls} of one dump, from its callers' call counts."""
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--tree=caller", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    out, pending = {}, 0
    for line in ann.splitlines():
        c = re.match(r"\s*[\d,]+\s+\(\s*[\d.]+%\)\s+<\s+\S*?:.+\(([\d,]+)x\)", line)
        if c:
            pending += int(c.group(1).replace(",", ""))
            continue
        f = re.match(r"\s*[\d,]+\s+\(\s*[\d.]+%\)\s+\*\s+\S*?:(.+?)(?: \[.*\])?$", line)
        if f:
            name = f.group(1).strip()
            out[name] = out.get(name, 0) + pending
        if not line.strip() or f:
            pending = 0
    return out


def dumps(work):
    out = {}
    for name in os.listdir(work):
        path = os.path.join(work, name)
        with open(path, errors="replace") as f:
            head = f.read(4096)
        m = re.search(r"^desc: Trigger: dump (\S+)", head, re.M)
        if m:
            out[m.group(1)] = path
    return out


def api_cost(funcs, suffixes):
    return sum(v for (name, obj), v in funcs.items()
               if any(name.endswith(s) for s in suffixes) and not name.startswith("redislock"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", action="append", required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--sections", type=int, default=4000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="redislock-handoff.")
    try:
        floor = build_floor(work, "lockfloor")
        sha = subprocess.run(["sha256sum", a.module], capture_output=True, text=True).stdout[:16]
        lines = ["# Where a hot lock's handoffs go: the module against the lock floor", "",
                 "Written by `bench/handoff_callgrind.py` (run by hand: `python3 bench/handoff_callgrind.py "
                 "--server BIN [--server BIN ...] --module target/release/libredislock.so --out "
                 "bench/handoff-callgrind.md`); each server under valgrind's callgrind with the module and "
                 "bench/floor/lockfloor.c loaded, instrumentation on only while the clients run. Module: sha256 "
                 "%s…" % sha, ""]
        for server in a.server:
            lines += report(server, a.module, floor, work, max(1, a.sections // WORKERS), max(1, a.reps)) + [""]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


HOT_SIDES = ("module", "floor", "floor-timeout", "floor-full", "native")


def report(server, module, floor, work, per_worker, reps):
    version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout.split(" sha=")[0]
    prof_dir = tempfile.mkdtemp(dir=work)
    p = Profiled(server, module, floor, prof_dir)
    try:
        n = {side: p.measure(side, per_worker) for side in HOT_SIDES}
        # More runs of each side, alternating: the whole server's count
        # moves from run to run with how many sections a turn of the event
        # loop serves, so the headline figures are medians.
        again = {(side, r): p.measure(side, per_worker, "%s-%d" % (side, r))
                 for r in range(1, reps) for side in HOT_SIDES}
        gone = {side: p.measure_disconnect(side, DISCONNECT_WAITERS) for side in ("module", "floor", "native")}
    finally:
        p.stop()
    paths = dumps(prof_dir)
    gone_incl = {side: profile(paths["disconnect-" + side], True) for side in gone}
    incl = {side: profile(paths[side], True) for side in n}
    excl = {side: profile(paths[side], False) for side in n}
    ncalls = {side: calls(paths[side]) for side in ("module", "floor")}

    def per(side, v):
        return v / n[side]

    totals = {side: sorted([per(side, incl[side][0])] +
                           [profile(paths["%s-%d" % (side, r)], True)[0] / again[(side, r)]
                            for r in range(1, reps)])
              for side in HOT_SIDES}

    def median(side):
        t = totals[side]
        return t[len(t) // 2] if len(t) % 2 else (t[len(t) // 2 - 1] + t[len(t) // 2]) / 2

    lines = ["## %s" % version, "",
             "Instructions per critical section, whole server (%d clients, %d sections per side). Module: "
             "`LOCK.ACQUIRE hot <token> PX 10000 BLOCK 5000`, `LOCK.RELEASE`; floor: `FLOOR.ACQUIRE hot <token> 0` "
             "(no deadline), `FLOOR.RELEASE`; floor with timeout: the same with 5000 (the server's own "
             "blocked-client timeout, as BLPOP's); full floor: `FLOOR.XACQUIRE hot <token> PX 10000 BLOCK 5000`, "
             "`FLOOR.XRELEASE` (the floor with timeout, taking the module's arguments, redacting the token and "
             "sending its keyspace events); BLPOP: `BLPOP hot 5`, `RPUSH`. Medians of %d runs per "
             "side, alternating; the range of the runs below. The tables after it are of the first run." % (
                 WORKERS, n["module"], reps), "",
             "| module | lock floor | floor with timeout | full floor | BLPOP | module / floor "
             "| module / full floor | module / BLPOP | floor / BLPOP | full floor / BLPOP |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    tm, tf, tt, tx, tn = (median(s) for s in HOT_SIDES)
    lines.append("| {:,.0f} | {:,.0f} | {:,.0f} | {:,.0f} | {:,.0f} | {:.2f} | {:.3f} | {:.3f} | {:.2f} "
                 "| {:.3f} |".format(tm, tf, tt, tx, tn, tm / tf, tm / tx, tm / tn, tf / tn, tx / tn))
    lines.append("| {:,.0f}–{:,.0f} | {:,.0f}–{:,.0f} | {:,.0f}–{:,.0f} | {:,.0f}–{:,.0f} | {:,.0f}–{:,.0f} "
                 "| | | | | |".format(*(x for side in HOT_SIDES for x in (totals[side][0], totals[side][-1]))))
    lines += ["", "The module API and the server's blocking machinery, inclusive instructions and calls, "
              "per section:", "",
              "| part | module | lock floor | module − floor | calls: module | calls: floor |",
              "|---|---|---|---|---|---|"]

    def ncall(side, suffixes):
        return sum(v for k, v in ncalls[side].items()
                   if any(k.endswith(x) for x in suffixes) and not k.startswith("redislock")) / n[side]

    for title, suffixes in PARTS:
        m = per("module", api_cost(incl["module"][1], suffixes))
        f = per("floor", api_cost(incl["floor"][1], suffixes))
        if m or f:
            lines.append("| {} | {:,.0f} | {:,.0f} | {:+,.0f} | {:.2f} | {:.2f} |".format(
                title, m, f, m - f, ncall("module", suffixes), ncall("floor", suffixes)))

    server_obj = os.path.basename(os.path.realpath(shutil.which(server) or server))

    def obj_name(obj):
        return "the server" if obj == server_obj else (obj or "?")

    def by_object(side):
        out = {}
        for (name, obj), v in excl[side][1].items():
            out[obj] = out.get(obj, 0) + v
        return out

    lines += ["", "Own instructions by object file, per section:", "",
              "| object | module | lock floor | module − floor |", "|---|---|---|---|"]
    om, of_ = by_object("module"), by_object("floor")
    for obj in sorted(set(om) | set(of_), key=lambda o: -abs(per("module", om.get(o, 0))
                                                          - per("floor", of_.get(o, 0)))):
        m, f = per("module", om.get(obj, 0)), per("floor", of_.get(obj, 0))
        if abs(m - f) >= 50 or max(m, f) >= 500:
            lines.append("| {} | {:,.0f} | {:,.0f} | {:+,.0f} |".format(obj_name(obj), m, f, m - f))

    lines += ["", "Functions whose own instructions differ most, per section (module − floor):", "",
              "| function | object | module | lock floor | module − floor |", "|---|---|---|---|---|"]
    keys = set(excl["module"][1]) | set(excl["floor"][1])
    diffs = sorted(((per("module", excl["module"][1].get(k, 0)) - per("floor", excl["floor"][1].get(k, 0)), k)
                    for k in keys), key=lambda d: -abs(d[0]))
    for d, (name, obj) in diffs[:30]:
        m, f = per("module", excl["module"][1].get((name, obj), 0)), per("floor", excl["floor"][1].get((name, obj), 0))
        short = name if len(name) <= 90 else name[:87] + "..."
        lines.append("| `{}` | {} | {:,.0f} | {:,.0f} | {:+,.0f} |".format(short.replace("|", "\\|"), obj_name(obj),
                                                                         m, f, d))

    lines += ["", "Letting %s waiters go at once (the process holding their connections killed; module: "
              "`LOCK.ACQUIRE md <token> PX 600000 BLOCK 0` behind a held lock, floor: `FLOOR.ACQUIRE md "
              "<token> 0`, BLPOP: `BLPOP md 0`), whole server, instructions per waiter; the kernel's part of "
              "closing the connections, the same for every side, is not counted:" % "{:,}".format(
                  DISCONNECT_WAITERS), "",
              "| module | lock floor | BLPOP | module / floor | module / BLPOP |", "|---|---|---|---|---|"]
    gm, gf, gn = (gone_incl[s_][0] / gone[s_] for s_ in ("module", "floor", "native"))
    lines.append("| {:,.0f} | {:,.0f} | {:,.0f} | {:.2f} | {:.2f} |".format(gm, gf, gn, gm / gf, gm / gn))
    lines += ["", "Where they go, inclusive, per waiter (the module's disconnect callback, the server freeing "
              "the client):", "", "| part | module | lock floor | BLPOP |", "|---|---|---|---|"]
    for title, suffixes in GONE_PARTS:
        vals = [sum(v for (name, _), v in gone_incl[s_][1].items() if any(name.endswith(x) for x in suffixes))
                / gone[s_] for s_ in ("module", "floor", "native")]
        if any(vals):
            lines.append("| {} | {:,.0f} | {:,.0f} | {:,.0f} |".format(title, *vals))
    return lines


if __name__ == "__main__":
    sys.exit(main())
