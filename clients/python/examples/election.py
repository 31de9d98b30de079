"""One active scheduler among N processes, with Election.run (docs/clients.md).

    python election.py        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT

Each scheduler runs `election.run(schedule)`: it campaigns, and once elected `schedule(stop)`
writes jobs through a fence gate with its term until `stop` is set — the moment leadership is
lost, or when the scheduler is stopped —; then the term is resigned and the next candidate in
line leads, with a higher term. Here three schedulers are threads of one process, queued in
order, and stopped one after the other (a rolling restart); in production each is a process of
its own, and one that dies is succeeded at once. A follower watches who leads (LOCK.OBSERVE),
and sees nobody lead once the last one stopped. A write with an older term is refused at the gate.
"""

import os
import threading
import time
from typing import Iterator, List, Optional

PORT = int(os.environ.get("REDIS_PORT", "6379"))

import redis
import redislock

r = redis.Redis(host="127.0.0.1", port=PORT)
NAME = "election:scheduler"


class Scheduler:
    """One of the N processes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.election = redislock.Election(r, NAME, lease=10, data=name)
        self.gate = redislock.FenceGate(r, "gate:jobs")
        self.worked = threading.Event()
        self.term = 0
        self.thread = threading.Thread(target=self.election.run, args=(self.schedule,),
                                       kwargs={"on_elected": self.elected})

    def elected(self, term: int) -> None:
        self.term = term
        print(f"{self.name} leads in term {term}")

    def schedule(self, stop: threading.Event) -> None:
        """Called once elected; `stop` is set the moment leadership is lost (or run is stopped),
        before the term is resigned. When this returns, the term is resigned."""
        term = self.term
        for n in range(2):
            if stop.is_set():              # lost: stop at once
                return
            # Every write goes through the gate with the term: once a newer leader has written,
            # a late write of this one is refused (StaleFenceError) instead of mixing in.
            self.gate.call(term, "RPUSH", "jobs:queue", f"job {n} of term {term} by {self.name}")
        self.worked.set()
        stop.wait()                        # leads until lost or stopped


def queued() -> int:
    """How many candidates wait (LOCK.INFO's waiters)."""
    info = redislock.Lock(r, NAME).info()
    return 0 if info is None else int(info["waiters"])


schedulers = [Scheduler(f"scheduler-{i}") for i in range(3)]
for i, s in enumerate(schedulers):          # started in order, each queued behind the ones before
    s.thread.start()
    if i == 0:
        s.worked.wait()                    # the first one leads
    else:
        while queued() < i:                # the others wait in the server, in order
            time.sleep(0.01)

follower: Iterator[Optional[redislock.Leader]] = redislock.Election(r, NAME).observe()
terms: List[int] = []
for s in schedulers:
    s.worked.wait()
    leader = next(follower)                # waits in the server for the next leader
    assert leader is not None and leader.data is not None
    print(f"a follower sees {leader.data.decode()} leading in term {leader.term}")
    terms.append(leader.term)
    s.election.stop()                      # shutting down: its term resigned, the next one leads
    s.thread.join()
print("a follower sees", next(follower))   # None: nobody leads after the last one stopped

for job in r.lrange("jobs:queue", 0, -1):
    print(os.fsdecode(job))                # bytes to str
try:
    redislock.FenceGate(r, "gate:jobs").call(terms[0], "RPUSH", "jobs:queue", "late write")
except redislock.StaleFenceError as err:
    print("a deposed leader's write is refused:", err)
r.delete("gate:jobs", "jobs:queue")
