#!/usr/bin/env python3
"""redislock benchmark suite: native LOCK.* commands vs the classic
SET NX PX + Lua pattern, and for shared locks and semaphores vs the classic
Lua scripts on a hash and a sorted set. Started by bench/run.sh, which owns
the two redis-server processes (one with the module, one without) and cleans
them up.

Throughput pairs run `redis-benchmark -c 50 -P 16` so the server is the
bottleneck, alternating sides (native, classic, native, classic, ...), and
report median and min-max ops/s. Both sides of pairs 1-5 and 9-13 run on the
server with the module; pair 6 compares that server with the plain one.
Pairs 10-12 (acquire+release of shared locks and semaphores), which
redis-benchmark cannot drive, time the delivery of pre-built pairs through
`redis-cli --pipe` instead (bench/pipeline.py; see the comment above
Suite.load).

Knobs (environment): BENCH_REPS (default 5), BENCH_SCALE (multiplies every
request count and the lock-set size; 0.2 for a quick check),
BENCH_CONTENTION_S (default 5). Each pair has a time allowance; once a pair
would overrun it, it stops after 3 repetitions ("as time allows").
"""

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from resp import Redis, encode  # noqa: E402
import contention  # noqa: E402
import pipeline  # noqa: E402
from pipeline import Slot, template  # noqa: E402

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

# The classic counted semaphore on a sorted set (the well-known fair-semaphore
# recipe: score = acquisition time): drop holders older than the timeout, add
# this one, and keep it only if its rank is within the limit. Release = ZREM.
# ARGV: token, now (ms, client clock), timeout (ms), limit.
SEM_LUA = (
    "local now = tonumber(ARGV[2]) "
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now - tonumber(ARGV[3])) "
    "redis.call('zadd', KEYS[1], now, ARGV[1]) "
    "if redis.call('zrank', KEYS[1], ARGV[1]) < tonumber(ARGV[4]) then return 1 end "
    "redis.call('zrem', KEYS[1], ARGV[1]) "
    "return false"
)
# The classic read lock on a hash, Redisson's layout: field `mode` ('read' or
# 'write') and one counter field per reading token, one TTL for the key.
# ARGV: token, ttl (ms).
RLOCK_ACQUIRE_LUA = (
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if mode == false or mode == 'read' then "
    "redis.call('hset', KEYS[1], 'mode', 'read') "
    "redis.call('hincrby', KEYS[1], ARGV[1], 1) "
    "redis.call('pexpire', KEYS[1], ARGV[2]) "
    "return 1 end "
    "return false"
)
RLOCK_RELEASE_LUA = (
    "local n = redis.call('hincrby', KEYS[1], ARGV[1], -1) "
    "if n > 0 then return 1 end "
    "redis.call('hdel', KEYS[1], ARGV[1]) "
    "if redis.call('hlen', KEYS[1]) == 1 then redis.call('del', KEYS[1]) end "
    "if n == 0 then return 1 end "
    "return 0"
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
# Shared locks and semaphores (pairs 10-13). Pairs 10 and 11: HOLD_KEYS keys,
# each prefilled with HOLD_PREFILL holders (semaphores with LIMIT SEM_LIMIT)
# that stay for the whole run; pair 12: one key with BIG_HOLDERS holders
# against one with HOLD_PREFILL. Pair 13: memory for MEM_HOLDERS holders.
HOLD_KEYS = 100
HOLD_PREFILL = 10
SEM_LIMIT = 100
BIG_HOLDERS = 10_000
BIG_LIMIT = 100_000
MEM_HOLDERS = 10_000
HOLD_PX = 60_000
# Pairs 10-12 (pipeline.py): each run's pairs are built beforehand and
# delivered by PROCS `redis-cli --pipe` processes at once, each on its own
# share of the keys.
PROCS = 4
# Server counters that show every native acquire granted and every release
# matched: (INFO redislock counter, per pair).
NATIVE_VERIFY = [("mod", "grants", 1), ("mod", "refused", 0), ("mod", "releases", 1),
                 ("mod", "releases_not_owner", 0)]
# The driver's commands are templates with fixed-size slots: keys of pairs
# 10-12 are key:%03d / sem:big / sem:sml, tokens holder-%015d.
KEY_LEN = 7
TOKEN_LEN = 22
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
        # A run of some pairs (--only) writes results-partial.*, so that the
        # last full table stays in results.md.
        self.stem = "results-partial" if a.only and set(a.only.split(",")) != ALL_PAIRS else "results"
        self.raw_path = os.path.join(self.out_dir, self.stem + "-raw.txt")
        self.raw = open(self.raw_path + ".part", "w")
        self.n = Redis(self.native_port)
        self.p = Redis(self.plain_port)
        self.rel_sha = self.n.call("SCRIPT", "LOAD", RELEASE_LUA).decode()
        self.ext_sha = self.n.call("SCRIPT", "LOAD", EXTEND_LUA).decode()
        self.guard_sha = self.n.call("SCRIPT", "LOAD", GUARD_LUA).decode()
        self.sem_sha = self.n.call("SCRIPT", "LOAD", SEM_LUA).decode()
        self.racq_sha = self.n.call("SCRIPT", "LOAD", RLOCK_ACQUIRE_LUA).decode()
        self.rrel_sha = self.n.call("SCRIPT", "LOAD", RLOCK_RELEASE_LUA).decode()
        self.token_seq = 0  # holder tokens of pairs 10-12, never reused
        self.idle_shares = []  # server idle share of each run of a pair of 10-12
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
                    usec[side].append(float(extra.get("usec/call", extra.get("usec/pair", ""))))
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
                 "%.2f / %.2f (%d rounds)" % (p50, p99, len(gaps)), "—", "—", "p99 ≤ 1.5",
                 "yes" if p99 <= 1.5 else "**NO**")
        self.notes.append(
            "8: %d rounds: a holder takes `LOCK.ACQUIRE key holder PX 30` and never releases; a second "
            "client waits with `BLOCK 2000`; the gap is the waiter's reply arrival (client clock) minus "
            "the lock's `PEXPIRETIME` (server clock, same machine). Redis deems a key expired once its "
            "clock is past that millisecond, so 1 ms is the floor." % len(gaps))

    # ---- shared locks and semaphores (10-13) ---------------------------------
    # redis-benchmark sends one command per request, with independent
    # __rand_int__ values, so its release cannot name the token its acquire
    # just used. Two separate runs (all acquires, then all releases) do not
    # measure a semaphore either: with LIMIT 100, all but the first few
    # acquires of the first run would be refused at once. Pairs 10-12
    # therefore build the RESP of every acquire/release pair of a run
    # beforehand (untimed; fresh token per pair, so every acquire meets the
    # prefilled population and is granted, and every release matches) and
    # time its delivery by PROCS `redis-cli --pipe` processes, each on its own
    # share of the keys (pipeline.py). The same delivery serves both sides.
    # Server µs per pair comes from INFO commandstats (the sum over the
    # commands sent: a script's inner calls are inside its EVALSHA time);
    # whether every acquire was granted and every release matched, from the
    # module's INFO counters or the calls a script makes only on one path.
    def load(self, commands, db=0):
        """Runs commands (lists of arguments) through `redis-cli --pipe`."""
        step = 5000
        chunks = (b"".join(encode(c) for c in commands[i:i + step]) for i in range(0, len(commands), step))
        self.pipe_load(self.native_port, db, chunks)

    def module_stats(self):
        return {k[len("redislock_"):]: int(v) for k, v in self.n.info("redislock").items()}

    def drive(self, acquire, release, keys, pairs, commands, verify, clock=None):
        """One delivery of `pairs` acquire/release pairs on `keys`; returns
        (pairs/s, seconds, extra), with server µs per pair over `commands`
        (the commandstats names sent) in extra["usec/pair"]. `verify`:
        [(source, name, calls per pair)], source "cmd" (INFO commandstats
        calls) or "mod" (INFO redislock counter), all checked after the run;
        `clock`: the acquire also takes this time (ms) after the token."""
        procs = PROCS
        per = max(1, pairs // procs)
        pairs = per * procs
        first = self.token_seq
        self.token_seq += pairs
        clock = b"%d" % clock if clock is not None else None
        # Each process its own share of the keys (all of them if fewer keys
        # than processes) and its own range of tokens.
        shares = [keys[p::procs] if len(keys) >= procs else keys for p in range(procs)]
        streams = [pipeline.build(acquire, release, shares[p], first + p * per, per, clock) for p in range(procs)]
        s0, e0, m0, c0 = self.cmdstats(self.n), self.errors(self.n), self.module_stats(), self.cpu(self.n)
        res = pipeline.run(self.native_port, streams, cpus=self.client_cpus)
        c1, s1, e1, m1 = self.cpu(self.n), self.cmdstats(self.n), self.errors(self.n), self.module_stats()
        del streams
        secs = res["seconds"]
        cpu_s = max(c1 - c0, 1e-6)
        self.last_cpu = {"ops_per_cpu_s": pairs / cpu_s, "util": cpu_s / secs}

        def delta(name):
            return s1.get(name, (0, 0))[0] - s0.get(name, (0, 0))[0]
        d = {k: (delta(k), s1.get(k, (0, 0))[1] - s0.get(k, (0, 0))[1]) for k in commands}
        extra = {"usec/pair": "%.2f" % (sum(u for _, u in d.values()) / pairs)}
        extra.update(("us/call:" + k, "%.2f" % (u / max(c, 1))) for k, (c, u) in d.items())
        bad = []
        if res["replies"] != 2 * pairs or res["errors"] or e1 != e0:
            bad.append("%d replies for %d commands, %d error replies (%s)"
                       % (res["replies"], 2 * pairs, max(res["errors"], e1 - e0), res["first_error"]))
        for source, name, each in verify:
            got = delta(name) if source == "cmd" else m1.get(name, 0) - m0.get(name, 0)
            if got != each * pairs:
                bad.append("%s %s: %d, expected %d" % ("calls of" if source == "cmd" else "counter", name,
                                                       got, each * pairs))
        extra["checked"] = "ok" if not bad else "MISMATCH"
        if bad:
            self.notes.append("WARNING: a run of %s: %s" % ("/".join(commands), "; ".join(bad)))
        extra["client_cpu"] = "%.2f" % res["client_cpu"]
        if res["server_idle"] is not None:
            # On a CPU / runnable but waiting for one (other load) / idle,
            # i.e. waiting for the clients: near 0 when the server is the
            # bottleneck.
            extra["server_run/wait/idle"] = "%.2f/%.2f/%.2f" % (
                res["server_cpu"], res["server_wait"], res["server_idle"])
            self.idle_shares.append(res["server_idle"])
        return pairs / secs, secs, extra

    def holders_count(self, key):
        """Holders of a shared lock or semaphore key, from LOCK.INFO."""
        info = self.n.call("LOCK.INFO", key)
        if not info:
            return 0
        return len(dict(zip(info[::2], info[1::2])).get(b"holders") or [])

    def hold_pair(self, name, sides, check):
        """Pairs 10 and 11: sides are (side, prefill commands(now), acquire,
        release, commands, verify, clock); FLUSHALL and prefill before every
        run. With `clock`, the acquires take the time (ms) at which the run
        was built, later than the prefill's."""
        keys = [b"key:%03d" % k for k in range(HOLD_KEYS)]

        def mk(prefill, acq, rel, commands, verify, clock):
            def fn(n):
                self.flushall(self.n)
                now = int(time.time() * 1000)
                self.load(prefill(now))
                at = max(now + 1, int(time.time() * 1000)) if clock else None
                return self.drive(acq, rel, keys, n, commands, verify, at)
            return fn
        fns = [(side, mk(*rest)) for side, *rest in sides]
        n_pairs = self.size(name, [(lambda n, f=f: f(n)[0]) for _, f in fns])
        self.idle_shares = []
        failed = []

        def run(f, side):
            def fn(rep):
                out = f(n_pairs)
                bad = check(side, keys)
                if bad:
                    failed.append("%s: %s" % (side, bad))
                if out[2]["checked"] != "ok":
                    failed.append("%s: server counters did not match (see the WARNING note)" % side)
                return out
            return fn
        res = self.pair(name, 40, [(side, run(f, side)) for side, f in fns])
        self.flushall(self.n)
        return res, failed

    def idle_note(self):
        """The server's idle share over the last pair's timed runs."""
        x = self.idle_shares
        if not x:
            return "server idle share not measured (server process not readable)"
        return ("server idle (waiting for the clients) %.1f%% of a run at the median, %.1f%% at most (%d runs)"
                % (100 * statistics.median(x), 100 * max(x), len(x)))

    def usec_row(self, figure, target, a="native", b="classic", cmp=">=", ratio_ba=True):
        """A row of server µs per pair (medians of the last pair's runs);
        ratio = b/a (how many times less CPU a takes) or a/b."""
        u = self.last_usec
        if a not in u or b not in u:
            self.row(figure, "—", "—", "—", "—", "ERROR")
            return
        ma, sa = statistics.median(u[a]), u[a]
        mb, sb = statistics.median(u[b]), u[b]
        ratio = mb / ma if ratio_ba else ma / mb
        met = ratio >= target if cmp == ">=" else ratio <= target
        self.row(figure, "%.2f (%.2f–%.2f)" % (ma, min(sa), max(sa)), "%.2f (%.2f–%.2f)" % (mb, min(sb), max(sb)),
                 "%.2f" % ratio, "%s %.2f" % ("≥" if cmp == ">=" else "≤", target), "yes" if met else "**NO**")
        self.log("%-22s median server us/pair %s=%.2f %s=%.2f ratio=%.3f" % (figure[:22], a, ma, b, mb, ratio))

    def semaphore(self):
        """10. LOCK.ACQUIRE ... LIMIT 100 + LOCK.RELEASE vs the sorted-set
        semaphore script + ZREM, on keys holding 10 holders each."""
        def native_prefill(now):
            return [["LOCK.ACQUIRE", "key:%03d" % k, "prefill-%014d" % j, "PX", PREFILL_PX, "LIMIT", SEM_LIMIT]
                    for k in range(HOLD_KEYS) for j in range(HOLD_PREFILL)]

        def classic_prefill(now):
            return [["ZADD", "key:%03d" % k, now, "prefill-%014d" % j]
                    for k in range(HOLD_KEYS) for j in range(HOLD_PREFILL)]
        n_acq = template("LOCK.ACQUIRE", Slot(KEY_LEN), Slot(TOKEN_LEN), "PX", HOLD_PX, "LIMIT", SEM_LIMIT)
        n_rel = template("LOCK.RELEASE", Slot(KEY_LEN), Slot(TOKEN_LEN))
        c_acq = template("EVALSHA", self.sem_sha, "1", Slot(KEY_LEN), Slot(TOKEN_LEN), Slot(13), HOLD_PX, SEM_LIMIT)
        c_rel = template("ZREM", Slot(KEY_LEN), Slot(TOKEN_LEN))

        def check(side, keys):
            for k in keys:
                n = self.holders_count(k) if side == "native" else self.n.call("ZCARD", k)
                if n != HOLD_PREFILL:
                    return "%s holds %d, not %d" % (k.decode(), n, HOLD_PREFILL)
            return None
        # A refused classic acquire ZREMs its own entry inside the script, so
        # exactly one ZREM (the release) per pair means every acquire was
        # granted; and a release that did not match would leave its holder.
        res, failed = self.hold_pair("10 semaphore acq+rel", [
            ("native", native_prefill, n_acq, n_rel, ["lock.acquire", "lock.release"], NATIVE_VERIFY, False),
            ("classic", classic_prefill, c_acq, c_rel, ["evalsha", "zrem"], [("cmd", "zadd", 1), ("cmd", "zrem", 1)],
             True),
        ], check)
        self.usec_row("10. semaphore (LIMIT %d, %d holders per key), acquire+release: server µs per pair "
                      "(ratio = classic/native)" % (SEM_LIMIT, HOLD_PREFILL), 2.0)
        self.throughput_row("10. semaphore (LIMIT %d, %d holders per key), acquire+release (pairs/s)"
                            % (SEM_LIMIT, HOLD_PREFILL), res, target=2.0,
                            label="10 semaphore acquire+release (per pair)")
        self.notes.append(
            "10: %d keys, each prefilled with %d holders before every run; native `LOCK.ACQUIRE key token PX %d "
            "LIMIT %d` + `LOCK.RELEASE key token` against `EVALSHA` of the sorted-set semaphore "
            "(ZREMRANGEBYSCORE -inf now-timeout, ZADD now token, ZRANK, ZREM and fail if rank ≥ limit; now from "
            "the client: the time the run was built, after the prefill) + `ZREM key token`. Driven by "
            "`bench/pipeline.py`: every run's pairs (fresh token per pair, keys in turn) built beforehand, "
            "untimed, and delivered by %d `redis-cli --pipe` processes at once, each on its own %d keys; %s. "
            "Every acquire granted and every release matched: %s."
            % (HOLD_KEYS, HOLD_PREFILL, HOLD_PX, SEM_LIMIT, PROCS, HOLD_KEYS // PROCS, self.idle_note(),
               "yes (server counters: native grants and releases = pairs, none refused or not owner; classic "
               "ZADD and ZREM calls = pairs; populations back to %d after every run)" % HOLD_PREFILL
               if not failed else "WARNING " + "; ".join(failed)))

    def shared(self):
        """11. LOCK.ACQUIRE ... SHARED + LOCK.RELEASE vs the hash read lock
        scripts (Redisson's layout), on keys holding 10 readers each."""
        def native_prefill(now):
            return [["LOCK.ACQUIRE", "key:%03d" % k, "prefill-%014d" % j, "PX", PREFILL_PX, "SHARED"]
                    for k in range(HOLD_KEYS) for j in range(HOLD_PREFILL)]

        def classic_prefill(now):
            out = []
            for k in range(HOLD_KEYS):
                key = "key:%03d" % k
                out.append(["HSET", key, "mode", "read"])
                out += [["HINCRBY", key, "prefill-%014d" % j, 1] for j in range(HOLD_PREFILL)]
                out.append(["PEXPIRE", key, PREFILL_PX])
            return out
        n_acq = template("LOCK.ACQUIRE", Slot(KEY_LEN), Slot(TOKEN_LEN), "PX", HOLD_PX, "SHARED")
        n_rel = template("LOCK.RELEASE", Slot(KEY_LEN), Slot(TOKEN_LEN))
        c_acq = template("EVALSHA", self.racq_sha, "1", Slot(KEY_LEN), Slot(TOKEN_LEN), HOLD_PX)
        c_rel = template("EVALSHA", self.rrel_sha, "1", Slot(KEY_LEN), Slot(TOKEN_LEN))

        def check(side, keys):
            for k in keys:
                n = self.holders_count(k) if side == "native" else self.n.call("HLEN", k) - 1
                if n != HOLD_PREFILL:
                    return "%s holds %d, not %d" % (k.decode(), n, HOLD_PREFILL)
            return None
        # The classic acquire HSETs `mode` only when it grants, and the release
        # HDELs the reader's counter only when it brings it to 0.
        res, failed = self.hold_pair("11 shared acq+rel", [
            ("native", native_prefill, n_acq, n_rel, ["lock.acquire", "lock.release"], NATIVE_VERIFY, False),
            ("classic", classic_prefill, c_acq, c_rel, ["evalsha"], [("cmd", "hset", 1), ("cmd", "hdel", 1)],
             False),
        ], check)
        self.usec_row("11. shared (read) lock (%d readers per key), acquire+release: server µs per pair "
                      "(ratio = classic/native)" % HOLD_PREFILL, 2.0)
        self.throughput_row("11. shared (read) lock (%d readers per key), acquire+release (pairs/s)"
                            % HOLD_PREFILL, res, target=2.0, label="11 shared acquire+release (per pair)")
        self.notes.append(
            "11: %d keys, each prefilled with %d readers before every run; native `LOCK.ACQUIRE key token PX %d "
            "SHARED` + `LOCK.RELEASE` against two `EVALSHA`s on a hash laid out as Redisson's read lock "
            "(field `mode`, one counter per reading token, one TTL for the key): acquire = HGET mode, and if nil "
            "or 'read': HSET mode read, HINCRBY token 1, PEXPIRE; release = HINCRBY token -1, HDEL at 0, DEL "
            "when only `mode` is left. The classic keeps one lease for all readers (no per-reader timeout keys, "
            "which Redisson adds); the native lock keeps one per reader. Same delivery as 10; %s. Every "
            "acquire granted and every release matched: %s."
            % (HOLD_KEYS, HOLD_PREFILL, HOLD_PX, self.idle_note(),
               "yes (server counters: native as in 10; classic HSET and HDEL calls = pairs; populations "
               "back to %d after every run)" % HOLD_PREFILL if not failed
               else "WARNING " + "; ".join(failed)))

    def population(self):
        """12. The cost of one more holder on a semaphore key that holds
        10,000 holders vs one that holds 10 (native only, LIMIT 100000)."""
        self.flushall(self.n)
        big, small = b"sem:big", b"sem:sml"
        for key, count in ((big, BIG_HOLDERS), (small, HOLD_PREFILL)):
            self.load([["LOCK.ACQUIRE", key, "prefill-%014d" % j, "PX", PREFILL_PX, "LIMIT", BIG_LIMIT]
                       for j in range(count)])
        acq = template("LOCK.ACQUIRE", Slot(KEY_LEN), Slot(TOKEN_LEN), "PX", HOLD_PX, "LIMIT", BIG_LIMIT)
        rel = template("LOCK.RELEASE", Slot(KEY_LEN), Slot(TOKEN_LEN))
        commands = ["lock.acquire", "lock.release"]
        failed = []

        def mk(key, count):
            def fn(rep):
                out = self.drive(acq, rel, [key], n_pairs, commands, NATIVE_VERIFY)
                held = self.holders_count(key)
                if held != count:
                    failed.append("%s holds %d, not %d" % (key.decode(), held, count))
                if out[2]["checked"] != "ok":
                    failed.append("%s: server counters did not match (see the WARNING note)" % key.decode())
                return out
            return fn
        n_pairs = self.size("12 10000 vs 10 holders",
                            [lambda n: self.drive(acq, rel, [big], n, commands, NATIVE_VERIFY)[0],
                             lambda n: self.drive(acq, rel, [small], n, commands, NATIVE_VERIFY)[0]])
        self.idle_shares = []
        res = self.pair("12 10000 vs 10 holders", 40, [("h10000", mk(big, BIG_HOLDERS)),
                                                       ("h10", mk(small, HOLD_PREFILL))])
        self.flushall(self.n)
        self.usec_row("12. semaphore acquire+release on a key holding %s holders vs one holding %d: server µs "
                      "per pair (columns: %s | %d holders; ratio = %s/%d)"
                      % (n_fmt(BIG_HOLDERS), HOLD_PREFILL, n_fmt(BIG_HOLDERS), HOLD_PREFILL,
                         n_fmt(BIG_HOLDERS), HOLD_PREFILL),
                      2.0, a="h10000", b="h10", cmp="<=", ratio_ba=False)
        self.throughput_row("12. semaphore acquire+release, %s holders vs %d (pairs/s; columns: %s | %d)"
                            % (n_fmt(BIG_HOLDERS), HOLD_PREFILL, n_fmt(BIG_HOLDERS), HOLD_PREFILL), res,
                            native="h10000", classic="h10", target=0.5,
                            label="12 semaphore %s vs %d holders (per pair)" % (n_fmt(BIG_HOLDERS), HOLD_PREFILL))
        self.notes.append(
            "12: native only: one key prefilled with %s holders and one with %d (both `LIMIT %s`, so every "
            "acquire is granted), the same acquire/release pairs and delivery as 10 on each in turn (all %d "
            "processes on the one key); %s. Every acquire granted and every release matched: %s."
            % (n_fmt(BIG_HOLDERS), HOLD_PREFILL, n_fmt(BIG_LIMIT), PROCS, self.idle_note(),
               "yes (server counters as in 10; holders back to %s and %d after every run)"
               % (n_fmt(BIG_HOLDERS), HOLD_PREFILL) if not failed else "WARNING " + "; ".join(failed)))

    def holder_memory(self):
        """13. used_memory growth per holder: MEM_HOLDERS holders in one
        semaphore / shared-lock key against the sorted-set semaphore and the
        hash read lock; small keys; exclusive locks for reference."""
        def grow(commands, db=0):
            self.flushall(self.n)
            time.sleep(0.2)
            m0 = self.used_memory(self.n)
            self.load(commands, db)
            time.sleep(0.2)
            return self.used_memory(self.n) - m0
        now = int(time.time() * 1000)
        n = MEM_HOLDERS
        tokens = ["holder-%015d" % j for j in range(n)]
        g = {
            "sem": grow([["LOCK.ACQUIRE", "sem", t, "PX", PREFILL_PX, "LIMIT", BIG_LIMIT] for t in tokens]),
            "zset": grow([["ZADD", "sem", now, t] for t in tokens]),
            "shared": grow([["LOCK.ACQUIRE", "rw", t, "PX", PREFILL_PX, "SHARED"] for t in tokens]),
            "hash": grow([["HSET", "rw", "mode", "read"]] + [["HINCRBY", "rw", t, 1] for t in tokens]
                         + [["PEXPIRE", "rw", PREFILL_PX]]),
        }
        small_keys = n // HOLD_PREFILL
        g["sem_small"] = grow([["LOCK.ACQUIRE", "sem:%05d" % (j // HOLD_PREFILL), t, "PX", PREFILL_PX,
                                "LIMIT", SEM_LIMIT] for j, t in enumerate(tokens)])
        g["zset_small"] = grow([["ZADD", "sem:%05d" % (j // HOLD_PREFILL), now, t] for j, t in enumerate(tokens)])
        self.flushall(self.n)
        time.sleep(0.2)
        m0 = self.used_memory(self.n)
        self.pipe_load(self.native_port, 0, self.gen_locks(0, n, True, PREFILL_PX))
        time.sleep(0.2)
        m1 = self.used_memory(self.n)
        self.pipe_load(self.native_port, 1, self.gen_locks(0, n, False, PREFILL_PX))
        time.sleep(0.2)
        m2 = self.used_memory(self.n)
        g["lock"], g["string"] = m1 - m0, m2 - m1
        self.flushall(self.n)
        per = {k: v / n for k, v in g.items()}
        self.log("13 memory growth (bytes, %d holders or keys): %s"
                 % (n, " ".join("%s=%d (%.1f/holder)" % (k, g[k], per[k]) for k in g)))

        def mrow(figure, a, b):
            self.row(figure, "%.1f" % per[a], "%.1f" % per[b], "%.2f" % (per[a] / per[b]), "report", "—")
        mrow("13. memory per holder, one semaphore key with %s holders (bytes, used_memory growth / holders; "
             "classic: sorted-set semaphore)" % n_fmt(n), "sem", "zset")
        mrow("13. memory per holder, one shared lock with %s readers (bytes; classic: hash read lock)"
             % n_fmt(n), "shared", "hash")
        mrow("13. memory per holder, %s semaphore keys with %d holders each (bytes; classic: sorted set)"
             % (n_fmt(small_keys), HOLD_PREFILL), "sem_small", "zset_small")
        mrow("13. (reference) memory per exclusive lock, %s keys (bytes; classic: SET NX PX)" % n_fmt(n),
             "lock", "string")
        self.notes.append(
            "13: `used_memory` growth divided by the holders (or keys) added, each case on an emptied server, "
            "loaded with `redis-cli --pipe`; 22-byte tokens. Semaphore: `LOCK.ACQUIRE sem token PX … LIMIT %s` "
            "against `ZADD sem now token` (the sorted-set semaphore's entries); shared: `LOCK.ACQUIRE rw token "
            "PX … SHARED` against `HINCRBY rw token 1` on the hash read lock (plus its `mode` field and TTL). "
            "A big sorted set or hash is a hash table plus (sorted set) a skip list; one with at most 128 "
            "entries is a compact listpack, which is why the small keys' figures differ. Exclusive locks: "
            "`lock:%%012d` keys as in 5 (native in db 0, strings in db 1)." % n_fmt(BIG_LIMIT))


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
            "Run: %s · suite took %.0f s · module sha256 %s… · `redis-benchmark -c 50 -P 16` (10–12: "
            "%d × `redis-cli --pipe`) · "
            "server pinned to CPU %s, clients to CPU %s · load average before/after: %s / %s · "
            "reps per pair: up to %d (BENCH_SCALE=%g)"
            % (time.strftime("%Y-%m-%d %H:%M:%S %Z"), elapsed, digest, PROCS,
               os.environ.get("BENCH_SERVER_CPUS", "-") or "-",
               ",".join(map(str, sorted(self.client_cpus))) if self.client_cpus else "-",
               load_before, load_after, REPS, SCALE),
            "",
            "Throughput cells: median (min–max) ops/s over the alternating runs (for 10–12: pairs/s, one "
            "acquire and its release); ratio = native/classic of medians (for 6: with module / without; for "
            "12: 10,000 holders / 10). Rows \"server µs per pair\": median (min–max) of `INFO commandstats` "
            "time per acquire+release; ratio = classic/native, how many times less server CPU the native "
            "pair takes (for 12: 10,000 holders / 10, how much more).",
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
        with open(os.path.join(self.out_dir, self.stem + ".md"), "w") as f:
            f.write(text)
        print("\n" + text)


# Every pair of the suite; a run of all of them writes results.md.
ALL_PAIRS = {"1", "2", "3", "4", "5", "6", "6b", "7", "8", "9", "10", "11", "12", "13"}


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
    ap.add_argument("--only", default="", help="comma list of pairs to run (1-13, 6b), for development")
    a = ap.parse_args()
    s = Suite(a)
    only = set(a.only.split(",")) if a.only else ALL_PAIRS
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
        ("10", s.semaphore),
        ("11", s.shared),
        ("12", s.population),
        ("13", s.holder_memory),
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
