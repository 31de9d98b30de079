"""redislock from Python: the example of the README.

    python quickstart.py        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
"""

import os

import redis
import redislock

r = redis.Redis(host="127.0.0.1", port=int(os.environ.get("REDIS_PORT", "6379")))

# redis-py's own lock(), served by the module: waits in the server, and hands out a fence.
with r.lock("lock:report", timeout=30, blocking_timeout=5, lock_class=redislock.Lock) as lock:
    print("holding lock:report with fence", lock.fence)

# No timeout: held until released, its lease renewed in the background.
with redislock.Lock(r, "lock:nightly") as nightly:
    for step in range(3):
        if nightly.lost.is_set():              # set when the hold is lost (or may be)
            raise SystemExit("lock:nightly was lost: stop")
        print(f"step {step} of the nightly job, with fence {nightly.fence}")
