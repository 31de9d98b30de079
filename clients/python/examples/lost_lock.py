"""What happens when a lock is lost under its holder (docs/clients.md).

    python lost_lock.py        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
"""

import os

PORT = int(os.environ.get("REDIS_PORT", "6379"))

import threading

import redis
import redislock
from redis.exceptions import LockNotOwnedError

r = redis.Redis(host="127.0.0.1", port=PORT)
gone = threading.Event()

lock = redislock.Lock(r, "lock:lost", lease=0.3, on_lost=lambda lock: gone.set())
lock.acquire()
r.delete("lock:lost")          # an operator, an eviction, a pause longer than the lease
assert gone.wait(5)            # on_lost ran, within a third of the lease
assert lock.lost.is_set()
try:
    lock.release()
except LockNotOwnedError:      # redis-py's own exception, as with its Lock
    print("lock:lost was lost before release")
