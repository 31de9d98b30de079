"""What the Python client offers as the Node.js client does (docs/clients.md, "One API in both
languages"), on both front ends against a real server: ``MultiLock`` has ``extend()``,
``reacquire()``, ``info()``, ``locked()`` and an ``owned()`` that asks the server, as ``Lock``
has them; its fences by name and in order (``fences``, ``fence_of()``, ``fence_list``); a
multi-key ``acquire()`` waits by default, as ``Lock.acquire()`` does (Node: neither waits by
default).

Every test needs ``LOCK.ACQUIREALL`` in the server's module and is skipped without it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator, List

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError

import redislock
import redislock.asyncio as alock
from fronts import FRONTS, Driven, Front
from helpers import must
from servers import Server

NAMES = ["{par}:a", "{par}:b", "{par}:c"]


@pytest.fixture(params=FRONTS)
def front(request: Any, server: Server, r: redis.Redis) -> Iterator[Front]:
    if not redislock.supports(r, "LOCK.ACQUIREALL"):
        pytest.skip("needs LOCK.ACQUIREALL, which this server's module does not have")
    f = Front(request.param, server.port)
    try:
        yield f
    finally:
        f.close()


def multi(front: Front, names: List[str], **kwargs: Any) -> Any:
    if front.kind == "sync":
        return redislock.MultiLock(front.client(), names, **kwargs)
    return Driven(front, alock.MultiLock(front.client(), names, **kwargs))


def ttl(r: redis.Redis, name: str) -> int:
    return int(must(redislock.Lock(r, name).info())["ttl"])


def test_info_fences_and_owned_asking_the_server(r: redis.Redis, front: Front) -> None:
    lock = multi(front, NAMES, timeout=10)
    assert lock.info() == {name: None for name in NAMES}
    idle = multi(front, NAMES, timeout=10)
    assert idle.fence_list is None and idle.fence_of(NAMES[0]) is None
    assert lock.acquire()
    found = lock.info()
    in_order: List[int] = lock.fence_list
    assert list(found) == NAMES
    assert [(must(i)["token"], must(i)["fence"]) for i in found.values()] == [(lock.token, f) for f in in_order]
    assert in_order == list(lock.fences.values())
    assert lock.fence_of(NAMES[1]) == lock.fences[NAMES[1]]
    with pytest.raises(KeyError):
        lock.fence_of("{par}:other")
    assert lock.owned() is True
    r.delete(NAMES[1])  # a key taken away behind the holder's back
    assert lock.lease_left > 0  # the lease clock cannot know it: owned() asks the server
    assert lock.owned() is False
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_locked_is_any_key_held_by_anyone(r: redis.Redis, front: Front) -> None:
    lock = multi(front, NAMES, timeout=10)
    assert lock.locked() is False
    other = redislock.Lock(r, NAMES[2], timeout=10)
    assert other.acquire(blocking=False)
    assert lock.locked() is True
    other.release()
    r.set(NAMES[0], "redis-py's own lock")  # a plain string counts as held, as for Lock
    assert lock.locked() is True
    r.delete(NAMES[0])
    assert lock.locked() is False


def test_extend_and_reacquire_every_key(r: redis.Redis, front: Front) -> None:
    lock = multi(front, NAMES, timeout=10)
    with pytest.raises(LockError):
        lock.extend(1)  # not held
    assert lock.acquire()
    assert lock.extend(20) is True  # the least time left plus 20 s, on every key
    assert all(25000 < ttl(r, n) <= 30000 for n in NAMES)
    assert 25 < lock.lease_left <= 30
    assert lock.extend(2, replace_ttl=True) is True
    assert all(ttl(r, n) <= 2000 for n in NAMES)
    assert lock.lease_left <= 2
    assert lock.reacquire() is True
    assert all(ttl(r, n) > 5000 for n in NAMES)
    assert lock.lease_left > 5
    r.delete(NAMES[2])
    with pytest.raises(LockNotOwnedError):
        lock.reacquire()
    with pytest.raises(LockNotOwnedError):
        lock.extend(5)
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert lock.acquire()
    assert lock.extend(-100) is True  # zero or less left: every key released
    assert all(redislock.Lock(r, n).info() is None for n in NAMES)
    renewed = multi(front, NAMES)  # without timeout: renewed automatically, not extended by hand
    assert renewed.acquire()
    with pytest.raises(LockError):
        renewed.extend(1)
    with pytest.raises(LockError):
        renewed.reacquire()
    renewed.release()


def test_a_multi_key_acquire_waits_by_default_as_lock_does(r: redis.Redis, server: Server, front: Front) -> None:
    holder = redislock.Lock(r, NAMES[1], timeout=10, thread_local=False)
    assert holder.acquire()
    lock = multi(front, NAMES, timeout=10)
    got: List[bool] = []
    waiting = threading.Thread(target=lambda: got.append(lock.acquire()))
    waiting.start()
    deadline = time.monotonic() + 10
    while int(must(holder.info())["waiters"]) != 1:  # polling server state: no event to await
        assert time.monotonic() < deadline, "the multi-key acquire did not wait"
        time.sleep(0.005)
    assert got == []
    holder.release()
    waiting.join(10)
    assert got == [True]
    lock.release()
