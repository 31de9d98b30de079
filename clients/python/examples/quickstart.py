"""redislock from Python: the example of the README.

    python quickstart.py [PORT]
"""

import sys

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 6379


def do_the_work(step: int, fence: int) -> None:
    print(f"step {step} with fence {fence}")


# docs:begin quickstart
import redis
import redislock

r = redis.Redis(host="127.0.0.1", port=PORT)

# redis-py's own lock(), served by the module: waits in the server, and hands out a fence.
with r.lock("lock:report", timeout=30, blocking_timeout=5, lock_class=redislock.Lock) as lock:
    print("holding lock:report with fence", lock.fence)

# No timeout: held until released, its lease renewed in the background.
with redislock.Lock(r, "lock:nightly") as lock:
    for step in range(3):
        if lock.lost.is_set():                 # set when the hold is lost (or may be)
            raise SystemExit("lock:nightly was lost: stop")
        do_the_work(step, lock.fence)
# docs:end quickstart
