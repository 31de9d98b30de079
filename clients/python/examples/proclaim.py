"""A leader that changes what it publishes without a new term (docs/clients.md).

    python proclaim.py        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT

The leader publishes its address as the election's data, then proclaims a new one (it moved to
another port): the term stays the same, and a follower sees each value in turn. Once it has
resigned, it can no longer proclaim.
"""

import os
import threading
from typing import List

PORT = int(os.environ.get("REDIS_PORT", "6379"))

import redis
import redislock
from redis.exceptions import LockNotOwnedError

r = redis.Redis(host="127.0.0.1", port=PORT)
seen: List[redislock.Leader] = []
first = threading.Event()


def follow() -> None:
    """A follower: each leader, and each value a leader proclaims."""
    for now in redislock.Election(r, "election:api").observe():
        if now is None:
            continue
        print(f"term {now.term}: {now.data!r}")
        seen.append(now)
        first.set()
        if len(seen) == 2:
            return


leader = redislock.Election(r, "election:api", lease=10, data="10.0.0.5:8080")
term = leader.campaign()
follower = threading.Thread(target=follow)
follower.start()
first.wait(10)
leader.proclaim("10.0.0.5:8081")     # the same term, a new value: every follower is told
follower.join(10)
assert [(x.term, x.data) for x in seen] == [(term, b"10.0.0.5:8080"), (term, b"10.0.0.5:8081")], seen
assert leader.term == term
leader.resign()
try:
    leader.proclaim("10.0.0.5:8082")
except LockNotOwnedError as err:
    print("no longer leading:", err)
