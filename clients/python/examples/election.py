"""One active scheduler among N processes: the classic job of a leader election (docs/clients.md).

    python election.py        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT

Each scheduler campaigns; the one elected schedules jobs, writing each through a fence gate with
its term, then resigns, and the next candidate in line takes over with a higher term. Here three
schedulers run as threads of one process and each leads once; in production each is a process of
its own, and leads until it stops (or dies: its connection closes and the next one leads at once).
A write with an older term is refused at the gate. Where the server has LOCK.OBSERVE, a follower
prints each new leader as it is elected.
"""

import os
import threading
from typing import List

PORT = int(os.environ.get("REDIS_PORT", "6379"))

import redis
import redislock

r = redis.Redis(host="127.0.0.1", port=PORT)


def scheduler(name: str, jobs: int) -> int:
    election = redislock.Election(r, "election:scheduler", lease=10, data=name)
    gate = redislock.FenceGate(r, "gate:jobs")
    term = election.campaign()           # waits in the server until this one leads
    print(f"{name} leads in term {term}")
    for n in range(jobs):
        if not election.is_leader:       # lost (its lease clock ran out): stop at once
            break
        # Every write goes through the gate with the term: once a newer leader has written,
        # a late write of this one is refused (StaleFenceError) instead of mixing in.
        gate.call(term, "RPUSH", "jobs:queue", f"job {n} of term {term} by {name}")
    election.resign()                    # the next candidate leads at once
    return term


def follow() -> None:
    """A follower's view: who leads, as soon as it changes (LOCK.OBSERVE)."""
    for leader in redislock.Election(r, "election:scheduler").observe():
        if leader is None:               # resigned, and no candidate waiting
            print("nobody leads")
        else:
            print(f"now leading: {leader.data!r} in term {leader.term}")


if redislock.supports(r, "LOCK.OBSERVE"):
    threading.Thread(target=follow, daemon=True).start()

terms: List[int] = []
schedulers = [
    threading.Thread(target=lambda i=i: terms.append(scheduler(f"scheduler-{i}", 2))) for i in range(3)
]
for t in schedulers:
    t.start()
for t in schedulers:
    t.join()

jobs = r.lrange("jobs:queue", 0, -1)
print(jobs)
written = [int(job.split()[4]) for job in jobs]   # "job N of term T by NAME"
assert written == sorted(written) and set(written) == set(terms), jobs   # one leader after the other
try:
    redislock.FenceGate(r, "gate:jobs").call(min(terms), "RPUSH", "jobs:queue", "late write")
except redislock.StaleFenceError as err:
    print("a deposed leader's write is refused:", err)
assert redislock.Election(r, "election:scheduler").leader() is None   # nobody leads now
r.delete("gate:jobs", "jobs:queue")
