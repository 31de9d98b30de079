"""Money moved between accounts, each transfer holding both accounts at once (docs/clients.md,
"Locking several resources").

    python transfer.py        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT

Transfers run both ways at the same time (alice → bob while bob → alice): each takes the locks
of its two accounts in one step, all or nothing, so no transfer holds one account while waiting
for the other, and none can deadlock, whatever order it names them in. Each write goes through
its account's fence gate with that account's fence. The total stays the same.
"""

import os
import sys
import threading

PORT = int(os.environ.get("REDIS_PORT", "6379"))

import redis
import redislock

r = redis.Redis(host="127.0.0.1", port=PORT, decode_responses=True)


def transfer(source: str, target: str, amount: int) -> bool:
    """Moves ``amount`` from ``source`` to ``target``: False if ``source`` has too little."""
    locks = [f"{{bank}}:lock:{source}", f"{{bank}}:lock:{target}"]   # one hash tag: one slot
    with redislock.MultiLock(r, locks, lease=10) as held:   # both accounts, or wait for both
        fences = held.fences                                 # one fence per account
        if int(r.get(f"{{bank}}:balance:{source}") or 0) < amount:
            return False
        # Each write is fenced with its own account's fence: a holder that stalled past its
        # lease and writes late is refused (StaleFenceError) once the next holder has written.
        redislock.FenceGate(r, f"{{bank}}:gate:{source}").call(
            fences[locks[0]], "DECRBY", f"{{bank}}:balance:{source}", amount)
        redislock.FenceGate(r, f"{{bank}}:gate:{target}").call(
            fences[locks[1]], "INCRBY", f"{{bank}}:balance:{target}", amount)
    return True   # leaving the block released both locks (LOCK.RELEASEALL)


if not redislock.supports(r, "LOCK.ACQUIREALL"):
    print("this server's redislock has no LOCK.ACQUIREALL: nothing to show")
    sys.exit(0)

r.set("{bank}:balance:alice", 100)
r.set("{bank}:balance:bob", 100)
moves = [("alice", "bob", 7), ("bob", "alice", 5)] * 10
workers = [threading.Thread(target=transfer, args=move) for move in moves]
for w in workers:
    w.start()
for w in workers:
    w.join()
alice, bob = int(r.get("{bank}:balance:alice") or 0), int(r.get("{bank}:balance:bob") or 0)
print(f"alice {alice}, bob {bob}")
assert (alice, bob) == (80, 120), (alice, bob)   # every transfer applied once, none lost
assert transfer("alice", "bob", 1000) is False
r.delete("{bank}:balance:alice", "{bank}:balance:bob", "{bank}:gate:alice", "{bank}:gate:bob")
