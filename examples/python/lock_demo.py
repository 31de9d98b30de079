#!/usr/bin/env python3
"""redislock from Python with redis-py.

    pip install redis
    python3 lock_demo.py        # 127.0.0.1:6379, or REDIS_PORT=6380; REDIS_HOST=host

Against a server with the redislock module loaded, it shows:
  1. acquire a lock with a generated token (`*`), write to a resource guarded by the fencing
     token, extend the lease, write again, release;
  2. a holder that pauses past its lease: the next holder gets a larger fence, and the resource
     rejects the late write of the old holder;
  3. BLOCK: a second client waits in the server and is granted the lock when the first releases.

It prints a transcript and exits 0, or exits 1 on any unexpected reply. It uses the keys
demo:report and demo:queue, with TTLs of at most 10 s.
"""

import os
import sys
import threading
import time

try:
    import redis
except ImportError:
    sys.exit("lock_demo.py needs redis-py: pip install redis")

HOST = os.environ.get("REDIS_HOST", "127.0.0.1")
PORT = int(os.environ.get("REDIS_PORT", "6379"))


class Unexpected(Exception):
    """A reply the demo did not expect."""


class FencedResource:
    """Stands for the storage the lock protects (a database row, a file, an API).

    It remembers the highest fence it has seen and refuses writes that carry a lower one, so a
    holder whose lease ran out cannot overwrite the work of the holder after it.
    """

    def __init__(self):
        self.highest = 0
        self.data = []

    def write(self, fence, item):
        if fence < self.highest:
            print(f"resource: write with fence {fence} rejected (highest seen {self.highest})")
            return False
        self.highest = fence
        self.data.append(item)
        print(f"resource: write with fence {fence} accepted ({item})")
        return True


def connect():
    return redis.Redis(host=HOST, port=PORT, socket_timeout=15)


def acquire(r, key, token, px, *extra):
    """LOCK.ACQUIRE: (token, fence) when granted, None when the lock is busy."""
    reply = r.execute_command("LOCK.ACQUIRE", key, token, "PX", px, *extra)
    if reply is None:
        return None
    if not (isinstance(reply, list) and len(reply) == 2 and isinstance(reply[1], int)):
        raise Unexpected(f"LOCK.ACQUIRE answered {reply!r}")
    token, fence = reply
    return token.decode(), fence


def expect(what, got, want):
    if got != want:
        raise Unexpected(f"{what}: expected {want!r}, got {got!r}")


def lock_info(r, key):
    """LOCK.INFO as a dict (a flat field/value list under RESP2, a map under RESP3)."""
    reply = r.execute_command("LOCK.INFO", key)
    if reply is None:
        return None
    if isinstance(reply, dict):
        items = reply.items()
    else:
        items = zip(reply[0::2], reply[1::2])
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in items}


def basic(r):
    resource = FencedResource()
    grant = acquire(r, "demo:report", "*", 10000)
    if grant is None:
        raise Unexpected("demo:report is held by someone else (try again in 10 s)")
    token, fence = grant
    print(f"acquired: token={token} fence={fence}")

    if not resource.write(fence, "part 1"):
        raise Unexpected("the resource refused the holder's write")
    expect("LOCK.EXTEND", r.execute_command("LOCK.EXTEND", "demo:report", token, "PX", 10000), 1)
    print(f"extended: 1 (ttl {lock_info(r, 'demo:report')['ttl']} ms)")
    if not resource.write(fence, "part 2"):
        raise Unexpected("the resource refused the holder's write")
    expect("LOCK.RELEASE", r.execute_command("LOCK.RELEASE", "demo:report", token), 1)
    print("released: 1")
    print(f"resource holds: {', '.join(resource.data)}")


def lease_lost(r):
    resource = FencedResource()
    a = acquire(r, "demo:report", "*", 100)
    if a is None:
        raise Unexpected("demo:report is held by someone else")
    print(f"holder A acquired: fence={a[1]} (lease 100 ms)")
    print("holder A pauses for 300 ms (GC, swap, network...): its lease expires")
    time.sleep(0.3)

    b = acquire(r, "demo:report", "*", 10000)
    if b is None:
        raise Unexpected("the expired lock was not granted to B")
    print(f"holder B acquired: fence={b[1]}")
    if b[1] <= a[1]:
        raise Unexpected(f"fence {b[1]} of B is not greater than fence {a[1]} of A")
    if not resource.write(b[1], "B's report"):
        raise Unexpected("the resource refused B's write")

    # A wakes up and carries on: the resource turns it away, and its lease is gone.
    if resource.write(a[1], "A's late report"):
        raise Unexpected("the resource accepted a stale fence")
    expect("LOCK.EXTEND by A", r.execute_command("LOCK.EXTEND", "demo:report", a[0], "PX", 10000), 0)
    print("stale holder extend: 0 (lease lost)")
    expect("LOCK.RELEASE by B", r.execute_command("LOCK.RELEASE", "demo:report", b[0]), 1)
    print("released: 1")


def block(r):
    holder = acquire(r, "demo:queue", "*", 10000)
    if holder is None:
        raise Unexpected("demo:queue is held by someone else")
    print(f"holder acquired: fence={holder[1]}")

    result = {}

    def wait():
        waiter = connect()  # its own connection: it blocks until the lock is granted
        start = time.monotonic()
        try:
            result["grant"] = acquire(waiter, "demo:queue", "*", 10000, "BLOCK", 5000)
        except Exception as e:  # reported by the main thread
            result["error"] = e
        result["ms"] = (time.monotonic() - start) * 1000
        waiter.close()

    thread = threading.Thread(target=wait)
    thread.start()
    deadline = time.monotonic() + 5
    while (lock_info(r, "demo:queue") or {}).get("waiters") != 1:
        if time.monotonic() > deadline:
            raise Unexpected("the waiter never showed in LOCK.INFO")
        time.sleep(0.01)
    print("waiter queued: waiters=1 (LOCK.ACQUIRE demo:queue * PX 10000 BLOCK 5000)")

    time.sleep(0.2)  # the holder works a little longer
    expect("LOCK.RELEASE", r.execute_command("LOCK.RELEASE", "demo:queue", holder[0]), 1)
    print("holder released: 1")
    thread.join(10)
    if "error" in result:
        raise Unexpected(f"the waiter's LOCK.ACQUIRE failed: {result['error']}")
    grant = result.get("grant")
    if grant is None:
        raise Unexpected("the waiter was not granted the lock")
    print(f"waiter granted: token={grant[0]} fence={grant[1]} after {result['ms']:.0f} ms")
    if grant[1] <= holder[1]:
        raise Unexpected("the waiter's fence is not greater than the holder's")
    expect("LOCK.RELEASE", r.execute_command("LOCK.RELEASE", "demo:queue", grant[0]), 1)
    print("released: 1")


def main():
    print(f"redislock demo (redis-py {redis.__version__}) on {HOST}:{PORT}")
    r = connect()
    try:
        print("-- acquire, fenced writes, extend, release")
        basic(r)
        print("-- a holder that lost its lease")
        lease_lost(r)
        print("-- BLOCK: wait for the lock in the server")
        block(r)
    except (Unexpected, redis.RedisError) as e:
        print(f"demo FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        r.close()
    print("demo OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
