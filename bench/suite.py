#!/usr/bin/env python3
"""redislock benchmark suite: native LOCK.* commands vs the classic
SET NX PX + Lua pattern. Started by bench/run.sh, which owns the two
redis-server processes (one with the module, one without) and cleans them up.

Throughput pairs run `redis-benchmark -c 50 -P 16` so the server is the
bottleneck, alternating sides (native, classic, native, classic, ...), and
report median and min-max ops/s. Both sides of pairs 1-5 run on the server
with the module; pair 6 compares that server with the plain one.

Knobs (environment): BENCH_REPS (default 5), BENCH_SCALE (multiplies every
request count and the lock-set size; 0.2 for a quick check),
BENCH_CONTENTION_S (default 5). Each pair has a time allowance; once a pair
would overrun it, it stops after 3 repetitions ("as time allows").
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from resp import Redis, RespError  # noqa: E402
import contention  # noqa: E402

RELEASE_LUA = (
    "if redis.call('get',KEYS[1]) == ARGV[1] then "
    "return redis.call('del',KEYS[1]) else return 0 end"
)
EXTEND_LUA = (
    "if redis.call('get',KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire',KEYS[1],ARGV[2]) else return 0 end"
)
# A write guarded by a string lock, the way it is written without the module.
GUARD_LUA = (
    "if redis.call('get',KEYS[1]) == ARGV[1] then "
    "return redis.call('set',KEYS[2],ARGV[2]) else return false end"
)

REPS = int(os.environ.get("BENCH_REPS", "5"))
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
CONTENTION_S = float(os.environ.get("BENCH_CONTENTION_S", "5"))
ROUNDS_EXPIRY = int(os.environ.get("BENCH_EXPIRY_ROUNDS", "100"))
MIN_REPS = min(3, REPS)

# Memory figure: MEM_LOCKS keys `lock:%012d` (17 bytes, the same names
# redis-benchmark's __rand_int__ produces) with a 22-byte token per side. The
# set is then topped up to LOCKS per side for the extend and release pairs.
MEM_LOCKS = max(1000, int(1_000_000 * SCALE))
LOCKS = max(2000, int(1_500_000 * SCALE))
TOKEN = "owner-token-0123456789"
assert len(TOKEN) == 22
PREFILL_PX = 3_600_000  # the snapshot's locks outlive the whole suite

# Requests per run: sized from a short probe of both sides so that a run
# takes about RUN_S seconds (geometric mean of the two sides' rates), except
# for release, whose count is tied to the lock-set size (the mix of matching
# and already-released calls depends on N_RELEASE / LOCKS).
RUN_S = max(0.2, 2.2 * SCALE)
PROBE_N = max(20_000, int(150_000 * min(1.0, SCALE * 2)))
N_RELEASE = int(600_000 * SCALE)  # 40% of LOCKS: ~82% of releases match
# A run during which the server was on a CPU less than this share of the time
# was disturbed by other load on the machine: it is rerun once (logged).
DISTURBED = 0.85


def n_fmt(x):
    return "{:,.0f}".format(x)


class Suite:
    def __init__(self, a):
        self.native_port = a.native_port
        self.plain_port = a.plain_port
        self.out_dir = a.out_dir
        self.client_cpus = {int(c) for c in a.client_cpus.split(",")} if a.client_cpus else None
        self.taskset = (
            ["taskset", "-c", a.client_cpus] if a.client_cpus and shutil.which("taskset") else []
        )
        self.module = a.module
        self.t_start = time.monotonic()
        self.rows = []  # table rows
        self.notes = []  # observations printed under the table
        # Written as it goes; replaces results-raw.txt only when the run ends,
        # so an interrupted run leaves the last complete one in place.
        self.raw_path = os.path.join(self.out_dir, "results-raw.txt")
        self.raw = open(self.raw_path + ".part", "w")
        self.n = Redis(self.native_port)
        self.p = Redis(self.plain_port)
        self.rel_sha = self.n.call("SCRIPT", "LOAD", RELEASE_LUA).decode()
        self.ext_sha = self.n.call("SCRIPT", "LOAD", EXTEND_LUA).decode()
        self.guard_sha = self.n.call("SCRIPT", "LOAD", GUARD_LUA).decode()
        self.usec_notes = []
        self.last_usec = {}
        self.cpu_notes = []
        self.pair_cpu = {}
        self.last_cpu = None
        self.runs_total = 0
        self.runs_disturbed = 0
        self.reruns = 0

    # ---- output -------------------------------------------------------
    def log(self, msg):
        print(msg, flush=True)
        self.raw.write(msg + "\n")
        self.raw.flush()

    def row(self, figure, native, classic, ratio, target, met):
        self.rows.append((figure, native, classic, ratio, target, met))

    # ---- helpers -------------------------------------------------------
    @staticmethod
    def cmdstats(conn):
        out = {}
        for k, v in conn.info("commandstats").items():
            if k.startswith("cmdstat_"):
                f = dict(x.split("=", 1) for x in v.split(","))
                out[k[8:]] = (int(f["calls"]), int(f["usec"]))
        return out

    @staticmethod
    def cpu(conn):
        i = conn.info("cpu")
        return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])

    @staticmethod
    def errors(conn):
        return int(conn.info("stats").get("total_error_replies", "0"))

    def bench(self, conn, port, n, args, r=None, db=0, tests=None):
        """One redis-benchmark run; returns ({test: rps}, seconds, {cmd: usec/call})."""
        cmd = self.taskset + [
            "redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
            "-c", "50", "-P", "16", "-n", str(n), "--csv",
        ]
        if r:
            cmd += ["-r", str(r)]
        if db:
            cmd += ["--dbnum", str(db)]
        if tests:
            cmd += ["-t", tests]
        cmd += [str(x) for x in args]
        s0, e0, c0 = self.cmdstats(conn), self.errors(conn), self.cpu(conn)
        t0 = time.monotonic()
        res = subprocess.run(cmd, capture_output=True, text=True)
        secs = time.monotonic() - t0
        if res.returncode != 0:
            raise RuntimeError("redis-benchmark failed: %s" % res.stderr.strip()[:300])
        c1, s1, e1 = self.cpu(conn), self.cmdstats(conn), self.errors(conn)
        rps = {}
        for line in res.stdout.splitlines():
            cells = [c.strip('"') for c in line.split('","')]
            if len(cells) >= 2 and cells[0] != "test":
                rps[cells[0]] = float(cells[1])
        if not rps:
            raise RuntimeError("no result from redis-benchmark: %r" % res.stdout[:300])
        # Server CPU time: ops per server CPU-second hardly moves when other
        # processes take turns on the server's CPU, unlike ops/s; the share of
        # the run the server was on a CPU flags disturbed runs.
        busy = sum(n / r for r in rps.values())
        cpu_s = max(c1 - c0, 1e-6)
        self.last_cpu = {"ops_per_cpu_s": n * len(rps) / cpu_s, "util": cpu_s / busy}
        per_call = {}
        for name, (calls, usec) in s1.items():
            c0, u0 = s0.get(name, (0, 0))
            if calls - c0 >= n // 2:
                per_call[name] = (usec - u0) / (calls - c0)
        if e1 != e0:
            self.notes.append(
                "WARNING: %d error replies during `%s`" % (e1 - e0, " ".join(cmd[-6:]))
            )
        return rps, secs, per_call

    def size(self, name, probes, run_s=RUN_S):
        """Requests per run so that a run takes ~run_s s: each probe is a
        function(n) -> ops/s, run once with PROBE_N requests."""
        rates = [probe(PROBE_N) for probe in probes]
        gm = 1.0
        for r in rates:
            gm *= r
        gm **= 1.0 / len(rates)
        n = int(max(PROBE_N, min(10_000_000, gm * run_s)) // 10_000 * 10_000) or PROBE_N
        self.log("%-22s probe ops/s %s -> n=%d per run" % (name, "/".join("%.0f" % r for r in rates), n))
        return n

    def pair(self, name, reps_budget_s, runs):
        """Alternate the sides' runs; `runs` is [(side, fn)] where fn(rep)
        returns (rps, secs, extra-dict). Returns {side: [rps...]}."""
        res = {side: [] for side, _ in runs}
        usec = {side: [] for side, _ in runs}
        cpu = {side: [] for side, _ in runs}
        t0 = time.monotonic()
        retries = REPS
        for rep in range(REPS):
            for side, fn in runs:
                for attempt in (1, 2):
                    self.last_cpu = None
                    rps, secs, extra = fn(rep)
                    util = self.last_cpu["util"] if self.last_cpu else 1.0
                    if (attempt == 1 and util < DISTURBED and retries > 0
                            and time.monotonic() - t0 < reps_budget_s):
                        retries -= 1
                        self.reruns += 1
                        self.log("%-22s %-8s rep=%d ops/s=%-10.0f DISCARDED: server on a CPU %.0f%% "
                                 "of the run (other load); rerun" % (name, side, rep + 1, rps, 100 * util))
                        continue
                    break
                res[side].append(rps)
                try:
                    usec[side].append(float(extra.get("usec/call", "")))
                except ValueError:
                    pass
                if self.last_cpu:
                    cpu[side].append(self.last_cpu)
                    extra["server_cpu_util"] = "%.2f" % self.last_cpu["util"]
                    extra["ops_per_cpu_s"] = "%.0f" % self.last_cpu["ops_per_cpu_s"]
                self.log(
                    "%-22s %-8s rep=%d ops/s=%-10.0f run_s=%.2f %s"
                    % (name, side, rep + 1, rps, secs,
                       " ".join("%s=%s" % kv for kv in extra.items()))
                )
            spent = time.monotonic() - t0
            if rep + 1 >= MIN_REPS and spent / (rep + 1) * (rep + 2) > reps_budget_s:
                self.log("%-22s stopping after %d repetitions (time budget)" % (name, rep + 1))
                break
        self.last_usec = {k: v for k, v in usec.items() if v}
        self.pair_cpu = cpu
        return res

    @staticmethod
    def summary(values):
        med = statistics.median(values)
        return med, "{} ({}–{})".format(n_fmt(med), n_fmt(min(values)), n_fmt(max(values)))

    def throughput_row(self, figure, res, native="native", classic="classic", target=None, cmp=">=",
                       label=None, extra=False):
        mn, sn = self.summary(res[native])
        mc, sc = self.summary(res[classic])
        ratio = mn / mc
        met = (ratio >= target) if cmp == ">=" else (ratio <= target)
        self.row(figure, sn, sc, "%.2f" % ratio, "%s %.2f" % ("≥" if cmp == ">=" else "≤", target),
                 ("yes" if met else "no (extra figure)") if extra else ("yes" if met else "**NO**"))
        self.log("%-22s median native=%.0f classic=%.0f ratio=%.3f (n=%d runs each)"
                 % (figure[:22], mn, mc, ratio, len(res[native])))
        c = self.pair_cpu
        if c.get(native) and c.get(classic):
            cn = statistics.median(x["ops_per_cpu_s"] for x in c[native])
            cc = statistics.median(x["ops_per_cpu_s"] for x in c[classic])
            tag = label or figure.split(" (")[0]
            if tag == "6 GET":  # pair 6's runs hold both tests: one CPU figure
                tag = "6 GET+SET"
            self.cpu_notes.append("%s %s vs %s (%.2f)" % (tag, n_fmt(cn), n_fmt(cc), cn / cc))
            self.runs_total += len(c[native]) + len(c[classic])
            self.runs_disturbed += sum(1 for side in (native, classic) for x in c[side] if x["util"] < DISTURBED)
        self.pair_cpu = {}
        u = getattr(self, "last_usec", {})
        if native in u and classic in u:
            un, uc = statistics.median(u[native]), statistics.median(u[classic])
            self.usec_notes.append("%s %.2f vs %.2f µs (%.2f×)" % (label or figure.split(" (")[0], un, uc, uc / un))
        self.last_usec = {}
        return ratio

    def flushall(self, conn):
        conn.call("FLUSHALL")

    def pipe_load(self, port, db, commands):
        """Feed RESP-encoded commands (an iterable of bytes chunks) through
        `redis-cli --pipe`; returns the reply count."""
        p = subprocess.Popen(
            self.taskset + ["redis-cli", "-h", "127.0.0.1", "-p", str(port), "--pipe"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        p.stdin.write(b"*2\r\n$6\r\nSELECT\r\n$%d\r\n%d\r\n" % (len(str(db)), db))
        for chunk in commands:
            p.stdin.write(chunk)
        out, err = p.communicate()
        text = out.decode(errors="replace")
        if p.returncode != 0 or "errors: 0," not in text:
            raise RuntimeError("redis-cli --pipe failed: %s %s" % (text[-300:], err[-300:]))
        return text.strip().splitlines()[-1]

    @staticmethod
    def gen_locks(first, count, native, px):
        """RESP for locks lock:%012d (first .. first+count-1) with TOKEN, as chunks."""
        key_hdr = b"$17\r\nlock:"
        tail = b"\r\n$22\r\n" + TOKEN.encode() + b"\r\n$2\r\nPX\r\n$%d\r\n%d\r\n" % (len(str(px)), px)
        if native:
            head = b"*5\r\n$12\r\nLOCK.ACQUIRE\r\n" + key_hdr
        else:
            head = b"*6\r\n$3\r\nSET\r\n" + key_hdr
            tail = tail + b"$2\r\nNX\r\n"
        step = 50_000
        for start in range(first, first + count, step):
            stop = min(first + count, start + step)
            yield b"".join(head + b"%012d" % i + tail for i in range(start, stop))

    def used_memory(self, conn):
        return int(conn.info("memory")["used_memory"])

    def dbsize(self, conn, db):
        ks = conn.info("keyspace").get("db%d" % db)
        if not ks:
            return 0
        return int(dict(x.split("=") for x in ks.split(","))["keys"])

    def reload_snapshot(self):
        t0 = time.monotonic()
        self.n.call("DEBUG", "RELOAD", "NOSAVE")
        return time.monotonic() - t0

    # ---- the pairs --------------------------------------------------------
    def overhead(self):
        """6. GET/SET on the server with the module vs the one without."""
        def probe(n):
            self.flushall(self.p)
            rps = self.bench(self.p, self.plain_port, n, [], r=1_000_000, tests="get,set")[0]
            return (rps["GET"] * rps["SET"]) ** 0.5
        n_getset = self.size("6 overhead get/set", [probe], RUN_S / 2)  # two tests per run

        def run(conn, port):
            def fn(rep):
                self.flushall(conn)
                rps, secs, pc = self.bench(conn, port, n_getset, [], r=1_000_000, tests="get,set")
                fn.last.append((rps, pc))
                return (rps["SET"] + rps["GET"]) / 2, secs, {
                    "SET": "%.0f" % rps["SET"], "GET": "%.0f" % rps["GET"],
                    "usec/call": "set:%.2f,get:%.2f" % (pc.get("set", 0), pc.get("get", 0)),
                }
            fn.last = []
            return fn
        fm, fp = run(self.n, self.native_port), run(self.p, self.plain_port)
        self.pair("6 overhead get/set", 40, [("module", fm), ("plain", fp)])
        self.flushall(self.n)
        self.flushall(self.p)
        for test in ("GET", "SET"):
            res = {"module": [v[0][test] for v in fm.last], "plain": [v[0][test] for v in fp.last]}
            self.last_usec = {"module": [v[1].get(test.lower(), 0) for v in fm.last],
                              "plain": [v[1].get(test.lower(), 0) for v in fp.last]}
            self.throughput_row("6. %s, server with module vs without (ops/s)" % test, res,
                                native="module", classic="plain", target=0.98, label="6 " + test)

    def overhead_events(self):
        """6b (extra). A write that raises a generic key event ('expire'):
        the module subscribes to generic/expired/evicted events, so Redis calls
        into it for every such event on any key; GET and plain SET raise none."""
        args = ["SET", "key:__rand_int__", "v", "PX", "60000"]

        def probe(n):
            self.flushall(self.p)
            return list(self.bench(self.p, self.plain_port, n, args, r=1_000_000)[0].values())[0]
        n_setpx = self.size("6b overhead set px", [probe])

        def run(conn, port):
            def fn(rep):
                self.flushall(conn)
                rps, secs, pc = self.bench(conn, port, n_setpx, args, r=1_000_000)
                return list(rps.values())[0], secs, {"usec/call": "%.2f" % pc.get("set", 0)}
            return fn
        res = self.pair("6b overhead set px", 30, [("module", run(self.n, self.native_port)),
                                                  ("plain", run(self.p, self.plain_port))])
        self.flushall(self.n)
        self.flushall(self.p)
        self.throughput_row("6b. (extra) SET key v PX 60000 — raises an 'expire' key event — "
                            "with module vs without (ops/s)", res,
                            native="module", classic="plain", target=0.98, label="6b SET PX", extra=True)

    def acquire_granted(self):
        """1. LOCK.ACQUIRE vs SET NX PX on fresh keys."""
        grants = {}
        a_native = ["LOCK.ACQUIRE", "lock:__rand_int__", "tok", "PX", "60000"]
        a_classic = ["SET", "lock:__rand_int__", "tok", "NX", "PX", "60000"]

        def probe(args):
            def p(n):
                self.flushall(self.n)
                return list(self.bench(self.n, self.native_port, n, args, r=100_000_000)[0].values())[0]
            return p
        n_acq = self.size("1 acquire granted", [probe(a_native), probe(a_classic)])

        def mk(side, args):
            def fn(rep):
                self.flushall(self.n)
                rps, secs, pc = self.bench(self.n, self.native_port, n_acq, args, r=100_000_000)
                g = self.dbsize(self.n, 0) / n_acq
                grants.setdefault(side, []).append(g)
                return list(rps.values())[0], secs, {
                    "granted": "%.4f" % g,
                    "usec/call": "%.2f" % max(pc.values(), default=0),
                }
            return fn
        res = self.pair("1 acquire granted", 40, [
            ("native", mk("native", a_native)),
            ("classic", mk("classic", a_classic)),
        ])
        self.flushall(self.n)
        self.throughput_row("1. acquire, granted (ops/s)", res, target=0.95)
        self.notes.append(
            "1: `-r 100000000`, FLUSHALL before every run; share of calls that created a lock "
            "(the rest hit a key already taken by an earlier call of the run): native %.2f%%, classic %.2f%%."
            % (100 * statistics.mean(grants["native"]), 100 * statistics.mean(grants["classic"])))

    def acquire_refused(self):
        """2. Both refused: one key held by another token."""
        self.flushall(self.n)
        self.n.call("LOCK.ACQUIRE", "held", "owner", "PX", "600000")
        self.n.call("SET", "heldstr", "owner", "PX", "600000")

        a_native = ["LOCK.ACQUIRE", "held", "tok", "PX", "60000"]
        a_classic = ["SET", "heldstr", "tok", "NX", "PX", "60000"]

        def probe(args):
            return lambda n: list(self.bench(self.n, self.native_port, n, args)[0].values())[0]
        n_refused = self.size("2 acquire refused", [probe(a_native), probe(a_classic)])

        def mk(args):
            def fn(rep):
                rps, secs, pc = self.bench(self.n, self.native_port, n_refused, args)
                return list(rps.values())[0], secs, {"usec/call": "%.2f" % max(pc.values(), default=0)}
            return fn
        res = self.pair("2 acquire refused", 30, [("native", mk(a_native)), ("classic", mk(a_classic))])
        info = self.n.call("LOCK.INFO", "held")
        owner = dict(zip(info[::2], info[1::2])).get(b"token")
        still = owner == b"owner" and self.n.call("GET", "heldstr") == b"owner"
        if not still:
            self.notes.append("WARNING 2: a held lock changed owner during the refused-acquire runs!")
        self.flushall(self.n)
        self.throughput_row("2. acquire, refused (ops/s)", res, target=0.95)

    def memory_and_snapshot(self):
        """5. used_memory growth for MEM_LOCKS locks each side. Then tops both
        sides up to LOCKS and saves db0 = native locks, db1 = string locks as
        the snapshot that the extend and release pairs start from."""
        self.flushall(self.n)
        time.sleep(0.2)
        m0 = self.used_memory(self.n)
        self.pipe_load(self.native_port, 0, self.gen_locks(0, MEM_LOCKS, True, PREFILL_PX))
        time.sleep(0.2)
        m1 = self.used_memory(self.n)
        self.pipe_load(self.native_port, 1, self.gen_locks(0, MEM_LOCKS, False, PREFILL_PX))
        time.sleep(0.2)
        m2 = self.used_memory(self.n)
        k0, k1 = self.dbsize(self.n, 0), self.dbsize(self.n, 1)
        if k0 != MEM_LOCKS or k1 != MEM_LOCKS:
            raise RuntimeError("prefill: expected %d keys per db, got %d / %d" % (MEM_LOCKS, k0, k1))
        bn, bc = (m1 - m0) / MEM_LOCKS, (m2 - m1) / MEM_LOCKS
        self.n.call("SELECT", 0)
        mu_n = self.n.call("MEMORY", "USAGE", "lock:000000000001")
        self.n.call("SELECT", 1)
        mu_c = self.n.call("MEMORY", "USAGE", "lock:000000000001")
        self.n.call("SELECT", 0)
        ratio = bn / bc
        self.row("5. memory per lock, %s locks (bytes, used_memory growth)" % n_fmt(MEM_LOCKS),
                 "%.1f" % bn, "%.1f" % bc, "%.2f" % ratio, "≤ 1.20", "yes" if ratio <= 1.2 else "**NO**")
        self.log("5 memory               native=%.1f B/lock classic=%.1f B/lock ratio=%.3f "
                 "(used_memory %d -> %d -> %d; MEMORY USAGE of one key: native %s, classic %s)"
                 % (bn, bc, ratio, m0, m1, m2, mu_n, mu_c))
        self.notes.append(
            "5: %s keys `lock:%%012d` (17 bytes) with a 22-byte token, loaded with `redis-cli --pipe` "
            "(`LOCK.ACQUIRE` into db 0, then `SET NX PX` strings into db 1); growth includes the main and "
            "expires dict tables (~17 B/key on both sides). `MEMORY USAGE` of one key: native %s B, "
            "classic %s B (the module's own estimate, not what the allocator spends)."
            % (n_fmt(MEM_LOCKS), mu_n, mu_c))
        t0 = time.monotonic()
        if LOCKS > MEM_LOCKS:
            self.pipe_load(self.native_port, 0, self.gen_locks(MEM_LOCKS, LOCKS - MEM_LOCKS, True, PREFILL_PX))
            self.pipe_load(self.native_port, 1, self.gen_locks(MEM_LOCKS, LOCKS - MEM_LOCKS, False, PREFILL_PX))
        k0, k1 = self.dbsize(self.n, 0), self.dbsize(self.n, 1)
        if k0 != LOCKS or k1 != LOCKS:
            raise RuntimeError("prefill: expected %d keys per db, got %d / %d" % (LOCKS, k0, k1))
        t1 = time.monotonic()
        self.n.call("SAVE")
        self.log("topped up to %d locks per side in %.2f s; snapshot saved in %.2f s"
                 % (LOCKS, t1 - t0, time.monotonic() - t1))
        self.snapshot_at = time.monotonic()

    def extend(self):
        """4. LOCK.EXTEND vs EVALSHA compare-and-pexpire on the prefilled locks."""
        e0 = int(self.n.info("stats")["expired_keys"])
        checks = {}
        a_native = ["LOCK.EXTEND", "lock:__rand_int__", TOKEN, "PX", "60000"]
        a_classic = ["EVALSHA", self.ext_sha, "1", "lock:__rand_int__", TOKEN, "60000"]

        def probe(db, args):
            return lambda n: list(self.bench(self.n, self.native_port, n, args, r=LOCKS, db=db)[0].values())[0]
        n_extend = self.size("4 extend matching", [probe(0, a_native), probe(1, a_classic)])

        def mk(side, db, args):
            def fn(rep):
                # PX 60000 shortens the snapshot's TTLs: reload before any of
                # them could expire mid-run.
                extra = {}
                if time.monotonic() - self.snapshot_at > 40:
                    extra["reload_s"] = "%.2f" % self.reload_snapshot()
                    self.snapshot_at = time.monotonic()
                rps, secs, pc = self.bench(self.n, self.native_port, n_extend, args, r=LOCKS, db=db)
                checks.setdefault(side, []).append(self.dbsize(self.n, db))
                extra["usec/call"] = "%.2f" % max(pc.values(), default=0)
                return list(rps.values())[0], secs, extra
            return fn
        res = self.pair("4 extend matching", 40, [
            ("native", mk("native", 0, a_native)),
            ("classic", mk("classic", 1, a_classic)),
        ])
        expired = int(self.n.info("stats")["expired_keys"]) - e0
        # Every extend must have matched: the key set is complete and nothing expired.
        ok = expired == 0 and all(k == LOCKS for v in checks.values() for k in v)
        # Spot check that the extends took effect (TTL now <= 60 s on some key).
        self.throughput_row("4. extend, matching (ops/s)", res, target=2.0)
        self.notes.append(
            "4: %s prefilled locks per side (db 0 native, db 1 strings, same key names and 22-byte token), "
            "`-r %d`: every call matches (all keys present, %d expired during the runs%s)."
            % (n_fmt(LOCKS), LOCKS, expired, "" if ok else " — WARNING: key set incomplete"))

    def guarded_write(self):
        """9. LOCK.CALL lock token SET data v vs EVALSHA of a GET-compare-SET
        guard against a string lock, on the prefilled locks: every call holds
        its lock and writes."""
        a_native = ["LOCK.CALL", "lock:__rand_int__", TOKEN, "SET", "guarded", "v"]
        a_classic = ["EVALSHA", self.guard_sha, "2", "lock:__rand_int__", "guarded", TOKEN, "v"]

        def probe(db, args):
            return lambda n: list(self.bench(self.n, self.native_port, n, args, r=LOCKS, db=db)[0].values())[0]
        n_calls = self.size("9 guarded write", [probe(0, a_native), probe(1, a_classic)])

        def mk(db, args):
            def fn(rep):
                extra = {}
                if time.monotonic() - self.snapshot_at > 40:
                    extra["reload_s"] = "%.2f" % self.reload_snapshot()
                    self.snapshot_at = time.monotonic()
                rps, secs, pc = self.bench(self.n, self.native_port, n_calls, args, r=LOCKS, db=db)
                extra["usec/call"] = "%.2f" % max(pc.values(), default=0)
                return list(rps.values())[0], secs, extra
            return fn
        res = self.pair("9 guarded write", 40, [
            ("native", mk(0, a_native)),
            ("classic", mk(1, a_classic)),
        ])
        written = []
        for db in (0, 1):
            self.n.call("SELECT", db)
            written.append(self.n.call("GET", "guarded"))
            self.n.call("DEL", "guarded")
        self.n.call("SELECT", 0)
        self.throughput_row("9. guarded write (ops/s)", res, target=1.0)
        self.notes.append(
            "9: `LOCK.CALL lock:<rand> <token> SET guarded v` against `EVALSHA` of "
            "`if GET(lock) == token then SET(data, v)`, on the same prefilled locks (db 0 native, db 1 "
            "strings); every call holds its lock and writes (%s)." % (
                "both sides wrote" if all(w == b"v" for w in written) else "WARNING: a side did not write"))

    def release(self):
        """3. LOCK.RELEASE vs EVALSHA compare-and-delete. A matching release
        deletes its lock, so every run starts from the full snapshot (DEBUG
        RELOAD NOSAVE before each native/classic pair) and the share of calls
        that matched is measured from the key count."""
        matched = {}
        t_reload = []

        def mk(side, db, args):
            def fn(rep):
                extra = {}
                if self.dbsize(self.n, db) != LOCKS:  # every run starts from the full snapshot
                    t_reload.append(self.reload_snapshot())
                    extra["reload_s"] = "%.2f" % t_reload[-1]
                before = self.dbsize(self.n, db)
                if before != LOCKS:
                    raise RuntimeError("snapshot reload gave %d keys in db %d" % (before, db))
                rps, secs, pc = self.bench(self.n, self.native_port, N_RELEASE, args, r=LOCKS, db=db)
                after = self.dbsize(self.n, db)
                m = (before - after) / N_RELEASE
                matched.setdefault(side, []).append(m)
                extra["keys_before"] = before
                extra["matched"] = "%.4f" % m
                extra["usec/call"] = "%.2f" % max(pc.values(), default=0)
                return list(rps.values())[0], secs, extra
            return fn
        res = self.pair("3 release matching", 50, [
            ("native", mk("native", 0, ["LOCK.RELEASE", "lock:__rand_int__", TOKEN])),
            ("classic", mk("classic", 1, ["EVALSHA", self.rel_sha, "1", "lock:__rand_int__", TOKEN])),
        ])
        self.throughput_row("3. release, matching (ops/s)", res, target=2.0)
        expect = LOCKS * (1 - (1 - 1 / LOCKS) ** N_RELEASE) / N_RELEASE
        self.notes.append(
            "3: every run starts from the full snapshot of %s locks (reloaded with `DEBUG RELOAD NOSAVE`, "
            "untimed, whenever the side's db is not full: before each native/classic pair, %.1f s each) and sends %s releases to random keys (`-r %d`). "
            "A key drawn twice answers 0 the second time, so both sides run the same mix: measured share of "
            "calls that matched and deleted a lock: native %.1f%%, classic %.1f%% (expected %.1f%%); "
            "the rest are releases of an already-released lock (0 reply)."
            % (n_fmt(LOCKS), statistics.mean(t_reload), n_fmt(N_RELEASE), LOCKS,
               100 * statistics.mean(matched["native"]), 100 * statistics.mean(matched["classic"]),
               100 * expect))
        self.flushall(self.n)

    def contention(self):
        """7. N=8 workers, one lock, ~1 ms hold."""
        self.flushall(self.n)
        # warm up, then one RTT for both modes
        contention.measure_rtt(self.native_port, 500, self.client_cpus)
        rtt = contention.measure_rtt(self.native_port, 3000, self.client_cpus)
        out = {}
        for mode in ("native", "classic"):
            out[mode] = contention.run(self.native_port, mode, workers=8, hold=0.001,
                                       duration=CONTENTION_S, poll=0.1,
                                       cpus=self.client_cpus, rtt=rtt)
            self.log("7 contention %-8s %s" % (mode, json.dumps(out[mode])))
        n, c = out["native"], out["classic"]

        def fmt(x, d=1):
            return "∞" if x == float("inf") else ("%.*f" % (d, x))

        def ratio(a, b):
            return "—" if b in (0, float("inf")) or a == float("inf") else "%.3g" % (a / b)
        ideal = n["ideal"]
        self.row("7. contention: critical sections/s (8 workers, 1 ms hold; ideal %.0f)" % ideal,
                 "%.0f (%.0f%% of ideal)" % (n["rate"], n["pct_of_ideal"]),
                 "%.0f (%.0f%% of ideal)" % (c["rate"], c["pct_of_ideal"]),
                 ratio(n["rate"], c["rate"]), "report", "—")
        self.row("7. contention: handoff gap to a waiter, p50 / p99 (ms)",
                 "%s / %s (%d handoffs)" % (fmt(n["gap_ms_p50"], 3), fmt(n["gap_ms_p99"], 3), n["gap_count"]),
                 "%s / %s (%d handoffs)" % (fmt(c["gap_ms_p50"], 3), fmt(c["gap_ms_p99"], 3), c["gap_count"]),
                 ratio(n["gap_ms_p50"], c["gap_ms_p50"]), "report", "—")
        self.row("7. contention: fairness, max/min sections per worker",
                 "%s (%s)" % (fmt(n["fairness"], 2), "/".join(map(str, n["per_worker"]))),
                 "%s (%s)" % (fmt(c["fairness"], 2), "/".join(map(str, c["per_worker"]))),
                 ratio(n["fairness"], c["fairness"]), "report", "—")
        self.row("7. contention: longest wait for the lock (ms)",
                 fmt(n["wait_ms_max"]), fmt(c["wait_ms_max"]),
                 ratio(n["wait_ms_max"], c["wait_ms_max"]), "report", "—")
        bad = []
        for m in (n, c):
            if m["overlaps"] or m["fence_regressions"] or m["errors"]:
                bad.append("%s: overlaps=%d fence_regressions=%d errors=%s"
                           % (m["mode"], m["overlaps"], m["fence_regressions"], m["errors"]))
        self.notes.append(
            "7: 8 processes, %.0f s each mode, hold = sleep(1 ms) (measured median hold %.3f ms native, "
            "%.3f ms classic); PING RTT of the same Python client %.3f ms; ideal = 1/(measured hold + RTT) "
            "(%.0f/s with the nominal 1 ms). Native: BLOCK 5000 (%d timeouts). Classic: SET NX PX, "
            "sleep 100 ms on nil; %d SET attempts for %d sections. A 'handoff to a waiter' is a grant to a "
            "worker that was already asking when the previous holder released (the classic releaser "
            "usually re-takes the lock itself at once: that is where its throughput comes from, and why "
            "its fairness and longest wait are poor). Safety: %s."
            % (CONTENTION_S, n["hold_ms_median"], c["hold_ms_median"], rtt * 1e3, n["ideal_nominal"],
               n["timeouts"], c["attempts_total"], c["critical_sections"],
               "no overlapping holds, fences strictly increasing" if not bad else "PROBLEMS " + "; ".join(bad)))

    def expiry_handoff(self):
        """8. A waiter served when the holder's TTL ends and nobody touches the key."""
        import threading
        self.flushall(self.n)
        holder, waiter = Redis(self.native_port), Redis(self.native_port)
        gaps = []
        for i in range(ROUNDS_EXPIRY):
            key = "exp:%d" % i
            holder.call("LOCK.ACQUIRE", key, "holder", "PX", 30)
            at = holder.call("PEXPIRETIME", key)
            got = {}

            def wait():
                got["reply"] = waiter.call("LOCK.ACQUIRE", key, "waiter", "PX", 1000, "BLOCK", 2000)
                got["t"] = time.time() * 1000.0
            t = threading.Thread(target=wait)
            t.start()
            t.join()
            if got.get("reply") is None:
                raise RuntimeError("waiter on %s timed out" % key)
            gaps.append(got["t"] - at)
        holder.close()
        waiter.close()
        gaps.sort()
        p50 = statistics.median(gaps)
        p99 = gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))]
        self.log("8 expiry handoff gaps (ms): %s" % " ".join("%.2f" % g for g in gaps))
        self.row("8. handoff on expiry, key untouched: holder's expiry to waiter's grant, p50 / p99 (ms)",
                 "%.2f / %.2f (%d rounds)" % (p50, p99, len(gaps)), "—", "—", "p50 < 10",
                 "yes" if p50 < 10 else "**NO**")
        self.notes.append(
            "8: %d rounds: a holder takes `LOCK.ACQUIRE key holder PX 30` and never releases; a second "
            "client waits with `BLOCK 2000`; the gap is the waiter's reply arrival (client clock) minus "
            "the lock's `PEXPIRETIME` (server clock, same machine). Redis deems a key expired once its "
            "clock is past that millisecond, so 1 ms is the floor." % len(gaps))

    # ---- report -------------------------------------------------------------
    def machine_line(self):
        model = "unknown"
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        model = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        ver = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()
        return "nproc %d · %s · %s" % (os.cpu_count(), model, ver)

    def write_report(self, elapsed, load_before, load_after):
        with open(self.module, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:16]
        lines = [
            "# redislock benchmark results",
            "",
            "Machine: " + self.machine_line(),
            "",
            "Run: %s · suite took %.0f s · module sha256 %s… · `redis-benchmark -c 50 -P 16` · "
            "server pinned to CPU %s, clients to CPU %s · load average before/after: %s / %s · "
            "reps per pair: up to %d (BENCH_SCALE=%g)"
            % (time.strftime("%Y-%m-%d %H:%M:%S %Z"), elapsed, digest,
               os.environ.get("BENCH_SERVER_CPUS", "-") or "-",
               ",".join(map(str, sorted(self.client_cpus))) if self.client_cpus else "-",
               load_before, load_after, REPS, SCALE),
            "",
            "Throughput cells: median (min–max) ops/s over the alternating runs; ratio = native/classic "
            "of medians (for 6: with module / without).",
            "",
            "| figure | native | classic | ratio | target | met |",
            "|---|---|---|---|---|---|",
        ]
        lines += ["| %s |" % " | ".join(r) for r in self.rows]
        missed = [r[0] for r in self.rows if r[5] == "**NO**"]
        lines += ["", "Targets missed: " + ("; ".join(missed) if missed else "none"), "", "Notes:", ""]
        lines += ["- " + n for n in self.notes]
        if self.cpu_notes:
            lines += ["- Ops per server CPU-second (median; ratio in brackets) — `INFO cpu` user+sys over each run; "
                      "unlike ops/s it barely moves when other processes share the server's CPU: "
                      + "; ".join(self.cpu_notes) + ". Disturbed runs (server on a CPU less than %d%% of "
                      "the run: other load on the machine): %d discarded and rerun, %d kept (of %d counted; "
                      "reruns are limited by each pair's time allowance)."
                      % (100 * DISTURBED, self.reruns, self.runs_disturbed, self.runs_total)]
        if self.usec_notes:
            lines += ["- Server CPU per call (median of `INFO commandstats` usec/call over the runs; "
                      "native vs classic, for 6/6b with module vs without; the EVALSHA figure includes "
                      "the script's inner calls): " + "; ".join(self.usec_notes) + "."]
        text = "\n".join(lines) + "\n"
        with open(os.path.join(self.out_dir, "results.md"), "w") as f:
            f.write(text)
        print("\n" + text)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--native-port", type=int, required=True)
    ap.add_argument("--plain-port", type=int, required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--out-dir", default=HERE)
    ap.add_argument("--client-cpus", default="")
    ap.add_argument("--only", default="", help="comma list of pairs to run (1-7, 6b), for development")
    a = ap.parse_args()
    s = Suite(a)
    only = set(a.only.split(",")) if a.only else {"1", "2", "3", "4", "5", "6", "6b", "7", "8", "9"}
    lb = loadavg()
    s.log("# redislock bench raw results %s; %s" % (time.strftime("%Y-%m-%d %H:%M:%S"), s.machine_line()))
    s.log("# load average at start: %s; REPS=%d SCALE=%g" % (lb, REPS, SCALE))
    t0 = time.monotonic()
    steps = [
        ("6", s.overhead),
        ("6b", s.overhead_events),
        ("1", s.acquire_granted),
        ("2", s.acquire_refused),
        ("5", s.memory_and_snapshot),
        ("4", s.extend),
        ("9", s.guarded_write),
        ("3", s.release),
        ("7", s.contention),
        ("8", s.expiry_handoff),
    ]
    failed = []
    snapshot_ok = True
    for key, fn in steps:
        if key in only or (key == "5" and only & {"3", "4", "9"}):
            if key in ("3", "4", "9") and not snapshot_ok:
                s.row("%s. (not run: no lock snapshot)" % key, "—", "—", "—", "—", "ERROR")
                failed.append(key)
                continue
            ts = time.monotonic()
            try:
                fn()
            except Exception as e:  # a broken run is reported, and fails the suite
                s.log("# pair %s FAILED: %r" % (key, e))
                s.row("%s. FAILED: %s" % (key, str(e).replace("|", "/")[:200]), "—", "—", "—", "—", "ERROR")
                failed.append(key)
                if key == "5":
                    snapshot_ok = False
                try:  # the server may be mid-pair: start the next pair clean
                    s.n.call("SELECT", 0)
                    s.n.call("FLUSHALL")
                except Exception:
                    s.n = Redis(s.native_port)
            s.log("# pair %s took %.1f s" % (key, time.monotonic() - ts))
    elapsed = time.monotonic() - t0
    la = loadavg()
    s.log("# load average at end: %s; suite took %.1f s" % (la, elapsed))
    s.write_report(elapsed, lb, la)
    s.raw.close()
    os.replace(s.raw_path + ".part", s.raw_path)
    # Missed targets are reported, not fatal; a pair that could not run is.
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
