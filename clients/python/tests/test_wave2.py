"""Shared locks, semaphores, connection-bound holds and guarded writes, against the module of this
repository, which has them all: nothing here is skipped. What a server without them answers is
checked with a stand-in client that answers as the previous release of the module did."""

from __future__ import annotations

from typing import Any, Dict
from helpers import must
from servers import Server

import threading
import time

import pytest
from redis.exceptions import LockError, LockNotOwnedError, ResponseError

import redis
import redislock


def wait_for(predicate: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)  # polling server state: a block has no event a client can await


def waiters(r: redis.Redis, name: Any) -> int:
    info = redislock.Lock(r, name, timeout=1).info()
    return info["waiters"] if info else 0


def in_thread(call: Any) -> Any:
    """Runs ``call`` in a thread (a blocking acquire); ``result()`` joins and returns its value."""
    box: Dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("value", call()), daemon=True)
    thread.start()

    def result() -> Any:
        thread.join(15)
        assert "value" in box, "the call did not return"
        return box["value"]

    return result


# --- a server without the options and commands ---------------------------------------------------


class PreviousRelease:
    """Answers as a server with the previous release of the module: no SHARED, LIMIT, EPHEMERAL,
    LOCK.CALL or LOCK.FENCE (redis-py drops the leading "ERR " of the error lines)."""

    def execute_command(self, *args: Any) -> Any:
        name = str(args[0]).upper()
        if name in ("LOCK.CALL", "LOCK.FENCE"):
            raise ResponseError(f"unknown command '{args[0]}', with args beginning with: ")
        if name == "LOCK.ACQUIRE":
            for option in args[5:]:
                if str(option).upper() in ("SHARED", "LIMIT", "EPHEMERAL"):
                    raise ResponseError(f"syntax error: unknown option '{option}'")
            return [args[2], 61727287109632]
        return 1


def old_server() -> Any:
    """A stand-in for a client of a server with an older redislock."""
    return PreviousRelease()


#: No client: the arguments are refused before any command.
no_client: Any = None


@pytest.mark.parametrize("option", [{"shared": True}, {"limit": 2}, {"ephemeral": True}])
def test_options_an_older_server_lacks_raise_unsupported_error(option: Any) -> None:
    with pytest.raises(redislock.UnsupportedError):
        redislock.Lock(old_server(), "lock:s", timeout=10, **option).acquire()


def test_commands_an_older_server_lacks_raise_unsupported_error() -> None:
    old = old_server()
    lock = redislock.Lock(old, "lock:c", timeout=10)
    assert lock.acquire()
    with pytest.raises(redislock.UnsupportedError):
        lock.call("SET", "{lock:c}:data", "x")
    with pytest.raises(redislock.UnsupportedError):
        redislock.FenceGate(old, "gate:c").call(1, "SET", "{gate:c}:data", "x")
    assert redislock.supports(old, "LOCK.CALL") is False


def test_this_server_has_every_option(r: redis.Redis) -> None:
    for command in ("LOCK.CALL", "LOCK.FENCE"):
        assert redislock.supports(r, command)
    for option in ({"shared": True}, {"limit": 2}, {"ephemeral": True}):
        lock = redislock.Lock(r, f"lock:{sorted(option)[0]}", timeout=10, **option)
        assert lock.acquire(blocking=False)
        lock.release()


# --- shared (read/write) locks -------------------------------------------------------------------


def test_shared_holders(r: redis.Redis) -> None:
    readers = [redislock.Lock(r, "lock:rw", timeout=10, shared=True) for _ in range(3)]
    assert all(lock.acquire(blocking=False) for lock in readers)
    fences = [must(lock.fence) for lock in readers]
    assert fences == sorted(fences) and len(set(fences)) == 3
    writer = redislock.Lock(r, "lock:rw", timeout=10)
    assert writer.acquire(blocking=False) is False
    info = readers[0].info()
    assert info is not None
    assert info["mode"] == "shared" and "token" not in info and "limit" not in info
    assert info.tokens == [must(lock.token) for lock in readers]
    assert [h["fence"] for h in info["holders"]] == fences
    assert all(9000 < h["ttl"] <= 10000 and h["client"] == 0 for h in info["holders"])
    assert must(info.holder(readers[1].token))["fence"] == must(readers[1].fence)
    assert all(lock.owned() for lock in readers) and not writer.owned()
    assert writer.locked()
    for lock in readers:
        lock.release()
    assert not writer.locked()
    assert writer.acquire(blocking=False)
    info = writer.info()
    assert info is not None
    assert info["mode"] == "exclusive" and info["token"] == must(writer.token)
    assert info["holders"] == [
        {"token": must(writer.token), "fence": must(writer.fence), "ttl": info["ttl"], "client": 0}
    ]
    assert must(writer.fence) > fences[-1]
    writer.release()


def test_a_waiting_writer_goes_before_later_readers(server: Server, r: redis.Redis) -> None:
    reader = redislock.Lock(r, "lock:rw", timeout=10, shared=True)
    assert reader.acquire(blocking=False)
    # Blocking acquires in threads, each on a connection of its own; thread_local=False so that
    # this thread sees their tokens and fences.
    conns = [server.client(), server.client()]
    writer = redislock.Lock(conns[0], "lock:rw", timeout=10, thread_local=False)
    writer_granted = in_thread(lambda: writer.acquire(blocking_timeout=10))
    wait_for(lambda: waiters(r, "lock:rw") == 1)
    late = redislock.Lock(r, "lock:rw", timeout=10, shared=True)
    assert late.acquire(blocking=False) is False, "a reader overtook the waiting writer"
    behind = redislock.Lock(conns[1], "lock:rw", timeout=10, shared=True, thread_local=False)
    behind_granted = in_thread(lambda: behind.acquire(blocking_timeout=10))
    wait_for(lambda: waiters(r, "lock:rw") == 2)
    reader.release()
    assert writer_granted() is True
    assert writer.fence > reader.local.fence
    assert must(writer.info())["mode"] == "exclusive"
    writer.release()
    assert behind_granted() is True
    assert behind.fence > writer.local.fence
    assert behind.owned()
    behind.release()
    assert r.exists("lock:rw") == 0
    for conn in conns:
        conn.close()


def test_the_token_of_a_hold_cannot_take_the_other_mode(r: redis.Redis) -> None:
    reader = redislock.Lock(r, "lock:rw", timeout=10, shared=True)
    assert reader.acquire(token="worker-1")
    with pytest.raises(redislock.LockKindError) as caught:
        redislock.Lock(r, "lock:rw", timeout=10).acquire(token="worker-1")
    assert caught.value.other_mode and caught.value.limit is None
    assert must(reader.info()).tokens == [b"worker-1"]
    reader.release()


def test_extend_and_reacquire_act_on_one_hold(r: redis.Redis) -> None:
    a = redislock.Lock(r, "lock:rw", timeout=5, shared=True)
    b = redislock.Lock(r, "lock:rw", timeout=5, shared=True)
    assert a.acquire() and b.acquire()
    assert a.extend(10)
    info = a.info()
    assert info is not None
    assert 14000 < must(info.holder(a.token))["ttl"] <= 15000
    assert 4000 < must(info.holder(b.token))["ttl"] <= 5000
    assert 14000 < r.pttl("lock:rw") <= 15000, "the key's TTL is the latest lease"
    assert a.reacquire()
    assert 4000 < must(must(a.info()).holder(a.token))["ttl"] <= 5000
    b.release()
    with pytest.raises(LockError):
        b.extend(1)
    a.release()


# --- semaphores ------------------------------------------------------------------------------------


def test_semaphore(r: redis.Redis) -> None:
    a, b, c = (redislock.Lock(r, "lock:sem", timeout=10, limit=2) for _ in range(3))
    assert a.acquire(blocking=False) and b.acquire(blocking=False)
    assert c.acquire(blocking=False) is False
    info = a.info()
    assert info is not None
    assert (info["mode"], info["limit"], info["waiters"]) == ("semaphore", 2, 0)
    assert info.tokens == [must(a.token), must(b.token)] and "token" not in info
    assert c.acquire(blocking_timeout=0.2) is False
    a.release()
    assert not a.owned() and b.owned()
    assert c.acquire(blocking=False)
    assert must(c.fence) > must(b.fence) > must(a.local.fence)
    b.release()
    c.release()
    assert r.exists("lock:sem") == 0


def test_a_place_is_handed_on_when_a_lease_ends(r: redis.Redis) -> None:
    first = redislock.Lock(r, "lock:sem", timeout=0.3, limit=1)
    assert first.acquire()
    started = time.monotonic()
    second = redislock.Lock(r, "lock:sem", timeout=10, limit=1)
    assert second.acquire(blocking_timeout=5)
    assert time.monotonic() - started >= 0.2
    assert not first.owned() and second.owned()
    with pytest.raises(LockNotOwnedError):
        first.release()
    second.release()


def test_requests_that_do_not_fit_the_key_raise_lock_kind_error(r: redis.Redis) -> None:
    holder = redislock.Lock(r, "lock:pool", timeout=10, limit=2)
    assert holder.acquire()
    for other in ({"limit": 3}, {"limit": 1}, {}, {"shared": True}):
        with pytest.raises(redislock.LockKindError) as caught:
            # Refused at once, even when asked to wait.
            redislock.Lock(r, "lock:pool", timeout=10, **other).acquire(blocking_timeout=10)
        assert caught.value.limit == 2 and not caught.value.other_mode
        assert isinstance(caught.value, LockError)
        assert "LIMIT 2" in str(caught.value)
    reader = redislock.Lock(r, "lock:rw", timeout=10, shared=True)
    assert reader.acquire()
    with pytest.raises(redislock.LockKindError) as caught:
        redislock.Lock(r, "lock:rw", timeout=10, limit=2).acquire()
    assert caught.value.limit is None and not caught.value.other_mode
    # Nothing changed.
    assert must(holder.info()).tokens == [must(holder.token)] and must(reader.info()).tokens == [must(reader.token)]
    holder.release()
    reader.release()


# --- every kind ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [{}, {"shared": True}, {"limit": 3}], ids=["exclusive", "shared", "limit"])
def test_the_same_token_re_grants_with_the_same_fence(r: redis.Redis, kind: Any) -> None:
    lock = redislock.Lock(r, "lock:k", timeout=10, **kind)
    assert lock.acquire(token="worker-1")
    fence = must(lock.fence)
    again = redislock.Lock(r, "lock:k", timeout=30, **kind)
    assert again.acquire(token="worker-1", blocking=False)
    assert again.fence == fence
    info = again.info()
    assert info is not None
    assert info.tokens == [b"worker-1"]
    assert 29000 < must(info.holder("worker-1"))["ttl"] <= 30000
    again.release()
    assert lock.acquire(token="worker-1")
    assert must(lock.fence) > fence, "a new grant after a release has a new fence"
    lock.release()


@pytest.mark.parametrize("protocol", [2, 3])
def test_info_under_resp2_and_resp3(server: Server, protocol: Any) -> None:
    r = server.client(protocol=protocol, single_connection_client=True)
    try:
        r.flushall()
        a = redislock.Lock(r, "lock:sem", timeout=10, limit=3, ephemeral=True)
        b = redislock.Lock(r, "lock:sem", timeout=10, limit=3)
        assert a.acquire() and b.acquire()
        info = a.info()
        assert info is not None
        assert (info["mode"], info["limit"]) == ("semaphore", 3)
        assert [h["token"] for h in info["holders"]] == [must(a.token), must(b.token)]
        assert all(isinstance(h["fence"], int) for h in info["holders"])
        # Bound to a connection of the lock's own, never the application's.
        assert must(info.holder(a.token))["client"] not in (0, r.client_id())
        assert must(info.holder(b.token))["client"] == 0
        a.release()
        b.release()
        x = redislock.Lock(r, "lock:x", timeout=10)
        assert x.acquire()
        info = x.info()
        assert info is not None
        assert info["token"] == must(x.token) and info["fence"] == must(x.fence)
        assert must(info.holder(x.token))["fence"] == must(x.fence)
        x.release()
    finally:
        r.close()


def test_mode_arguments_are_checked() -> None:
    for bad in (0, -1, 1_000_001, True, 2.0):
        with pytest.raises(ValueError):
            redislock.Lock(no_client, "lock:k", timeout=1, limit=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        redislock.Lock(no_client, "lock:k", timeout=1, shared=True, limit=2)
    assert redislock.Lock(no_client, "lock:k", timeout=1, limit=1_000_000).limit == 1_000_000


# --- connection-bound holds and guarded writes ----------------------------------------------------


def bound_client(r: redis.Redis, name: str, token: bytes) -> int:
    """The id of the connection the hold of ``token`` on ``name`` is bound to."""
    client: int = must(must(redislock.Lock(r, name).info()).holder(token))["client"]
    assert client != 0
    return client


def test_ephemeral_hold_ends_with_its_connection(server: Server, r: redis.Redis) -> None:
    own = server.client(single_connection_client=True)
    lock = redislock.Lock(own, "lock:eph", timeout=60, ephemeral=True)
    assert lock.acquire()
    assert r.exists("lock:eph") == 1
    r.client_kill_filter(_id=str(bound_client(r, "lock:eph", must(lock.token))))
    other = redislock.Lock(r, "lock:eph", timeout=10)
    assert other.acquire(blocking_timeout=5)
    assert lock.lost.wait(5) and not lock.owned()
    other.release()
    own.close()


def test_ephemeral_shared_holds_end_one_by_one(server: Server, r: redis.Redis) -> None:
    own = server.client(single_connection_client=True)
    bound = redislock.Lock(own, "lock:rw", timeout=60, shared=True, ephemeral=True)
    kept = redislock.Lock(r, "lock:rw", timeout=60, shared=True)
    assert bound.acquire() and kept.acquire()
    r.client_kill_filter(_id=str(bound_client(r, "lock:rw", must(bound.token))))
    own.close()
    wait_for(lambda: must(kept.info()).tokens == [must(kept.token)])
    kept.release()


@pytest.mark.parametrize("kind", [{}, {"shared": True}, {"limit": 2}], ids=["exclusive", "shared", "limit"])
def test_call_runs_only_for_the_holder(r: redis.Redis, kind: Any) -> None:
    lock = redislock.Lock(r, "{acct}:lock", timeout=10, **kind)
    assert lock.acquire()
    assert lock.call("SET", "{acct}:balance", "10") in (True, b"OK", "OK")
    assert r.get("{acct}:balance") == b"10"
    r.delete("{acct}:lock")
    with pytest.raises(LockNotOwnedError):
        lock.call("SET", "{acct}:balance", "20")
    assert r.get("{acct}:balance") == b"10"


def test_fence_gate(r: redis.Redis) -> None:
    gate = redislock.FenceGate(r, "gate:report")
    assert gate.call(100, "SET", "{gate:report}:v", "a") in (True, b"OK", "OK")
    assert gate.call(100, "SET", "{gate:report}:v", "b") in (True, b"OK", "OK")
    with pytest.raises(redislock.StaleFenceError) as caught:
        gate.call(99, "SET", "{gate:report}:v", "c")
    assert caught.value.fence == 99 and caught.value.highest == 100
    assert r.get("{gate:report}:v") == b"b"
