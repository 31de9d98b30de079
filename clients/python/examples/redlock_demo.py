"""Redlock over independent servers (docs/clients.md).

    python redlock_demo.py      # the servers on 127.0.0.1:6379, or on the ports in REDIS_PORT

Independent masters, their ports separated by commas in REDIS_PORT (6379,6380,6381); one
server is enough to try it.
"""

import os

PORTS = [int(p) for p in os.environ.get("REDIS_PORT", "6379").split(",")]

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
    print(f"held on {len(lock.fences)} of {len(servers)} server(s)")
    lock.extend()
