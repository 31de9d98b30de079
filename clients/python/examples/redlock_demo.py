"""Redlock over independent servers (docs/clients.md).

    python redlock_demo.py PORT [PORT ...]
"""

import sys

PORTS = [int(p) for p in sys.argv[1:]] or [6379]

# docs:begin redlock
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import redislock

# Independent masters; short timeouts, no retries: a server that does not answer must not
# use up the lease.
servers = [
    redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.2, retry=Retry(NoBackoff(), 0))
    for port in PORTS
]
with redislock.Redlock(servers, "lock:report", ttl=10) as lock:
    print("held on", sorted(lock.fences), "for", round(lock.validity, 2), "s more")
    lock.extend()
# docs:end redlock
