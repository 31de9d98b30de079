"""Shared locks, semaphores, connection-bound holds and guarded writes: thin pass-throughs of
the server's options. Each test is skipped while the server does not support its feature."""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import LockNotOwnedError, ResponseError

import redislock


def option_supported(r, *option) -> bool:
    """False if the server answers the option with an unknown-option error."""
    try:
        r.execute_command("LOCK.ACQUIRE", "probe:wave2", "probe", "PX", 1000, *option)
    except ResponseError as err:
        if "unknown option" in str(err).lower() or "syntax error" in str(err).lower():
            return False
        raise
    r.delete("probe:wave2")
    return True


def need_option(r, *option):
    if not option_supported(r, *option):
        pytest.skip(f"this server's redislock has no {option[0]} option yet")


def need_command(r, command):
    if not redislock.supports(r, command):
        pytest.skip(f"this server's redislock has no {command} command yet")


def test_unsupported_options_raise_unsupported_error(r):
    if option_supported(r, "SHARED"):
        pytest.skip("the server supports SHARED")
    with pytest.raises(redislock.UnsupportedError):
        redislock.Lock(r, "lock:s", timeout=10, shared=True).acquire()


def test_unsupported_commands_raise_unsupported_error(r):
    if redislock.supports(r, "lock.call"):
        pytest.skip("the server supports LOCK.CALL")
    lock = redislock.Lock(r, "lock:c", timeout=10)
    assert lock.acquire()
    with pytest.raises(redislock.UnsupportedError):
        lock.call("SET", "{lock:c}:data", "x")
    lock.release()


def test_shared_holders(r):
    need_option(r, "SHARED")
    readers = [redislock.Lock(r, "lock:rw", timeout=10, shared=True) for _ in range(3)]
    assert all(lock.acquire(blocking=False) for lock in readers)
    fences = [lock.fence for lock in readers]
    assert fences == sorted(fences) and len(set(fences)) == 3
    writer = redislock.Lock(r, "lock:rw", timeout=10)
    assert writer.acquire(blocking=False) is False
    info = readers[0].info()
    assert info["mode"] == "shared" and len(info["holders"]) == 3
    assert all(lock.owned() for lock in readers)
    for lock in readers:
        lock.release()
    assert writer.acquire(blocking=False)
    writer.release()


def test_semaphore(r):
    need_option(r, "LIMIT", 2)
    a, b, c = (redislock.Lock(r, "lock:sem", timeout=10, limit=2) for _ in range(3))
    assert a.acquire(blocking=False) and b.acquire(blocking=False)
    assert c.acquire(blocking=False) is False
    assert a.info()["mode"] == "semaphore"
    a.release()
    assert c.acquire(blocking=False)
    b.release()
    c.release()


def test_ephemeral_hold_ends_with_its_connection(server, r):
    need_option(r, "EPHEMERAL")
    own = server.client(single_connection_client=True)
    lock = redislock.Lock(own, "lock:eph", timeout=60, ephemeral=True)
    assert lock.acquire()
    assert r.exists("lock:eph") == 1
    own.close()
    other = redislock.Lock(r, "lock:eph", timeout=10)
    assert other.acquire(blocking_timeout=5)
    other.release()


def test_call_runs_only_for_the_holder(r):
    need_command(r, "lock.call")
    lock = redislock.Lock(r, "{acct}:lock", timeout=10)
    assert lock.acquire()
    assert lock.call("SET", "{acct}:balance", "10") in (True, b"OK", "OK")
    assert r.get("{acct}:balance") == b"10"
    r.delete("{acct}:lock")
    with pytest.raises(LockNotOwnedError):
        lock.call("SET", "{acct}:balance", "20")
    assert r.get("{acct}:balance") == b"10"


def test_fence_gate(r):
    need_command(r, "lock.fence")
    gate = redislock.FenceGate(r, "gate:report")
    assert gate.call(100, "SET", "{gate:report}:v", "a") in (True, b"OK", "OK")
    assert gate.call(100, "SET", "{gate:report}:v", "b") in (True, b"OK", "OK")
    with pytest.raises(redislock.StaleFenceError) as caught:
        gate.call(99, "SET", "{gate:report}:v", "c")
    assert caught.value.fence == 99 and caught.value.highest == 100
    assert r.get("{gate:report}:v") == b"b"
