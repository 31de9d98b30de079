"""Shared locks and semaphores from Python: the example of docs/clients.md.

    python shared_locks.py        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
"""

import os

PORT = int(os.environ.get("REDIS_PORT", "6379"))

import redis
import redislock

r = redis.Redis(host="127.0.0.1", port=PORT)

# Readers share lock:config; each has its own token, fence and lease.
readers = [redislock.Lock(r, "lock:config", timeout=30, shared=True) for _ in range(2)]
for reader in readers:
    reader.acquire()
info = readers[0].info()
assert info is not None                                      # None: nobody holds it
print(info["mode"], [h["fence"] for h in info["holders"]])   # shared [61727…, 61727…]

# A writer gets the lock once every reader has left; readers that come after a waiting
# writer wait for it.
writer = redislock.Lock(r, "lock:config", timeout=30)
assert not writer.acquire(blocking=False)
for reader in readers:
    reader.release()
with writer:
    print("writing with fence", writer.fence)

# A semaphore: at most two holders of lock:exports at once.
with redislock.Lock(r, "lock:exports", timeout=30, limit=2) as place:
    print("export slot with fence", place.fence)
    try:
        redislock.Lock(r, "lock:exports", timeout=30, limit=3).acquire()
    except redislock.LockKindError as err:   # every holder must give the same limit
        print("refused: the key has LIMIT", err.limit)
