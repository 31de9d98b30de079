"""redislock.Lock against a real server: redis-py's Lock contract, and what it adds."""

from __future__ import annotations

from typing import Any, List
from helpers import must
from servers import Server

import logging
import threading
import time

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError, ResponseError

import redislock


def info(r: redis.Redis, name: Any) -> Any:
    client: Any = r
    return redislock.lock.parse_info(client.execute_command("LOCK.INFO", name))


def calls(r: redis.Redis, command: Any) -> Any:
    stats = r.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def wait_for(predicate: Any, seconds: Any=5.0) -> None:
    """Polls a condition that has no event to await (state on the server)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


def waiters(r: redis.Redis, name: Any) -> Any:
    i = info(r, name)
    return i["waiters"] if i else 0


# --- redis-py's interface ---------------------------------------------------------------------


def test_drop_in_lock_class(r: redis.Redis) -> None:
    with r.lock("lock:a", timeout=10, blocking_timeout=1, lock_class=redislock.Lock) as lock:
        assert isinstance(lock, redislock.Lock)
        assert isinstance(lock.fence, int) and lock.fence > 0
        assert isinstance(lock.local.token, bytes) and len(lock.local.token) == 32
        i = info(r, "lock:a")
        assert i["token"] == lock.local.token and i["fence"] == lock.fence
        assert 9000 < i["ttl"] <= 10000
        assert r.type("lock:a") == b"redislock"
    assert r.exists("lock:a") == 0
    assert lock.fence is None


def test_constructor_takes_redis_py_arguments(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:b", 5, 0.05, False, 2, False, False)
    assert (lock.timeout, lock.sleep, lock.blocking, lock.blocking_timeout) == (5, 0.05, False, 2)
    assert lock.thread_local is False and lock.raise_on_release_error is False
    assert lock.acquire() is True
    lock.release()


def test_non_blocking_acquire_returns_false(r: redis.Redis) -> None:
    holder = redislock.Lock(r, "lock:c", timeout=10)
    other = redislock.Lock(r, "lock:c", timeout=10)
    assert holder.acquire(blocking=False)
    assert other.acquire(blocking=False) is False
    assert other.fence is None
    lock = redislock.Lock(r, "lock:c", timeout=10, blocking=False)
    assert lock.acquire() is False
    holder.release()


def test_blocking_timeout_waits_in_the_server(r: redis.Redis) -> None:
    holder = redislock.Lock(r, "lock:d", timeout=10)
    assert holder.acquire()
    before = calls(r, "lock.acquire")
    started = time.monotonic()
    assert redislock.Lock(r, "lock:d", timeout=10).acquire(blocking_timeout=0.3) is False
    waited = time.monotonic() - started
    assert 0.25 <= waited < 2
    # One call that waited in the server, not a polling loop.
    assert calls(r, "lock.acquire") == before + 1
    assert int(r.info("redislock")["redislock_wait_timeouts"]) >= 1
    holder.release()


def test_waiter_is_granted_on_release_first_come_first_served(server: Server, r: redis.Redis) -> None:
    holder = redislock.Lock(r, "lock:e", timeout=10)
    assert holder.acquire()
    order: List[Any] = []
    locks = []

    def wait(i: Any) -> None:
        client = server.client()
        lock = redislock.Lock(client, "lock:e", timeout=10)
        locks.append(lock)
        assert lock.acquire(blocking_timeout=10)
        order.append((i, lock.fence))
        lock.release()
        client.close()

    threads = []
    for i in range(3):
        t = threading.Thread(target=wait, args=(i,))
        t.start()
        threads.append(t)
        wait_for(lambda: waiters(r, "lock:e") == i + 1)
    holder.release()
    for t in threads:
        t.join(10)
    assert [i for i, _ in order] == [0, 1, 2]
    fences = [f for _, f in order]
    assert fences == sorted(fences) and fences[0] > must(holder.local.fence)


def test_token_argument_bytes_and_str(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:f", timeout=10)
    assert lock.acquire(token="my-token")
    assert lock.local.token == b"my-token"
    assert info(r, "lock:f")["token"] == b"my-token"
    # The same token again is a re-grant with the same fence: a lost reply can be retried.
    fence = lock.fence
    assert redislock.Lock(r, "lock:f", timeout=10).acquire(blocking=False, token=b"my-token")
    assert info(r, "lock:f")["fence"] == fence
    lock.release()


def test_decode_responses_client(server: Server) -> None:
    r = server.client(decode_responses=True)
    try:
        with redislock.Lock(r, "lock:g", timeout=10) as lock:
            assert lock.owned() and lock.locked()
            assert lock.extend(1)
    finally:
        r.close()


def test_extend_adds_time_unless_replace_ttl(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:h", timeout=10)
    assert lock.acquire()
    fence = lock.fence
    assert lock.extend(5) is True
    assert 14000 < r.pttl("lock:h") <= 15000
    assert lock.extend(2, replace_ttl=True) is True
    assert 1000 < r.pttl("lock:h") <= 2000
    assert lock.reacquire() is True
    assert 9000 < r.pttl("lock:h") <= 10000
    assert info(r, "lock:h")["fence"] == fence
    lock.release()
    with pytest.raises(LockError):
        lock.extend(1)
    with pytest.raises(LockError):
        lock.reacquire()


def test_extend_without_timeout_is_refused_like_redis_py(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:i", lease=5)
    assert lock.acquire()
    with pytest.raises(LockError, match="no timeout"):
        lock.extend(1)
    with pytest.raises(LockError, match="no timeout"):
        lock.reacquire()
    lock.release()


def test_not_owned_after_expiry(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:j", timeout=10)
    assert lock.acquire()
    r.delete("lock:j")  # as if the lease ran out
    assert not lock.owned() and not lock.locked()
    with pytest.raises(LockNotOwnedError):
        lock.extend(1)
    with pytest.raises(LockNotOwnedError):
        lock.reacquire()
    with pytest.raises(LockNotOwnedError):
        lock.release()
    with pytest.raises(LockError):
        lock.release()  # already released locally


def test_owned_and_locked(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:k", timeout=10)
    other = redislock.Lock(r, "lock:k", timeout=10)
    assert not lock.locked() and not lock.owned()
    assert lock.acquire()
    assert lock.locked() and lock.owned()
    assert other.locked() and not other.owned()
    lock.release()
    assert not lock.locked()


def test_context_manager_raises_when_not_acquired(r: redis.Redis) -> None:
    holder = redislock.Lock(r, "lock:l", timeout=10)
    assert holder.acquire()
    with pytest.raises(LockError, match="Unable to acquire"):
        with redislock.Lock(r, "lock:l", timeout=10, blocking=False):
            pass
    holder.release()


def test_context_manager_after_expiry(r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(LockNotOwnedError):
        with redislock.Lock(r, "lock:m", timeout=10):
            r.delete("lock:m")
    with caplog.at_level(logging.WARNING, logger="redislock"):
        with redislock.Lock(r, "lock:m", timeout=10, raise_on_release_error=False):
            r.delete("lock:m")
    assert "no longer owned" in caplog.text
    # The block's own exception is never replaced by the release's.
    with pytest.raises(KeyError):
        with redislock.Lock(r, "lock:m", timeout=10):
            r.delete("lock:m")
            raise KeyError("from the block")


def test_thread_local_token(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:n", timeout=10)
    assert lock.acquire()
    seen = []
    t = threading.Thread(target=lambda: seen.append(lock.local.token))
    t.start()
    t.join()
    assert seen == [None]
    lock.release()

    shared = redislock.Lock(r, "lock:n", timeout=10, thread_local=False)
    assert shared.acquire()
    errors = []

    def release_elsewhere() -> None:
        try:
            shared.release()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=release_elsewhere)
    t.start()
    t.join()
    assert errors == [] and r.exists("lock:n") == 0


def test_a_plain_string_under_the_name_reads_as_redis_py_lock_would(r: redis.Redis) -> None:
    # A fleet still on redis-py's own Lock holds the name with a plain string.
    r.set("old-lock", "their-token")
    lock = redislock.Lock(r, "old-lock", timeout=10)
    assert lock.acquire(blocking=False) is False
    assert lock.locked() is True
    assert lock.owned() is False
    started = time.monotonic()
    assert lock.acquire(blocking_timeout=0.3) is False
    assert 0.25 < time.monotonic() - started < 0.8
    # Granted once the string is gone (redis-py's lease on it ran out).
    r.set("old-lock", "their-token", px=200)
    assert lock.acquire(blocking_timeout=3) is True
    # Overwritten by a plain SET while held: the hold is gone, as redis-py's Lock says.
    r.set("old-lock", "their-token")
    for what in (lock.extend, lock.reacquire):
        with pytest.raises(LockNotOwnedError):
            lock.extend(1) if what == lock.extend else lock.reacquire()
    with pytest.raises(LockNotOwnedError):
        lock.call("GET", "x")
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_timeout_zero_means_no_expiry_as_in_redis_py(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:zero", timeout=0, lease=1)
    assert lock.auto_renew
    assert lock.acquire(blocking=False)
    assert 0 < must(lock.info())["ttl"] <= 1000
    lock.release()


def test_extend_past_the_remaining_time_ends_the_hold(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:neg", timeout=10)
    assert lock.acquire(blocking=False)
    assert lock.extend(-20) is True
    assert not r.exists("lock:neg")
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_arguments_are_checked() -> None:
    r = redis.Redis()  # never connected
    with pytest.raises(ValueError):
        redislock.Lock(r, "x", timeout=-1)
    with pytest.raises(ValueError):
        redislock.Lock(r, "x", auto_renew=False)
    with pytest.raises(ValueError):
        redislock.Lock(r, "x", shared=True, limit=2)
    with pytest.raises(ValueError):
        redislock.Lock(r, "x", limit=0)


# --- leases, renewal, loss --------------------------------------------------------------------


def test_no_timeout_means_held_until_released(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:o", lease=0.9)
    assert lock.acquire()
    fence = lock.fence
    renewals = calls(r, "lock.extend")
    # Four renewals, more than a lease's time: without them the lock would be gone.
    wait_for(lambda: calls(r, "lock.extend") >= renewals + 4, seconds=5)
    assert lock.owned() and info(r, "lock:o")["fence"] == fence
    assert not lock.lost.is_set()
    hold = lock.local.hold
    lock.release()
    assert hold.ended and not hold.lost  # off the renewal schedule
    assert r.exists("lock:o") == 0


def test_auto_renew_with_timeout(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:p", timeout=0.9, auto_renew=True)
    assert lock.acquire()
    renewals = calls(r, "lock.extend")
    wait_for(lambda: calls(r, "lock.extend") >= renewals + 4, seconds=5)
    assert lock.owned()
    lock.release()


def test_lost_event_and_callback(server: Server, r: redis.Redis) -> None:
    lost_calls: List[Any] = []
    lock = redislock.Lock(r, "lock:q", lease=0.3, on_lost=lost_calls.append)
    assert lock.acquire()
    hold = lock.local.hold
    r.delete("lock:q")  # an operator, an eviction, a lease that ran out during a pause
    other = redislock.Lock(server.client(), "lock:q", timeout=60)
    assert other.acquire(blocking=False)
    assert lock.lost.wait(5), "the loss was not reported"
    assert lost_calls == [lock]
    assert hold.ended and hold.lost, "the renewals stop after a loss"
    # The new holder's lease was not touched by the old holder's renewals.
    assert info(r, "lock:q")["token"] == other.local.token
    assert r.pttl("lock:q") > 59000
    with pytest.raises(LockNotOwnedError):
        lock.release()
    other.release()


def test_a_failing_callback_does_not_break_the_lock(r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    def boom(_lock: Any) -> None:
        raise RuntimeError("callback bug")

    lock = redislock.Lock(r, "lock:r", lease=0.3, on_lost=boom)
    with caplog.at_level(logging.ERROR, logger="redislock"):
        assert lock.acquire()
        r.delete("lock:r")
        assert lock.lost.wait(5)
        wait_for(lambda: "callback bug" in caplog.text, seconds=5)
    assert "callback bug" in caplog.text
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_lost_is_cleared_by_the_next_grant(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:s", lease=0.3)
    assert lock.acquire()
    r.delete("lock:s")
    assert lock.lost.wait(5)
    assert lock.acquire(blocking=False)
    assert not lock.lost.is_set()
    lock.release()


def test_renewals_use_their_own_connection(r: redis.Redis) -> None:
    lock = redislock.Lock(r, "lock:t", lease=0.3)
    assert lock.acquire()
    renewals = calls(r, "lock.extend")
    wait_for(lambda: calls(r, "lock.extend") > renewals)
    names = [c.get("cmd") for c in r.client_list()]
    # This client's connection is idle here; the renewals come from a second connection.
    assert len(names) >= 2
    lock.release()


def test_lease_survives_a_busy_application_connection(server: Server) -> None:
    # A client with a single connection, busy in a long blocking call: renewals still run.
    blocking_pool: Any = redis.BlockingConnectionPool
    pool = blocking_pool(host="127.0.0.1", port=server.port, max_connections=1)
    r = redis.Redis(connection_pool=pool)
    lock = redislock.Lock(r, "lock:u", lease=0.3)
    try:
        assert lock.acquire()
        r.blpop(["some-list"], timeout=1)  # holds the only pooled connection for 1 s
        assert lock.owned() and not lock.lost.is_set()
        lock.release()
    finally:
        pool.disconnect()


def test_fence_grows_with_every_grant(r: redis.Redis) -> None:
    fences = []
    for _ in range(3):
        with redislock.Lock(r, "lock:v", timeout=5) as lock:
            fences.append(lock.fence)
    assert fences == sorted(fences) and len(set(fences)) == 3


def test_a_with_block_whose_lease_ran_out_raises_on_exit(r: redis.Redis) -> None:
    """No auto-renew: the lease clock alone says the hold is lost, and the block's end says so
    too (even if the server still had a few milliseconds of it)."""
    with pytest.raises(LockNotOwnedError):
        with redislock.Lock(r, "lock:block", timeout=0.3) as lock:
            assert lock.lost.wait(2)
    assert not r.exists("lock:block")
