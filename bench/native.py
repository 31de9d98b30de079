#!/usr/bin/env python3
"""The module's basic commands against the server's own lock commands, side
by side on one server process, on every server of the matrix.

Pairs (native command | module command; both on the SAME server process,
which has the module loaded; sides alternate run by run):
  1 acquire granted   SET lock:<rand> T NX PX 60000 | LOCK.ACQUIRE lock:<rand> T PX 60000
  2 acquire refused   SET k O NX PX 60000 on held strings | LOCK.ACQUIRE k O PX 60000 on held locks
  3 release matching  DELIFEQ k T (Valkey >= 9.0), DELEX k IFEQ T (Redis >= 8.4) | LOCK.RELEASE k T
  4 extend matching   SET k T IFEQ T PX 60000 (Valkey >= 8.1) | LOCK.EXTEND k T PX 60000
A pair runs only where the server has the native command (probed: COMMAND
INFO, and for SET IFEQ a trial on a scratch key); elsewhere it is n/a.

Each pair runs in three setups, each on fresh servers: plain (--save ""
--appendonly no), AOF (--appendonly yes --appendfsync everysec) and replica
(a second server with the module, REPLICAOF the first, synced; after each run
the primary's CPU time is read once the replica has applied the whole run).

The figure is the server's CPU time per operation: the growth of utime+stime
of the server process (/proc/PID/stat, all its threads) over a run, divided
by the operations of the run, in µs; ops/s (redis-benchmark's own figure) is
kept too. Ratio = native µs/op / module µs/op: 1.00 or more means the module
takes no more CPU than the server's own command. Runs: `redis-benchmark -c 50
-P 16`, servers pinned to CPU 0 and the clients (and the replica) to CPU 1
when run.sh passes the CPUs.

Memory (on the plain setup's fresh server, each case on an emptied server,
keys loaded with `redis-cli --pipe`, 32-byte tokens): used_memory growth per
key for an exclusive lock against a string lock, a key with one SHARED holder
against a string lock, and a key with 10 holders (LIMIT 100) against a sorted
set of the same 10 tokens (compact listpack). Ratio = module / native.

Usage: native.py --server BIN [--server BIN ...] --module libredislock.so
       [--out-dir bench] [--server-cpus 0] [--client-cpus 1]
Writes OUT_DIR/native.md and OUT_DIR/native-raw.txt (as native-raw.txt.part
while it runs). Knobs: BENCH_NATIVE_REPS (runs per side, default 3),
BENCH_SCALE (all counts and run lengths, 0.1 for a quick check).
Loopback only; every server is started and stopped here.
"""

import argparse
import ctypes
import hashlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from resp import Redis, RespError, encode, free_port  # noqa: E402

REPS = max(1, int(os.environ.get("BENCH_NATIVE_REPS", "3")))
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
RUN_S = max(0.2, 1.5 * SCALE)  # target length of a timed run
PROBE_N = max(20_000, int(100_000 * min(1.0, SCALE * 2)))
# Prefilled key set of pairs 2-4: lock:%012d (the names redis-benchmark's
# __rand_int__ gives with -r LOCKS), module locks in db 0, string locks in
# db 1, same token. A matching release deletes its key, so the release pair
# reloads the set before every run and sends N_RELEASE calls over LOCKS keys:
# a key drawn a second time answers 0, the same mix for both sides
# (expected matching share LOCKS*(1-e^(-N/LOCKS))/N, about 75%).
LOCKS = max(2000, int(1_500_000 * SCALE))
N_RELEASE = int(0.6 * LOCKS)
GRANT_R = 100_000_000  # key space of pair 1: nearly every call grants
TOKEN = "owner-token-0123456789abcdefghij"
OTHER = "other-token-0123456789abcdefghij"
assert len(TOKEN) == 32 and len(OTHER) == 32
PREFILL_PX = 3_600_000
# Memory rows.
MEM_EXCL = max(1000, int(200_000 * SCALE))
MEM_SMALL = max(1000, int(20_000 * SCALE))
HOLDERS = 10
HOLDER_TOKENS = ["holder-token-%019d" % i for i in range(HOLDERS)]
assert all(len(t) == 32 for t in HOLDER_TOKENS)
MEM_PX = 600_000
# A run in which the server's main thread was runnable but waiting for a CPU
# (other load on the machine) more than this share of the run is rerun once,
# as the pair's allowance permits; the raw file keeps it, marked DISCARDED.
DISTURBED_WAIT = 0.05
# At most MAX_RERUNS reruns per pair, none once the pair has run this long.
PAIR_ALLOWANCE_S = 30 * max(SCALE, 0.25)
MAX_RERUNS = 1
CLK_TCK = os.sysconf("SC_CLK_TCK")
SETUPS = [
    ("plain", "plain (`--save \"\" --appendonly no`)"),
    ("aof", "AOF (`--appendonly yes --appendfsync everysec`)"),
    ("replica", "one replica attached"),
]

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    # A server (or client) must not outlive this driver, however it ends.
    _libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def proc_cpu_s(pid):
    """utime + stime of a process, all its threads, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        data = f.read()
    fields = data[data.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def sched_wait_s(pid):
    """Time the main thread spent runnable but waiting for a CPU (s)."""
    try:
        with open("/proc/%d/task/%d/schedstat" % (pid, pid)) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def n_fmt(x):
    return "{:,.0f}".format(x)


def ratio_fmt(ratio, met, meets):
    """Two decimals, three when two would round across the target."""
    return "%.2f" % ratio if met == meets(float("%.2f" % ratio)) else "%.3f" % ratio


def cmdstats(conn):
    out = {}
    for k, v in conn.info("commandstats").items():
        if k.startswith("cmdstat_"):
            f = dict(x.split("=", 1) for x in v.split(","))
            out[k[8:]] = (int(f["calls"]), int(f["usec"]))
    return out


def module_stats(conn):
    # Counters only: `version` is a release number (0.1.0).
    return {k[len("redislock_"):]: int(v) for k, v in conn.info("redislock").items()
            if v.lstrip("-").isdigit()}


def errors(conn):
    return int(conn.info("stats").get("total_error_replies", "0"))


def dbsize(conn, db):
    ks = conn.info("keyspace").get("db%d" % db)
    if not ks:
        return 0
    return int(dict(x.split("=") for x in ks.split(","))["keys"])


class Server:
    def __init__(self, binary, module, work, name, cpus, extra):
        self.dir = tempfile.mkdtemp(prefix=name + ".", dir=work)
        self.name = name
        self.proc = None
        pin = ["taskset", "-c", cpus] if cpus else []
        for _ in range(5):
            self.port = free_port()
            args = pin + [binary, "--port", str(self.port), "--bind", "127.0.0.1",
                          "--daemonize", "no", "--dir", self.dir, "--dbfilename", "snapshot.rdb",
                          "--logfile", os.path.join(self.dir, "log"),
                          "--enable-debug-command", "local", "--loadmodule", os.path.abspath(module),
                          "--save", "", "--appendonly", "no"] + extra
            self.args = args
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent)
            for _ in range(250):
                try:
                    c = Redis(self.port)
                    c.call("PING")
                    self.c = c
                    self.pid = int(c.info("server")["process_id"])
                    return
                except (OSError, RespError):
                    if self.proc.poll() is not None:
                        break
                    time.sleep(0.02)
            self.stop(keep_dir=True)
        raise RuntimeError("%s server did not start: %s" % (name, " ".join(args)))

    def cpu(self):
        return proc_cpu_s(self.pid)

    def stop(self, keep_dir=False):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


class Report:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.raw_path = os.path.join(out_dir, "native-raw.txt")
        self.raw = open(self.raw_path + ".part", "w")
        self.sections = []  # (server version, rows, notes)

    def log(self, msg):
        print(msg, flush=True)
        self.raw.write(msg + "\n")
        self.raw.flush()


class ServerBench:
    """All pairs and memory rows on one server binary."""

    def __init__(self, binary, module, work, report, server_cpus, client_cpus):
        self.binary = binary
        self.module = module
        self.work = work
        self.r = report
        self.server_cpus = server_cpus
        self.client_cpus = client_cpus
        self.taskset = ["taskset", "-c", client_cpus] if client_cpus else []
        self.version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
        self.short = self.short_name(self.version)
        self.rows = []
        self.notes = []
        self.failed = []
        self.runs_total = 0
        self.runs_disturbed = 0
        self.reruns = 0
        self.grants = {}
        self.matched = {}
        self.replica_us = {}
        self.reload_s = []
        self.snapshot = None

    @staticmethod
    def short_name(version):
        # "Redis server v=7.0.15 sha=..." -> "Redis 7.0.15"
        parts = version.split()
        v = next((p[2:] for p in parts if p.startswith("v=")), "?")
        return "%s %s" % (parts[0] if parts else "?", v)

    def log(self, msg):
        self.r.log("[%s] %s" % (self.short, msg))

    # ---- servers ------------------------------------------------------------
    def start(self, setup):
        extra = []
        if setup == "aof":
            # No rewrite during a run: a fork would land in the figures.
            extra = ["--appendonly", "yes", "--appendfsync", "everysec",
                     "--auto-aof-rewrite-percentage", "0"]
        elif setup == "replica":
            extra = ["--repl-diskless-sync-delay", "0", "--client-output-buffer-limit", "replica 0 0 0"]
        self.m = Server(self.binary, self.module, self.work, setup, self.server_cpus, extra)
        self.c = self.m.c
        self.replica = None
        if setup == "replica":
            self.replica = Server(self.binary, self.module, self.work, "replica", self.client_cpus, [])
            self.replica.c.call("REPLICAOF", "127.0.0.1", self.m.port)
            self.wait_for("the replica to sync", lambda: self.replica.c.info("replication")
                          .get("master_link_status") == "up", 60)
            self.sync_replica()

    def stop(self):
        for s in (getattr(self, "replica", None), getattr(self, "m", None)):
            if s:
                s.stop()
        self.replica = self.m = None

    @staticmethod
    def wait_for(what, cond, timeout):
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise RuntimeError("timed out waiting for " + what)
            time.sleep(0.02)

    def sync_replica(self, timeout_s=120):
        """Returns once the replica has applied everything the primary has
        sent so far (WAIT would only cover this connection's own writes)."""
        if not self.replica:
            return
        target = int(self.c.info("replication")["master_repl_offset"])
        deadline = time.monotonic() + timeout_s
        while int(self.replica.c.info("replication").get("slave_repl_offset", "-1")) < target:
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not catch up with the primary")
            time.sleep(0.002)

    def flushall(self):
        # SYNC: a lazy flush (the default on Valkey 8+) would free the old
        # keys in a background thread during the next timed run.
        self.c.call("FLUSHALL", "SYNC")
        self.sync_replica()

    def pipe_load(self, db, chunks):
        p = subprocess.Popen(self.taskset + ["redis-cli", "-h", "127.0.0.1", "-p", str(self.m.port), "--pipe"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=_die_with_parent)
        p.stdin.write(encode(["SELECT", db]))
        for chunk in chunks:
            p.stdin.write(chunk)
        out, err = p.communicate()
        text = out.decode(errors="replace")
        if p.returncode != 0 or "errors: 0," not in text:
            raise RuntimeError("redis-cli --pipe failed: %s %s" % (text[-300:], err.decode()[-300:]))

    @staticmethod
    def chunks(commands, step=5000):
        for i in range(0, len(commands), step):
            yield b"".join(encode(c) for c in commands[i:i + step])

    @staticmethod
    def gen_locks(count, module, px):
        """RESP of lock:%012d 0..count-1 held by TOKEN, as chunks."""
        tail = b"\r\n$32\r\n" + TOKEN.encode() + b"\r\n$2\r\nPX\r\n$%d\r\n%d\r\n" % (len(str(px)), px)
        if module:
            head = b"*5\r\n$12\r\nLOCK.ACQUIRE\r\n$17\r\nlock:"
        else:
            head = b"*6\r\n$3\r\nSET\r\n$17\r\nlock:"
            tail += b"$2\r\nNX\r\n"
        for start in range(0, count, 50_000):
            yield b"".join(head + b"%012d" % i + tail for i in range(start, min(count, start + 50_000)))

    # ---- one timed run ------------------------------------------------------
    def bench(self, args, n, r=None, db=0):
        cmd = self.taskset + ["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.m.port),
                              "-c", "50", "-P", "16", "-n", str(n), "--csv"]
        if r:
            cmd += ["-r", str(r)]
        if db:
            cmd += ["--dbnum", str(db)]
        cmd += [str(a) for a in args]
        name = str(args[0]).lower()
        s0, e0, m0 = cmdstats(self.c), errors(self.c), module_stats(self.c)
        rc0 = self.replica.cpu() if self.replica else None
        w0, c0 = sched_wait_s(self.m.pid), self.m.cpu()
        t0 = time.monotonic()
        res = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_die_with_parent)
        secs = time.monotonic() - t0
        if res.returncode != 0:
            raise RuntimeError("redis-benchmark failed: %s" % res.stderr.strip()[:300])
        # The primary's work for a run includes sending it to the replica.
        self.sync_replica()
        c1, w1 = self.m.cpu(), sched_wait_s(self.m.pid)
        rc1 = self.replica.cpu() if self.replica else None
        s1, e1, m1 = cmdstats(self.c), errors(self.c), module_stats(self.c)
        rps = None
        for line in res.stdout.splitlines():
            cells = [x.strip('"') for x in line.split('","')]
            if len(cells) >= 2 and cells[0] != "test":
                rps = float(cells[1])
                break
        if rps is None:
            raise RuntimeError("no result from redis-benchmark: %r" % res.stdout[:300])
        calls = s1.get(name, (0, 0))[0] - s0.get(name, (0, 0))[0]
        usec = s1.get(name, (0, 0))[1] - s0.get(name, (0, 0))[1]
        if calls != n:
            raise RuntimeError("%d calls of %s for %d requests" % (calls, name, n))
        if e1 != e0:
            raise RuntimeError("%d error replies during `%s`" % (e1 - e0, " ".join(map(str, args))))
        out = {
            "ops_s": rps,
            "secs": secs,
            "us_op": (c1 - c0) * 1e6 / n,
            "util": (c1 - c0) / secs,
            "wait": (w1 - w0) / secs if w0 is not None and w1 is not None else 0.0,
            "cmdstat_us": usec / n,
            "mod": {k: m1.get(k, 0) - m0.get(k, 0) for k in m1},
        }
        if self.replica:
            out["replica_us_op"] = (rc1 - rc0) * 1e6 / n
        return out

    def size(self, label, probes):
        rates = [p(PROBE_N) for p in probes]
        gm = 1.0
        for x in rates:
            gm *= x
        gm **= 1.0 / len(rates)
        n = max(PROBE_N, int(gm * RUN_S) // 10_000 * 10_000)
        self.log("%-28s probe ops/s %s -> n=%d per run" % (label, "/".join("%.0f" % x for x in rates), n))
        return n

    def pair(self, label, sides):
        """sides: [(side, fn(rep) -> run dict with extra fields)], alternated
        run by run, REPS runs each. Returns {side: [run dicts]}."""
        res = {side: [] for side, _ in sides}
        t0 = time.monotonic()
        reruns = MAX_RERUNS
        for rep in range(REPS):
            for side, fn in sides:
                for attempt in (1, 2):
                    out = fn(rep)
                    if (attempt == 1 and out["wait"] > DISTURBED_WAIT and reruns > 0
                            and time.monotonic() - t0 < PAIR_ALLOWANCE_S):
                        reruns -= 1
                        self.reruns += 1
                        self.log("%-28s %-8s rep=%d %s DISCARDED: server waited for a CPU %.0f%% of the "
                                 "run (other load); rerun" % (label, side, rep + 1, self.fmt_run(out),
                                                               100 * out["wait"]))
                        continue
                    break
                res[side].append(out)
                self.runs_total += 1
                if out["wait"] > DISTURBED_WAIT:
                    self.runs_disturbed += 1
                self.log("%-28s %-8s rep=%d %s" % (label, side, rep + 1, self.fmt_run(out)))
        return res

    @staticmethod
    def fmt_run(out):
        s = "us/op=%.3f ops/s=%.0f run_s=%.2f server_cpu=%.2f server_wait=%.3f cmdstat_us=%.3f" % (
            out["us_op"], out["ops_s"], out["secs"], out["util"], out["wait"], out["cmdstat_us"])
        if "replica_us_op" in out:
            s += " replica_us/op=%.3f" % out["replica_us_op"]
        for k in ("granted", "matched", "reload_s", "n"):
            if k in out:
                s += " %s=%s" % (k, out[k])
        mod = {k: v for k, v in out["mod"].items() if v and k in (
            "grants", "refused", "releases", "releases_not_owner", "extends", "extends_not_owner")}
        if mod:
            s += " module:" + ",".join("%s=%d" % kv for kv in sorted(mod.items()))
        return s

    # ---- rows -----------------------------------------------------------------
    @staticmethod
    def cell(runs, label=""):
        us = [x["us_op"] for x in runs]
        ops = statistics.median(x["ops_s"] for x in runs)
        return statistics.median(us), "%s%.3f µs (%.3f–%.3f) · %s ops/s" % (
            label, statistics.median(us), min(us), max(us), n_fmt(ops))

    def cpu_row(self, figure, res, native, module="module"):
        mn, sn = self.cell(res[native], "" if native == "native" else "`%s` " % native)
        mm, sm = self.cell(res[module])
        ratio = mn / mm
        met = ratio >= 1.0
        self.rows.append((figure, sn, sm, ratio_fmt(ratio, met, lambda r: r >= 1.0), "≥ 1.00",
                          "yes" if met else "**NO**"))
        self.log("%-28s median us/op %s=%.3f module=%.3f ratio=%.3f" % (figure[:28], native, mn, mm, ratio))
        if self.replica:
            self.replica_us.setdefault(figure.split(" —")[0], []).append(
                (native, statistics.median(x["replica_us_op"] for x in res[native]),
                 statistics.median(x["replica_us_op"] for x in res[module])))

    def na_row(self, figure, why):
        self.rows.append((figure, "n/a (%s)" % why, "—", "—", "≥ 1.00", "n/a"))

    def error_row(self, figure, e):
        self.log("%s FAILED: %r" % (figure, e))
        self.rows.append((figure, "FAILED: %s" % str(e).replace("|", "/")[:160], "—", "—", "≥ 1.00", "ERROR"))
        self.failed.append(figure)

    # ---- probes -------------------------------------------------------------------
    def probe_natives(self):
        c = self.c
        has = {}
        for cmd in ("DELIFEQ", "DELEX"):
            info = c.call("COMMAND", "INFO", cmd)
            has[cmd] = bool(info and info[0])
        c.call("SET", "probe:ifeq", "a")
        try:
            has["SET IFEQ"] = c.call("SET", "probe:ifeq", "b", "IFEQ", "a") == "OK" \
                and c.call("GET", "probe:ifeq") == b"b"
        except RespError:
            has["SET IFEQ"] = False
        c.call("DEL", "probe:ifeq")
        if has["DELEX"]:  # DELEX exists; does it take IFEQ?
            c.call("SET", "probe:delex", "a")
            try:
                has["DELEX"] = c.call("DELEX", "probe:delex", "IFEQ", "a") == 1
            except RespError:
                has["DELEX"] = False
            c.call("DEL", "probe:delex")
        self.has = has
        self.log("native commands: %s" % ", ".join("%s=%s" % (k, "yes" if v else "no") for k, v in has.items()))

    # ---- memory ---------------------------------------------------------------------
    def used_memory(self):
        return int(self.c.info("memory")["used_memory"])

    def grow(self, commands_or_chunks, keys, db=0):
        self.flushall()
        time.sleep(0.2)
        m0 = self.used_memory()
        self.pipe_load(db, commands_or_chunks)
        time.sleep(0.2)
        m1 = self.used_memory()
        if dbsize(self.c, db) != keys:
            raise RuntimeError("memory: expected %d keys, got %d" % (keys, dbsize(self.c, db)))
        return (m1 - m0) / keys

    def memory(self):
        now = int(time.time() * 1000)
        g = {}
        g["excl_lock"] = self.grow(self.gen_locks(MEM_EXCL, True, MEM_PX), MEM_EXCL)
        g["excl_string"] = self.grow(self.gen_locks(MEM_EXCL, False, MEM_PX), MEM_EXCL)
        g["shared_lock"] = self.grow(self.chunks(
            [["LOCK.ACQUIRE", "lock:%012d" % i, TOKEN, "PX", MEM_PX, "SHARED"] for i in range(MEM_SMALL)]), MEM_SMALL)
        g["small_string"] = self.grow(self.gen_locks(MEM_SMALL, False, MEM_PX), MEM_SMALL)
        g["holders_lock"] = self.grow(self.chunks(
            [["LOCK.ACQUIRE", "sem:%05d" % k, t, "PX", MEM_PX, "LIMIT", 100]
             for k in range(MEM_SMALL) for t in HOLDER_TOKENS]), MEM_SMALL)
        holders = len((dict(zip(*[iter(self.c.call("LOCK.INFO", "sem:00000"))] * 2))).get(b"holders") or [])
        zadd = [["ZADD", "sem:%05d" % k] + [x for j, t in enumerate(HOLDER_TOKENS) for x in (now + j, t)]
                for k in range(MEM_SMALL)]
        g["holders_zset"] = self.grow(self.chunks(zadd), MEM_SMALL)
        enc = self.c.call("OBJECT", "ENCODING", "sem:00000")
        enc = enc.decode() if isinstance(enc, bytes) else str(enc)
        # For the notes: the same sorted sets with a TTL, as the lock key has.
        g["holders_zset_ttl"] = self.grow(self.chunks(
            [c for z in zadd for c in (z, ["PEXPIRE", z[1], MEM_PX])]), MEM_SMALL)
        self.flushall()
        self.log("memory bytes/key: %s (sorted set encoding %s; LOCK.INFO holders %d)"
                 % (" ".join("%s=%.1f" % kv for kv in g.items()), enc, holders))
        valkey = self.version.lower().startswith("valkey")

        def mrow(figure, mod, nat, target):
            ratio = g[mod] / g[nat]
            if target is None:
                t, met, shown = "report", "—", "%.2f" % ratio
            else:
                ok = ratio <= target
                t, met = "≤ %.2f" % target, "yes" if ok else "**NO**"
                shown = ratio_fmt(ratio, ok, lambda r: r <= target)
            self.rows.append((figure, "%.1f B" % g[nat], "%.1f B" % g[mod], shown, t, met))
        mrow("M1. memory per key: exclusive lock vs string lock, %s keys (used_memory growth / keys)"
             % n_fmt(MEM_EXCL), "excl_lock", "excl_string", None if valkey else 1.10)
        mrow("M2. memory per key: one SHARED holder vs string lock, %s keys" % n_fmt(MEM_SMALL),
             "shared_lock", "small_string", 1.50)
        mrow("M3. memory per key: %d holders (LIMIT 100) vs a sorted set of the %d tokens (%s), %s keys"
             % (HOLDERS, HOLDERS, enc, n_fmt(MEM_SMALL)), "holders_lock", "holders_zset", 1.00)
        self.notes.append(
            "Memory: each case on an emptied server (`FLUSHALL SYNC`), keys loaded with `redis-cli --pipe`, "
            "32-byte tokens, figure = `used_memory` growth / keys. M1: %s × `LOCK.ACQUIRE lock:%%012d T PX %d` "
            "vs `SET lock:%%012d T NX PX %d`%s. M2: %s × `LOCK.ACQUIRE lock:%%012d T PX %d SHARED` vs the same "
            "`SET … NX PX` on %s keys. M3: %s keys `sem:%%05d`, each `LOCK.ACQUIRE sem:k t_i PX %d LIMIT 100` "
            "for 10 tokens t_0..t_9 (LOCK.INFO shows %d holders) vs one `ZADD sem:k <ms> t_0 … <ms+9> t_9` "
            "(encoding `%s`, no TTL); the same sorted sets with a `PEXPIRE` (a TTL, as every lock key has): "
            "%.1f B/key (ratio %.2f)."
            % (n_fmt(MEM_EXCL), MEM_PX, MEM_PX,
               " (target ≤ 1.10 on Redis; Valkey, built with libc malloc here: reported only)",
               n_fmt(MEM_SMALL), MEM_PX, n_fmt(MEM_SMALL), n_fmt(MEM_SMALL), MEM_PX, holders, enc,
               g["holders_zset_ttl"], g["holders_lock"] / g["holders_zset_ttl"]))

    # ---- the pairs --------------------------------------------------------------------
    def acquire_granted(self, setup):
        native = ["SET", "lock:__rand_int__", TOKEN, "NX", "PX", 60000]
        module = ["LOCK.ACQUIRE", "lock:__rand_int__", TOKEN, "PX", 60000]

        def one(args, n):
            self.flushall()
            out = self.bench(args, n, r=GRANT_R)
            out["granted"] = "%.4f" % (dbsize(self.c, 0) / n)
            return out
        n = self.size("1 acquire granted/" + setup, [lambda k: one(native, k)["ops_s"],
                                                     lambda k: one(module, k)["ops_s"]])

        def mk(side, args):
            def fn(rep):
                out = one(args, n)
                self.grants.setdefault(side, []).append(float(out["granted"]))
                return out
            return fn
        res = self.pair("1 acquire granted/" + setup, [("native", mk("native", native)),
                                                        ("module", mk("module", module))])
        self.flushall()
        self.cpu_row("1. acquire granted — " + setup, res, "native")

    def prefill(self):
        """The key set of pairs 2-4. Loaded with `redis-cli --pipe` once per
        server binary (in the first setup) and saved as a snapshot; the
        other setups, and the release pair before its runs, load that
        snapshot into the primary and the replica (DEBUG RELOAD, untimed),
        so that every setup starts from the same keys."""
        t0 = time.monotonic()
        if self.snapshot is None:
            self.flushall()
            self.pipe_load(0, self.gen_locks(LOCKS, True, PREFILL_PX))
            self.pipe_load(1, self.gen_locks(LOCKS, False, PREFILL_PX))
            self.sync_replica()
            self.check_full("prefill")
            t1 = time.monotonic()
            self.c.call("SAVE")
            path = os.path.join(self.work, "prefill-%d.rdb" % id(self))
            shutil.copyfile(os.path.join(self.m.dir, "snapshot.rdb"), path)
            self.snapshot = path
            self.log("prefilled %d locks and %d strings in %.1f s; snapshot saved in %.1f s"
                     % (LOCKS, LOCKS, t1 - t0, time.monotonic() - t1))
        else:
            self.reload(copy=True)
            self.log("loaded the prefill snapshot in %.1f s" % (time.monotonic() - t0))

    def check_full(self, what):
        for s in (self.m, self.replica):
            for db in (0, 1):
                if s and dbsize(s.c, db) != LOCKS:
                    raise RuntimeError("%s: %d keys in db %d of the %s server, not %d"
                                       % (what, dbsize(s.c, db), db, s.name, LOCKS))

    def reload(self, copy=False):
        """The primary and the replica back to the prefill snapshot
        (untimed). The replica keeps its link: DEBUG RELOAD is not
        replicated, both load the same file."""
        t0 = time.monotonic()
        servers = [s for s in (self.m, self.replica) if s]
        for s in servers:
            if copy:  # a replica's full sync has written over its file
                shutil.copyfile(self.snapshot, os.path.join(s.dir, "snapshot.rdb"))
            s.c.send("DEBUG", "RELOAD", "NOSAVE")
        for s in servers:
            s.c.read()
        self.check_full("reload")
        return time.monotonic() - t0

    def sample_owner(self, db, key):
        self.c.call("SELECT", db)
        try:
            if db == 0:
                info = self.c.call("LOCK.INFO", key)
                return dict(zip(info[::2], info[1::2])).get(b"token") if info else None
            return self.c.call("GET", key)
        finally:
            self.c.call("SELECT", 0)

    def acquire_refused(self, setup):
        native = ["SET", "lock:__rand_int__", OTHER, "NX", "PX", 60000]
        module = ["LOCK.ACQUIRE", "lock:__rand_int__", OTHER, "PX", 60000]
        n = self.size("2 acquire refused/" + setup, [lambda k: self.bench(native, k, r=LOCKS, db=1)["ops_s"],
                                                     lambda k: self.bench(module, k, r=LOCKS)["ops_s"]])
        bad = []

        def mk(side, args, db):
            def fn(rep):
                out = self.bench(args, n, r=LOCKS, db=db)
                if side == "module" and out["mod"].get("refused", 0) != n:
                    bad.append("module refused %d of %d" % (out["mod"].get("refused", 0), n))
                return out
            return fn
        res = self.pair("2 acquire refused/" + setup, [("native", mk("native", native, 1)),
                                                        ("module", mk("module", module, 0))])
        for db in (0, 1):
            if dbsize(self.c, db) != LOCKS:
                bad.append("db %d has %d keys" % (db, dbsize(self.c, db)))
            for i in random.Random(db).sample(range(LOCKS), 20):
                if self.sample_owner(db, "lock:%012d" % i) != TOKEN.encode():
                    bad.append("db %d lock:%012d changed owner" % (db, i))
                    break
        if bad:
            raise RuntimeError("not every call was refused: " + "; ".join(bad))
        self.check_full("after the refused acquires")
        self.cpu_row("2. acquire refused — " + setup, res, "native")

    def extend(self, setup):
        native = ["SET", "lock:__rand_int__", TOKEN, "IFEQ", TOKEN, "PX", 60000]
        module = ["LOCK.EXTEND", "lock:__rand_int__", TOKEN, "PX", 60000]
        e0 = int(self.c.info("stats")["expired_keys"])
        started = time.monotonic()
        n = self.size("4 extend matching/" + setup, [lambda k: self.bench(native, k, r=LOCKS, db=1)["ops_s"],
                                                     lambda k: self.bench(module, k, r=LOCKS)["ops_s"]])
        bad = []

        def mk(side, args, db):
            def fn(rep):
                if time.monotonic() - started > 45:  # PX 60000 shortens the prefill's TTLs
                    raise RuntimeError("the extend pair ran past 45 s: its keys could start to expire")
                out = self.bench(args, n, r=LOCKS, db=db)
                if side == "module" and out["mod"].get("extends", 0) != n:
                    bad.append("module extended %d of %d" % (out["mod"].get("extends", 0), n))
                return out
            return fn
        res = self.pair("4 extend matching/" + setup, [("native", mk("native", native, 1)),
                                                        ("module", mk("module", module, 0))])
        expired = int(self.c.info("stats")["expired_keys"]) - e0
        if expired or any(dbsize(self.c, db) != LOCKS for db in (0, 1)):
            bad.append("%d keys expired; key counts %d / %d" % (expired, dbsize(self.c, 0), dbsize(self.c, 1)))
        if bad:
            raise RuntimeError("not every extend matched: " + "; ".join(bad))
        self.check_full("after the extends")
        self.cpu_row("4. extend matching — " + setup, res, "native")

    def release(self, setup, natives):
        """natives: [(label, args)]; every run starts from the full set:
        before a run, whenever its side's db is not full, both dbs are
        reloaded from the snapshot."""
        sides = [(label, args, 1) for label, args in natives]
        sides.append(("module", ["LOCK.RELEASE", "lock:__rand_int__", TOKEN], 0))
        bad = []

        def mk(side, args, db):
            def fn(rep):
                rs = None
                if dbsize(self.c, db) != LOCKS:  # this side's keys are not all there: reload
                    rs = self.reload()
                    self.reload_s.append(rs)
                out = self.bench(args, N_RELEASE, r=LOCKS, db=db)
                gone = LOCKS - dbsize(self.c, db)
                m = gone / N_RELEASE
                self.matched.setdefault(side, []).append(m)
                out["matched"] = "%.4f" % m
                if rs is not None:
                    out["reload_s"] = "%.2f" % rs
                if self.replica:
                    rgone = LOCKS - dbsize(self.replica.c, db)
                    if rgone != gone:
                        bad.append("the replica deleted %d keys, the primary %d" % (rgone, gone))
                if side == "module" and out["mod"].get("releases", 0) != gone:
                    bad.append("module releases %d, keys gone %d" % (out["mod"].get("releases", 0), gone))
                return out
            return fn
        res = self.pair("3 release matching/" + setup, [(s, mk(s, a, db)) for s, a, db in sides])
        if bad:
            raise RuntimeError("; ".join(bad))
        for i, (label, _) in enumerate(natives):
            self.cpu_row("3. release matching%s — %s" % (" (%s)" % label if i else "", setup), res, label)

    def run_setup(self, setup):
        self.start(setup)
        try:
            if setup == "plain":
                self.probe_natives()
                try:
                    self.memory()
                except Exception as e:  # reported, and fails the run
                    self.error_row("M. memory rows", e)
            has = self.has
            natives_rel = []
            if has["DELIFEQ"]:
                natives_rel.append(("DELIFEQ", ["DELIFEQ", "lock:__rand_int__", TOKEN]))
            if has["DELEX"]:
                natives_rel.append(("DELEX IFEQ", ["DELEX", "lock:__rand_int__", "IFEQ", TOKEN]))
            steps = [("1. acquire granted — " + setup, lambda: self.acquire_granted(setup))]
            steps.append(("prefill (pairs 2–4) — " + setup, self.prefill))
            steps.append(("2. acquire refused — " + setup, lambda: self.acquire_refused(setup)))
            if has["SET IFEQ"]:
                steps.append(("4. extend matching — " + setup, lambda: self.extend(setup)))
            if natives_rel:
                steps.append(("3. release matching — " + setup, lambda: self.release(setup, natives_rel)))
            prefilled = True
            for figure, fn in steps:
                if figure[0] in "234" and not prefilled:
                    self.error_row(figure, "no prefilled key set")
                    continue
                ts = time.monotonic()
                try:
                    fn()
                except Exception as e:  # reported, and fails the run
                    self.error_row(figure, e)
                    if figure.startswith("prefill"):
                        prefilled = False
                    try:
                        self.c.call("SELECT", 0)
                    except Exception:
                        pass
                self.log("%s took %.1f s" % (figure, time.monotonic() - ts))
            if not has["SET IFEQ"]:
                self.na_row("4. extend matching — " + setup, "no SET IFEQ")
            if not natives_rel:
                self.na_row("3. release matching — " + setup, "no DELIFEQ, no DELEX")
        finally:
            self.stop()

    def run(self):
        t0 = time.monotonic()
        for setup, _ in SETUPS:
            try:
                self.run_setup(setup)
            except Exception as e:
                self.error_row("setup " + setup, e)
        self.elapsed = time.monotonic() - t0
        self.log("took %.1f s" % self.elapsed)
        self.finish_notes()

    def finish_notes(self):
        if self.grants:
            self.notes.append(
                "1: `redis-benchmark -r %d`, `FLUSHALL SYNC` before every run; share of calls that created a "
                "key (the rest met a key an earlier call of the run had taken): native %.2f%%, module %.2f%%."
                % (GRANT_R, 100 * statistics.mean(self.grants["native"]),
                   100 * statistics.mean(self.grants["module"])))
        self.notes.append(
            "2–4: %s prefilled keys `lock:%%012d` per side (module locks in db 0, `SET … NX PX %d` strings "
            "in db 1, one 32-byte token T), `-r %d`; loaded with `redis-cli --pipe` in the plain setup and "
            "saved, then loaded from that snapshot (`DEBUG RELOAD NOSAVE`, primary and replica) in the others. "
            "2: token O ≠ T, every call refused (module counter `refused` = calls; keys and owners unchanged). "
            "4: every call matches (module counter `extends` = calls, no key expired)."
            % (n_fmt(LOCKS), PREFILL_PX, LOCKS))
        if self.matched:
            expect = LOCKS * (1 - (1 - 1 / LOCKS) ** N_RELEASE) / N_RELEASE
            self.notes.append(
                "3: every run starts from the full key set — before a run whose side's db is not full, both dbs "
                "are reloaded from the snapshot (`DEBUG RELOAD NOSAVE`, untimed, %s; on the replica too) — and "
                "sends %s releases over the %s keys: a key drawn twice answers 0 the second time, the same mix "
                "for both sides. Share that matched and deleted: %s (expected %.1f%%)."
                % ("%.1f s median" % statistics.median(self.reload_s) if self.reload_s else "not needed",
                   n_fmt(N_RELEASE), n_fmt(LOCKS),
                   ", ".join("%s %.1f%%" % (k, 100 * statistics.mean(v)) for k, v in self.matched.items()),
                   100 * expect))
        if self.replica_us:
            self.notes.append(
                "Replica setup: the replica (module loaded) is pinned to CPU 1 with the clients; its own CPU time "
                "over a run / the run's operations, median (a refused acquire sends it nothing): " + "; ".join(
                    "%s: %s %.3f µs, module %.3f µs" % (fig, "native" if nat == "native" else "`%s`" % nat, a, b)
                    for fig, vals in self.replica_us.items() for nat, a, b in vals) + ".")
        self.notes.append(
            "Runs: %d counted, %d of them disturbed (server's main thread runnable but waiting for a CPU more "
            "than %.0f%% of the run: other load on the machine), %d discarded and rerun; server CPU per op is "
            "the figure least affected by such load." % (self.runs_total, self.runs_disturbed,
                                                          100 * DISTURBED_WAIT, self.reruns))


def machine_line():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "nproc %d · %s" % (os.cpu_count(), model)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def write_report(out_dir, benches, module, elapsed, load_before, load_after, server_cpus, client_cpus):
    with open(module, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    lines = [
        "# redislock vs the servers' own lock commands",
        "",
        "Machine: " + machine_line(),
        "",
        "Run: %s · took %.0f s · module sha256 %s… · `redis-benchmark -c 50 -P 16` · servers pinned to CPU %s, "
        "clients and the replica to CPU %s · load average before/after: %s / %s · %d runs per side "
        "(BENCH_SCALE=%g)" % (time.strftime("%Y-%m-%d %H:%M:%S %Z"), elapsed, digest, server_cpus or "-",
                              client_cpus or "-", load_before, load_after, REPS, SCALE),
        "",
        "CPU rows: server CPU time per operation — utime+stime of the server process (all threads, "
        "`/proc/PID/stat`) over a run / the run's operations — median (min–max) over the alternating runs, "
        "and the median ops/s; both sides on the same server process, which has the module loaded. "
        "Ratio = native µs/op / module µs/op (≥ 1.00: the module takes no more CPU than the native command). "
        "Memory rows: `used_memory` growth per key; ratio = module / native.",
        "",
        "## Summary (ratios)",
        "",
        "| figure | " + " | ".join(b.short for b in benches) + " |",
        "|---|" + "---|" * len(benches),
    ]
    figures = []
    for b in benches:
        for row in b.rows:
            if row[0] not in figures:
                figures.append(row[0])

    def key(fig):  # M rows last, pairs in number order, setups in order
        setup = next((i for i, (s, _) in enumerate(SETUPS) if fig.endswith("— " + s)), 9)
        return (fig.startswith("M"), fig.split(".")[0], setup, fig)
    figures.sort(key=key)
    for fig in figures:
        cells = []
        for b in benches:
            row = next((r for r in b.rows if r[0] == fig), None)
            if row is None:
                cells.append("—")
            elif row[5] in ("n/a", "ERROR"):
                cells.append(row[5])
            else:
                cells.append("%s%s" % (row[3], {"yes": " ✓", "**NO**": " **NO**"}.get(row[5], "")))
        short = fig.split(" (used_memory")[0]
        lines.append("| %s | %s |" % (short, " | ".join(cells)))
    lines += ["", "✓ = target met (CPU rows ≥ 1.00; M1 ≤ 1.10 on Redis, reported only on Valkey; M2 ≤ 1.50; "
              "M3 ≤ 1.00); **NO** = missed; n/a = the server has no such native command."]
    for b in benches:
        lines += ["", "## %s" % b.version, "", "Took %.0f s." % b.elapsed, "",
                  "| figure | native | module | ratio | target | met |", "|---|---|---|---|---|---|"]
        lines += ["| %s |" % " | ".join(r) for r in sorted(b.rows, key=lambda r: key(r[0]))]
        missed = [r[0] for r in b.rows if r[5] == "**NO**"]
        lines += ["", "Targets missed: " + ("; ".join(missed) if missed else "none"), "", "Notes:", ""]
        lines += ["- " + n for n in b.notes]
    lines += [
        "",
        "## Method",
        "",
        "- Commands (native | module): 1 `SET lock:__rand_int__ T NX PX 60000` | `LOCK.ACQUIRE "
        "lock:__rand_int__ T PX 60000`; 2 `SET lock:__rand_int__ O NX PX 60000` | `LOCK.ACQUIRE "
        "lock:__rand_int__ O PX 60000`; 3 `DELIFEQ lock:__rand_int__ T` (Valkey ≥ 9.0) and `DELEX "
        "lock:__rand_int__ IFEQ T` (Redis ≥ 8.4) | `LOCK.RELEASE lock:__rand_int__ T`; 4 `SET "
        "lock:__rand_int__ T IFEQ T PX 60000` (Valkey ≥ 8.1) | `LOCK.EXTEND lock:__rand_int__ T PX 60000`. "
        "A pair runs where the server has the native command: `COMMAND INFO DELIFEQ` / `DELEX` (and a trial "
        "`DELEX k IFEQ v`), a trial `SET k b IFEQ a` on a scratch key.",
        "- Setups, each on fresh servers with the module: plain `--save \"\" --appendonly no`; AOF "
        "`--appendonly yes --appendfsync everysec --auto-aof-rewrite-percentage 0` (no rewrite fork during a "
        "run); replica: a second server with the module, `REPLICAOF` the first, synced before the runs, pinned "
        "to CPU 1 with the clients; after every run the primary's CPU time is read once the replica's "
        "`slave_repl_offset` has reached the primary's `master_repl_offset`, so sending the run to the replica "
        "is counted.",
        "- Every run: `redis-benchmark -h 127.0.0.1 -p PORT -c 50 -P 16 -n N -r R [--dbnum 1] --csv "
        "<command>`, pinned with `taskset -c 1`; N from a probe of %s requests per side, so that a run takes "
        "about %.1f s (release: %s calls, tied to the key set). Sides alternate run by run, %d runs each; "
        "every run checks that the server counted exactly N calls of the command and no error reply."
        % (n_fmt(PROBE_N), RUN_S, n_fmt(N_RELEASE), REPS),
        "- CPU per op: utime+stime (`/proc/PID/stat` fields 14+15, every thread of the process, %d ticks/s) "
        "before and after the run. A run whose server main thread waited for a CPU more than %.0f%% of the "
        "run (`/proc/PID/task/PID/schedstat`) is rerun once as time allows; the raw file "
        "(`bench/native-raw.txt`) keeps every run, `INFO commandstats` µs/call and the replica's CPU per op."
        % (CLK_TCK, 100 * DISTURBED_WAIT),
    ]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "native.md"), "w") as f:
        f.write(text)
    print("\n" + text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", action="append", default=[])
    ap.add_argument("--module", required=True)
    ap.add_argument("--out-dir", default=HERE)
    ap.add_argument("--server-cpus", default="")
    ap.add_argument("--client-cpus", default="")
    a = ap.parse_args()
    servers = a.server or [os.environ.get("REDIS_SERVER", "redis-server")]
    for tool in ("redis-benchmark", "redis-cli") + (("taskset",) if a.server_cpus or a.client_cpus else ()):
        if not shutil.which(tool):
            sys.exit("native.py: %s not found" % tool)

    def on_term(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    report = Report(a.out_dir)
    work = tempfile.mkdtemp(prefix="redislock-native.")
    lb = loadavg()
    report.log("# redislock native-command bench %s; %s; REPS=%d SCALE=%g; load average %s"
               % (time.strftime("%Y-%m-%d %H:%M:%S"), machine_line(), REPS, SCALE, lb))
    t0 = time.monotonic()
    benches = []
    try:
        for server in servers:
            b = ServerBench(server, a.module, work, report, a.server_cpus, a.client_cpus)
            report.log("# server %s (%s)" % (server, b.version))
            b.run()
            benches.append(b)
    finally:
        for b in benches + [locals().get("b")]:
            if b is not None:
                b.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - t0
    la = loadavg()
    report.log("# load average at end: %s; took %.1f s" % (la, elapsed))
    write_report(a.out_dir, benches, a.module, elapsed, lb, la, a.server_cpus, a.client_cpus)
    report.raw.close()
    os.replace(report.raw_path + ".part", report.raw_path)
    # Missed targets are reported, not fatal; a figure that could not be measured is.
    return 1 if any(b.failed for b in benches) else 0


if __name__ == "__main__":
    sys.exit(main())
