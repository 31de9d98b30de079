"""Failover soak: do acknowledged grants survive the master's failure, and does a resource that
checks fences stay safe?

Redis Sentinel (3 Sentinels, quorum 2) over a master and two replicas with AOF and the module,
all on free loopback ports (stress/failover_topology.py). Workers (threads, each with its own
`redis.sentinel.Sentinel(...).master_for(...)` client, at redis-py's defaults but for the read
timeout of half of them) take locks through `redislock.Lock` with a lease (`timeout=`): four
take turns, two by two, at two job locks, holding one for seconds, the others contend for a few
locks and hold them for a moment. Every holder writes to a resource that checks fences; every acknowledged
grant is recorded (stress/failover_ledger.py says what counts as lost, and as a stale write
accepted). Faults, taken in turn, each several times:
  kill     kill -9 of the master; after the failover it is started again from its AOF as a
           replica of the new master (with replica-priority 0 until it has synced)
  pause    SIGSTOP of the master until Sentinel announces the new master, then SIGCONT: the old
           master serves as a master (split brain) until Sentinel demotes it
  cut      the replication links cut (the replicas' user switched off, their connections killed)
           for a few seconds, then kill -9 of the master while they are cut
Legs (each on a fresh set of servers):
  fences                 the client's default (no WAIT)
  fences+min-replicas    the same, with min-replicas-to-write 1 and min-replicas-max-lag 2 on
                         the servers
  replicas               Lock(..., replicas=1, replicas_timeout=1)
  replicas+min-replicas  both
The legs with replicas=1 run once the client has the option (redislock.NotReplicatedError).

Fails (exit 1) on a stale write accepted, a duplicate fence, a grant lost where no fault was
made, or a grant lost with replicas=1 at kill or cut; exit 2 if the servers did not recover in
time. Prints a markdown table and a FAILOVER-SUMMARY line.

Usage: target/pyenv/bin/python stress/failover_soak.py [--server BIN] [--secs N] [--rounds N]
       [--legs fences,fences+min-replicas,...] [--workers 8] [--locks 3] [--logs DIR] [--seed N]
Environment: REDIS_SERVER, STRESS_FAILOVER_SECS (480), STRESS_FAILOVER_ROUNDS (3), STRESS_SEED.
--secs bounds the faults' time, shared out among the legs: each fault runs once in each leg
whatever it says, more rounds (up to --rounds) while there is time left.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Counter, Dict, List, Optional, Tuple

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(root, "clients", "python", "src"))

import redis.sentinel  # noqa: E402
import redislock  # noqa: E402
from failover_ledger import LEGEND, Grant, Resource, lost_grants, markdown, self_test, stale_accepted  # noqa: E402
from failover_topology import SERVICE, Topology, client, install_cleanup, reap  # noqa: E402
from redis.exceptions import LockNotOwnedError  # noqa: E402

LEASE = 10.0  # seconds: each grant's lease (timeout=), longer than a failover takes
BLOCK = 0.5  # seconds: each acquire's wait in the server (blocking_timeout=)
#: The clients' read timeouts, worker by worker: redis-py's default (5 s), and a shorter one,
#: so that in a pause some workers are still waiting on the old master when it comes back and
#: others have gone over to the new one.
SOCKET_TIMEOUTS = [None, 1.0]
#: The first JOB_WORKERS workers take turns, two by two, at the JOBS job locks, each holding one
#: for a while (a job): a hold that outlasts a failover, with another worker waiting to take the
#: lock over. The others hold one of the `--locks` locks for a moment. Every holder writes to the
#: resource every WRITE_EVERY seconds while it holds, and once at the end.
JOBS = 2
JOB_WORKERS = 2 * JOBS
LONG = (5.0, 9.0)
SHORT = (0.005, 0.03)
WRITE_EVERY = 0.1
REPLICAS_TIMEOUT = 1.0
QUIET = 2.0  # seconds of plain work after each fault's recovery
CUT = 4.0  # seconds the links stay cut before the kill
FAULTS = ["kill", "pause", "cut"]
MIN_REPLICAS = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "2"]
DURABLE_OPTS = {"replicas": 1, "replicas_timeout": REPLICAS_TIMEOUT}
LEGS = {  # the lock's options, the servers' settings
    "fences": ({}, []),
    "fences+min-replicas": ({}, MIN_REPLICAS),
    "replicas": (DURABLE_OPTS, []),
    "replicas+min-replicas": (DURABLE_OPTS, MIN_REPLICAS),
}
#: Faults at which no acknowledged grant may be lost, by leg.
DURABLE = {"replicas": {"kill", "cut"}, "replicas+min-replicas": {"kill", "cut"}}


def client_has_replicas() -> bool:
    params = inspect.signature(redislock.Lock.__init__).parameters
    return hasattr(redislock, "NotReplicatedError") and "replicas" in params


class Books:
    """One leg's record: grants, the resource, counts per segment (the warm-up, then each fault
    round from its start to the next one's)."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.grants: List[Grant] = []
        self.resource = Resource()
        self.segments: List[Tuple[str, float]] = [("warm-up", time.monotonic())]
        self.counts: Dict[int, Counter[str]] = collections.defaultdict(collections.Counter)
        #: Grants found missing on a new master while their client held them → the segment.
        self.missing: Dict[int, int] = {}

    @property
    def segment(self) -> int:
        return len(self.segments) - 1

    def begin(self, label: str) -> None:
        with self.mutex:
            self.segments.append((label, time.monotonic()))

    def count(self, what: str, segment: Optional[int] = None) -> None:
        with self.mutex:
            self.counts[self.segment if segment is None else segment][what] += 1

    def add(self, grant: Grant) -> None:
        with self.mutex:
            self.grants.append(grant)


def look_for_holds(books: Books, master: Any) -> None:
    """Right after a failover: is every hold a client holds now (acknowledged, not released, its
    lease running) on the new master? One that is not vanished while held: lost."""
    now = time.monotonic()
    with books.mutex:
        live = [i for i, g in enumerate(books.grants) if g.release_sent is None and g.lease_end > now]
    c = client(master.port)
    owner: Dict[str, Optional[bytes]] = {}
    for name in {books.grants[i].name for i in live}:
        reply = c.execute_command("LOCK.INFO", name)
        info = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2])) if reply else {}
        token = info.get("token")
        owner[name] = token.encode() if isinstance(token, str) else token
    seen = time.monotonic()
    for i in live:
        g = books.grants[i]
        sent = g.release_sent
        if owner[g.name] != g.token and (sent is None or sent > seen) and g.lease_end > seen:
            books.missing.setdefault(i, books.segment)


def worker(idx: int, sentinels: List[Tuple[str, int]], names: List[str], opts: Dict[str, Any], books: Books,
           stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed * 1000 + idx)
    manager = redis.sentinel.Sentinel(sentinels, sentinel_kwargs={"socket_timeout": 0.5, "socket_connect_timeout": 0.5})
    timeout = SOCKET_TIMEOUTS[idx % len(SOCKET_TIMEOUTS)]
    # redis-py's defaults otherwise: retries with backoff, a new connection asks the Sentinels.
    r = manager.master_for(SERVICE) if timeout is None else manager.master_for(SERVICE, socket_timeout=timeout)
    while not stop.is_set():
        job = idx < JOB_WORKERS
        name = f"soak:job:{idx % JOBS}" if job else rng.choice(names)
        lock = redislock.Lock(r, name, timeout=LEASE, blocking_timeout=BLOCK, **opts)
        try:
            got = lock.acquire()
        except Exception as err:
            books.count(f"error {type(err).__name__}")
            stop.wait(0.05)
            continue
        if not got:
            books.count("wait timed out")
            continue
        ack = time.monotonic()
        token, fence = lock.token, lock.fence
        assert token is not None and fence is not None
        grant = Grant(name, idx, token, fence, ack, time.monotonic() + lock.lease_left, books.segment)
        books.add(grant)
        until = time.monotonic() + rng.uniform(*(LONG if job else SHORT))
        while True:  # the critical section: writes until its time is up, and one at its end
            if not books.resource.write(name, fence, token, time.monotonic()):
                books.count("stale write refused", grant.segment)
            left = until - time.monotonic()
            if left <= 0 or stop.wait(min(left, WRITE_EVERY)):
                break
        grant.release_sent = time.monotonic()
        try:
            lock.release()
            grant.release = "ok"
        except LockNotOwnedError:
            grant.release = "gone"
        except Exception as err:
            grant.release = type(err).__name__
        grant.release_answered = time.monotonic()
    r.close()


def run_leg(leg: str, args: argparse.Namespace, module: str, base: str, until: float) -> Dict[str, Any]:
    opts, extra = LEGS[leg]
    topo = Topology(args.server, module, base, extra)
    books = Books()
    topo.on_new_master = lambda node: look_for_holds(books, node)
    stop = threading.Event()
    names = [f"soak:{i}" for i in range(args.locks)]
    threads = [threading.Thread(target=worker, daemon=True, name=f"worker-{i}",
                                args=(i, topo.sentinel_addrs(), names, opts, books, stop, args.seed))
               for i in range(args.workers)]
    rounds: Counter[str] = collections.Counter()
    lasted: Dict[str, float] = {}
    timings: Dict[str, List[float]] = collections.defaultdict(list)
    try:
        for t in threads:
            t.start()
        stop.wait(QUIET)
        for n in range(args.rounds):
            for fault in FAULTS:
                if n and time.monotonic() + lasted[fault] > until:
                    continue  # the first round of each fault always runs; more as time allows
                books.begin(fault)
                t0 = time.monotonic()
                if fault == "kill":
                    took = topo.kill_master()
                elif fault == "pause":
                    took = topo.pause_master()
                else:
                    took = topo.cut_then_kill(CUT)
                for k, v in took.items():
                    timings[f"{fault} {k}"].append(v)
                back = time.monotonic() - t0
                stop.wait(QUIET)
                lasted[fault] = max(lasted.get(fault, 0.0), time.monotonic() - t0)
                rounds[fault] += 1
                print(f"  {leg}: {fault} #{rounds[fault]}: " + ", ".join(f"{k} {v:.1f}s" for k, v in took.items())
                      + f", all back in {back:.1f}s (master on port {topo.master.port})", flush=True)
    finally:
        stop.set()
        for t in threads:
            t.join(20)
        failovers = len(topo.switches.seen)
        topo.close()
    return {"books": books, "base": base, "rounds": rounds, "timings": timings, "failovers": failovers,
            "stuck": [t.name for t in threads if t.is_alive()]}


def tally(leg: str, out: Dict[str, Any]) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Rows per fault of one leg, and the violations found."""
    books: Books = out["books"]
    verdict = lost_grants(books.grants)
    stale = stale_accepted(books.resource.writes)
    rows: Dict[str, Dict[str, Any]] = {}
    kinds = ["warm-up"] + FAULTS
    for kind in kinds:
        rows[kind] = collections.Counter(failovers=out["rounds"].get(kind, 0))
    label = [books.segments[i][0] for i in range(len(books.segments))]

    def at(t: float) -> Dict[str, Any]:
        """The row of the segment under way at `t`."""
        return rows[label[max(i for i, (_, start) in enumerate(books.segments) if start <= t)]]

    for g in books.grants:
        rows[label[g.segment]]["grants"] += 1
        if g.vanished and g.release_answered is not None:
            at(g.release_answered)["gone at release"] += 1
    lost = {i: label[books.grants[shown].segment] for i, (_, shown) in verdict.lost.items()}  # when it showed
    for i, seg in books.missing.items():
        lost.setdefault(i, label[seg])
    for kind in lost.values():
        rows[kind]["lost"] += 1
    for w in stale:
        at(w.at)["stale accepted"] += 1
    for seg, counts in books.counts.items():
        row = rows[label[seg]]
        row["stale refused"] += counts["stale write refused"]
        row["not replicated"] += counts["error NotReplicatedError"]
        row["errors"] += sum(v for k, v in counts.items() if k.startswith("error ") and k != "error NotReplicatedError")
    why = {i: "missing on the new master while held" for i in books.missing}
    why.update({i: reason for i, (reason, _) in verdict.lost.items()})
    dump(out["base"], books, why)
    violations = []
    if stale:
        violations.append(f"{leg}: {len(stale)} stale writes accepted")
    if verdict.duplicate_fences:
        violations.append(f"{leg}: {verdict.duplicate_fences} pairs of grants with one fence")
    if rows["warm-up"]["lost"]:
        violations.append(f"{leg}: {rows['warm-up']['lost']} grants lost before any fault")
    for fault in DURABLE.get(leg, ()):
        if rows[fault]["lost"]:
            violations.append(f"{leg}: {rows[fault]['lost']} acknowledged grants lost at {fault}")
    if out["stuck"]:
        violations.append(f"{leg}: workers that did not stop: {', '.join(out['stuck'])}")
    table = [dict(leg=leg, fault=kind, **rows[kind]) for kind in kinds]
    return table, violations


def dump(base: str, books: Books, lost: Dict[int, str]) -> None:
    """The leg's record, for a look after the run: every grant (times relative to the start,
    the lost ones with why), the counts of each segment, and the writes refused."""
    t0 = books.segments[0][1]
    with open(os.path.join(base, "grants.tsv"), "w") as f:
        f.write("segment\tname\tworker\tfence\tack\tend\tlease_end\trelease\treleased\tlost\n")
        for i, g in enumerate(books.grants):
            answered = "" if g.release_answered is None else f"{g.release_answered - t0:.3f}"
            f.write(f"{books.segments[g.segment][0]}#{g.segment}\t{g.name}\t{g.worker}\t{g.fence}\t{g.ack - t0:.3f}"
                    f"\t{g.end - t0:.3f}\t{g.lease_end - t0:.3f}\t{g.release}\t{answered}\t{lost.get(i, '')}\n")
    with open(os.path.join(base, "counts.txt"), "w") as f:
        for seg, (label, start) in enumerate(books.segments):
            f.write(f"{label}#{seg} at {start - t0:.3f}: {dict(books.counts.get(seg, {}))}\n")
        for w in books.resource.writes:
            if not w.accepted:
                f.write(f"refused {w.name} fence {w.fence} at {w.at - t0:.3f}\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", default=os.environ.get("REDIS_SERVER", "/usr/bin/redis-server"))
    p.add_argument("--module", default=os.path.join(root, "target", "release", "libredislock.so"))
    p.add_argument("--secs", type=float, default=float(os.environ.get("STRESS_FAILOVER_SECS", 480)))
    p.add_argument("--rounds", type=int, default=int(os.environ.get("STRESS_FAILOVER_ROUNDS", 3)))
    p.add_argument("--legs", default=",".join(LEGS))
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--locks", type=int, default=3)
    p.add_argument("--logs", default=None, help="where the servers' logs go (default: a temporary directory)")
    p.add_argument("--seed", type=int, default=int(os.environ.get("STRESS_SEED", time.time())))
    args = p.parse_args()
    install_cleanup()
    self_test()
    started = time.monotonic()
    logs = args.logs or tempfile.mkdtemp(prefix="failover-soak-")
    os.makedirs(logs, exist_ok=True)
    module = os.path.join(logs, "libredislock.so")  # a copy: a rebuild during the run changes nothing
    shutil.copy(args.module, module)
    legs = [leg for leg in args.legs.split(",") if leg]
    skipped = [leg for leg in legs if LEGS[leg][0] and not client_has_replicas()]
    legs = [leg for leg in legs if leg not in skipped]
    words = subprocess.run([args.server, "--version"], capture_output=True, text=True).stdout.split()
    version = " ".join(words[:2] + [words[2].removeprefix("v=")])  # "Redis server 7.0.15"
    setup = (f"{args.workers} workers ({JOB_WORKERS} on {JOBS} job locks, the others on {args.locks} locks), "
             f"lease {LEASE:.0f} s, read timeouts 5 s and 1 s")
    print(f"failover soak on {version}: legs {','.join(legs)}, up to {args.rounds} rounds of each fault "
          f"in {args.secs:.0f}s, {setup}, seed {args.seed}, logs in {logs}", flush=True)
    rows: List[Dict[str, Any]] = []
    violations: List[str] = []
    extra: List[str] = []
    deadline = started + args.secs
    try:
        for i, leg in enumerate(legs):
            until = time.monotonic() + (deadline - time.monotonic()) / (len(legs) - i)
            out = run_leg(leg, args, module, os.path.join(logs, leg), until)
            table, found = tally(leg, out)
            rows += table
            violations += found
            planned = sum(out["rounds"].values())
            spans = ", ".join(f"{k} {min(v):.1f}-{max(v):.1f}s" for k, v in sorted(out["timings"].items()))
            extra.append(f"{leg}: {planned} failovers made, {out['failovers'] - planned} more by Sentinel alone; "
                         f"{spans}")
    except Exception as err:
        reap()
        traceback.print_exc()
        print(f"FAILOVER-SUMMARY harness failure: {err}", flush=True)
        print(f"failover soak: stopped ({err}); logs in {logs}", file=sys.stderr)
        return 2
    secs = time.monotonic() - started
    print()
    print(f"Failover soak on {version}, {setup}; {secs:.0f} s, seed {args.seed}:")
    print()
    print("\n".join(markdown(rows)))
    print()
    print(LEGEND)
    print()
    for line in extra:
        print(f"- {line}")
    for leg in skipped:
        print(f"- {leg}: not run (the client has no replicas option)")
    for v in violations:
        print(f"VIOLATION {v}")
    totals: Counter[str] = collections.Counter()
    for r in rows:
        totals.update({k: v for k, v in r.items() if isinstance(v, int)})
    print(f"FAILOVER-SUMMARY legs={len(legs)} failovers={totals['failovers']} grants={totals['grants']} "
          f"lost={totals['lost']} stale_accepted={totals['stale accepted']} violations={len(violations)} "
          f"secs={secs:.0f}", flush=True)
    if not args.logs and not violations:
        shutil.rmtree(logs, ignore_errors=True)
    return 1 if violations else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: every server goes with the soak
        reap()
        print("failover soak: interrupted; every server it started is stopped", file=sys.stderr)
        sys.exit(130)
