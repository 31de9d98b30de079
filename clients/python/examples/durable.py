"""A grant reported only once a replica has it (docs/clients.md).

    python durable.py        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT

With a replica attached to the server, the grant is acknowledged and the block runs; without one
(as where the tests run it), acquire raises NotReplicatedError and nothing is left held.
"""

import os

PORT = int(os.environ.get("REDIS_PORT", "6379"))

import redis
import redislock

r = redis.Redis(host="127.0.0.1", port=PORT)
lock = redislock.Lock(r, "lock:ledger", timeout=30, replicas=1, replicas_timeout=0.5)
try:
    with lock:
        # LOCK.ACQUIRE was followed by WAIT 1 500 on its connection: a replica has the grant.
        print("holding lock:ledger with fence", lock.fence)
except redislock.NotReplicatedError as err:
    # Not acknowledged within 0.5 s: the grant was released again (err.released).
    print(f"not replicated: {err.replicas} of {err.needed} replica(s); released: {err.released}")
