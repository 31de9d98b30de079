#!/usr/bin/env python3
"""Contention driver: N worker processes take turns on ONE lock.

Each worker loops for `duration` seconds: acquire, hold (sleep) `hold`
seconds, release. Two ways of waiting:

  native  LOCK.ACQUIRE key tok PX 10000 BLOCK 5000, then LOCK.RELEASE
          (the server queues waiters and hands the lock over on release)
  classic SET key tok NX PX 10000; on nil sleep `poll` (100 ms, redis-py
          Lock's default) and retry; release with the Lua compare-and-delete

Every worker records, per critical section, client-side CLOCK_MONOTONIC
times (system-wide, so comparable across processes): when it started to ask,
when the grant reply arrived, when it sent the release. From these:

  rate      critical sections whose grant arrived inside the window / window
  ideal     1 / (hold + RTT): a handoff cannot beat one round trip
            (release reaches the server, the grant reaches the next holder);
            computed with the measured median hold (sleep overshoots) and
            the median PING RTT of the same client code
  gap       release sent -> next grant received, for grants whose worker
            was already waiting when the previous holder released
  fairness  max/min critical sections per worker
  wait      grant received - started asking (longest)

Also checked: no two observed holding intervals overlap (the client-side
interval lies inside the server-side one, so an overlap would be a broken
lock), and with the native lock each grant's fence exceeds the previous one.

Usage: contention.py PORT [--workers 8] [--hold-ms 1] [--duration 5] [--mode native|classic|both]
"""

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resp import Redis  # noqa: E402

RELEASE_LUA = (
    "if redis.call('get',KEYS[1]) == ARGV[1] then "
    "return redis.call('del',KEYS[1]) else return 0 end"
)
KEY = "contended"
LOCK_TTL_MS = 10000


def _pin(cpus):
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except (AttributeError, OSError):
            pass


def _worker(mode, idx, port, start_at, end_at, hold, poll, sha, cpus, out):
    _pin(cpus)
    now = time.monotonic
    events = []  # (t_ask, t_grant, t_release, fence, attempts)
    timeouts = 0
    errors = []
    r = Redis(port)
    token = "worker-%d-%d" % (idx, os.getpid())
    try:
        while now() < start_at:
            time.sleep(0.0005)
        while True:
            t_ask = now()
            if t_ask >= end_at:
                break
            attempts = 0
            fence = 0
            if mode == "native":
                attempts = 1
                rep = r.call("LOCK.ACQUIRE", KEY, token, "PX", LOCK_TTL_MS, "BLOCK", 5000)
                t_grant = now()
                if rep is None:
                    timeouts += 1
                    continue
                fence = int(rep[1])
            else:
                while True:
                    attempts += 1
                    rep = r.call("SET", KEY, token, "NX", "PX", LOCK_TTL_MS)
                    if rep == "OK":
                        t_grant = now()
                        break
                    time.sleep(poll)
            time.sleep(hold)
            t_rel = now()
            if mode == "native":
                ok = r.call("LOCK.RELEASE", KEY, token)
            else:
                ok = r.call("EVALSHA", sha, 1, KEY, token)
            if ok != 1:
                errors.append("release replied %r" % (ok,))
            events.append((t_ask, t_grant, t_rel, fence, attempts))
    except Exception as e:  # reported, not hidden
        errors.append(repr(e))
    finally:
        r.close()
    out.put((idx, events, timeouts, errors))


def measure_rtt(port, count=2000, cpus=None):
    """Median PING round trip of this client code, in seconds."""
    if cpus:
        old = os.sched_getaffinity(0)
        _pin(cpus)
    r = Redis(port)
    samples = []
    for _ in range(count):
        t0 = time.monotonic()
        r.call("PING")
        samples.append(time.monotonic() - t0)
    r.close()
    if cpus:
        _pin(old)
    return statistics.median(samples)


def _pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


def run(port, mode, workers=8, hold=0.001, duration=5.0, poll=0.1, cpus=None, rtt=None):
    ctl = Redis(port)
    ctl.call("DEL", KEY)
    sha = ctl.call("SCRIPT", "LOAD", RELEASE_LUA).decode()
    if rtt is None:
        rtt = measure_rtt(port, cpus=cpus)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    start_at = time.monotonic() + 0.5
    end_at = start_at + duration
    procs = [
        ctx.Process(
            target=_worker,
            args=(mode, i, port, start_at, end_at, hold, poll, sha, cpus, out),
        )
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=duration + 30) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    ctl.call("DEL", KEY)
    ctl.close()

    per_worker = {}
    events = []
    timeouts = 0
    errors = []
    for idx, evs, to, errs in results:
        per_worker[idx] = evs
        timeouts += to
        errors += errs
        events += [(e[1], e[2], e[0], e[3], e[4], idx) for e in evs]  # sort by grant
    events.sort()
    in_window = [e for e in events if start_at <= e[0] < end_at]
    rate = len(in_window) / duration
    holds = [e[1] - e[0] for e in events]
    hold_med = statistics.median(holds) if holds else float("nan")
    ideal = 1.0 / (hold_med + rtt)
    ideal_nominal = 1.0 / (hold + rtt)
    gaps = []
    overlaps = 0
    fence_regressions = 0
    max_rel = float("-inf")
    for prev, cur in zip(events, events[1:]):
        max_rel = max(max_rel, prev[1])
        if cur[0] < max_rel:
            overlaps += 1
        if mode == "native" and cur[3] <= prev[3]:
            fence_regressions += 1
        if cur[2] < prev[1]:  # cur's worker was already asking at release
            gaps.append(cur[0] - prev[1])
    waits = [e[0] - e[2] for e in events]
    counts = [len(per_worker.get(i, [])) for i in range(workers)]
    fairness = (max(counts) / min(counts)) if min(counts) > 0 else float("inf")
    return {
        "mode": mode,
        "workers": workers,
        "hold_ms_nominal": hold * 1e3,
        "hold_ms_median": hold_med * 1e3,
        "duration_s": duration,
        "rtt_ms": rtt * 1e3,
        "critical_sections": len(events),
        "in_window": len(in_window),
        "rate": rate,
        "ideal": ideal,
        "ideal_nominal": ideal_nominal,
        "pct_of_ideal": 100.0 * rate / ideal,
        "gap_ms_p50": _pct(gaps, 50) * 1e3,
        "gap_ms_p99": _pct(gaps, 99) * 1e3,
        "gap_count": len(gaps),
        "per_worker": counts,
        "fairness": fairness,
        "wait_ms_max": max(waits) * 1e3 if waits else float("nan"),
        "wait_ms_p50": _pct(waits, 50) * 1e3,
        "attempts_total": sum(e[4] for e in events),
        "timeouts": timeouts,
        "overlaps": overlaps,
        "fence_regressions": fence_regressions,
        "errors": errors[:5],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("port", type=int)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--hold-ms", type=float, default=1.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--poll-ms", type=float, default=100.0)
    ap.add_argument("--mode", choices=["native", "classic", "both"], default="both")
    a = ap.parse_args()
    modes = ["native", "classic"] if a.mode == "both" else [a.mode]
    for m in modes:
        res = run(a.port, m, a.workers, a.hold_ms / 1e3, a.duration, a.poll_ms / 1e3)
        print(json.dumps(res))


if __name__ == "__main__":
    main()
