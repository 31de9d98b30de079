"""``redislock.MultiLock`` and ``redislock.asyncio.MultiLock`` against a real server: all keys or
none, a fence per key, waits served first come first served on every key, every key renewed,
the loss of one key signalled as the loss of the set, release of every key, ``replicas=``, and a
partition signalled by the set's lease clock before anyone else is granted a key.

Every test needs ``LOCK.ACQUIREALL`` in the server's module and is skipped without it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator, List

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError

import redislock
import redislock.asyncio as alock
from fronts import FRONTS, Driven, Front
from helpers import must
from proxy import Proxy
from servers import Server

LEASE = 1.2
NAMES = ["{acct}:alice", "{acct}:bob", "{acct}:carol"]


def needs_acquireall(r: redis.Redis) -> None:
    if not redislock.supports(r, "LOCK.ACQUIREALL"):
        pytest.skip("needs LOCK.ACQUIREALL, which this server's module does not have")


@pytest.fixture(params=FRONTS)
def front(request: Any, server: Server, r: redis.Redis) -> Iterator[Front]:
    needs_acquireall(r)
    f = Front(request.param, server.port)
    try:
        yield f
    finally:
        f.close()


def multi(front: Front, client: Any, names: List[str], **kwargs: Any) -> Any:
    if front.kind == "sync":
        return redislock.MultiLock(client, names, **kwargs)
    return Driven(front, alock.MultiLock(client, names, **kwargs))


def info(r: redis.Redis, name: str) -> Any:
    return redislock.Lock(r, name).info()


def waiters(r: redis.Redis, name: str) -> int:
    found = info(r, name)
    return 0 if found is None else int(found["waiters"])


def blocked(r: redis.Redis, command: str) -> int:
    """How many connections wait in the server in ``command``."""
    return sum(1 for c in r.client_list() if c.get("cmd") == command and "b" in c.get("flags", ""))


def wait_for(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)  # polling server state (a request queued): no event a client can await


def test_every_key_or_none(r: redis.Redis, front: Front) -> None:
    other = redislock.Lock(r, NAMES[1], timeout=10)
    assert other.acquire(blocking=False)
    lock = multi(front, front.client(), NAMES, lease=10)
    assert lock.acquire(blocking=False) is False
    assert info(r, NAMES[0]) is None and info(r, NAMES[2]) is None  # nothing taken in part
    assert lock.fences is None and lock.token is None
    other.release()
    assert lock.acquire(blocking=False) is True
    assert all(info(r, n) is not None for n in NAMES)
    lock.release()


def test_a_fence_per_key_and_one_token(r: redis.Redis, front: Front) -> None:
    lock = multi(front, front.client(), NAMES, lease=10)
    assert lock.acquire()
    fences = must(lock.fences)
    assert list(fences) == NAMES
    for name in NAMES:
        found = must(info(r, name))
        assert found["fence"] == fences[name] and found["token"] == lock.token
        assert 9000 < found["ttl"] <= 10000
    lock.release()
    assert lock.acquire()
    assert all(must(lock.fences)[n] > fences[n] for n in NAMES)  # each key's fence went up
    lock.release()


def test_release_gives_every_key_back(r: redis.Redis, front: Front) -> None:
    lock = multi(front, front.client(), NAMES, lease=10)
    assert lock.acquire()
    assert lock.release() == 3
    assert all(info(r, n) is None for n in NAMES)
    with pytest.raises(LockError):
        lock.release()  # not held any more


def test_waits_are_served_in_order_on_every_key(r: redis.Redis, server: Server, front: Front) -> None:
    """A holds alice; B waits for [alice, bob]; then C waits for bob alone: C queued after B on
    bob, so C does not overtake B although bob is free meanwhile."""
    first = redislock.Lock(r, NAMES[0], timeout=10)
    assert first.acquire()
    order: List[str] = []
    b = multi(front, front.client(), NAMES[:2], lease=10)
    c = redislock.Lock(server.client(), NAMES[1], timeout=10)

    def take_b() -> None:
        assert b.acquire(blocking_timeout=5)
        order.append("B")
        b.release()

    def take_c() -> None:
        assert c.acquire(blocking_timeout=5)
        order.append("C")
        c.release()

    tb = threading.Thread(target=take_b)
    tb.start()
    wait_for(lambda: waiters(r, NAMES[0]) == 1)
    assert info(r, NAMES[1]) is None  # B waits and holds nothing meanwhile
    tc = threading.Thread(target=take_c)
    tc.start()
    wait_for(lambda: blocked(r, "lock.acquire") == 1)  # C waits in the server (LOCK.INFO shows no
    assert order == [] and info(r, NAMES[1]) is None  # holder of bob): bob is free, but C is behind B
    first.release()
    tb.join(10)
    tc.join(10)
    assert order == ["B", "C"]


def test_a_try_is_not_granted_behind_a_queued_waiter(r: redis.Redis, server: Server, front: Front) -> None:
    """First come, first served: a try (``blocking=False``) of a key that is free, or has room
    for it, is refused while an earlier request waits for that key; a short wait queues behind
    it instead, and is served after it."""
    first = redislock.Lock(r, NAMES[1], timeout=10)
    assert first.acquire()
    waiter = multi(front, front.client(), NAMES[:2], lease=10)
    got: List[bool] = []
    waiting = threading.Thread(target=lambda: got.append(waiter.acquire(blocking_timeout=10)))
    waiting.start()
    wait_for(lambda: waiters(r, NAMES[1]) == 1)
    assert info(r, NAMES[0]) is None  # alice is free, but the waiter for [alice, bob] is first
    poller = front.lock(front.client(), NAMES[0], timeout=10, thread_local=False)
    assert poller.acquire(blocking=False) is False
    assert poller.acquire(blocking_timeout=0) is False
    assert info(r, NAMES[0]) is None  # the tries took nothing
    # A shared lock: a reader's try is refused while a writer waits, though readers hold it.
    reader = front.lock(front.client(), NAMES[2], timeout=10, shared=True)
    assert reader.acquire(blocking=False)
    writer = redislock.Lock(server.client(), NAMES[2], timeout=10, thread_local=False)
    wrote: List[bool] = []
    writing = threading.Thread(target=lambda: wrote.append(writer.acquire(blocking_timeout=10)))
    writing.start()
    wait_for(lambda: waiters(r, NAMES[2]) == 1)
    assert front.lock(front.client(), NAMES[2], timeout=10, shared=True).acquire(blocking=False) is False
    reader.release()
    writing.join(10)
    assert wrote == [True]
    writer.release()
    # A short wait joins the queue behind the waiter and is served once it is done.
    behind: List[bool] = []
    queued = threading.Thread(target=lambda: behind.append(poller.acquire(blocking_timeout=10)))
    queued.start()
    wait_for(lambda: blocked(r, "lock.acquire") == 1)  # LOCK.INFO shows no holder of alice
    first.release()
    waiting.join(10)
    assert got == [True] and behind == []
    waiter.release()
    queued.join(10)
    assert behind == [True]
    poller.release()


def test_auto_renew_keeps_every_key(r: redis.Redis, front: Front) -> None:
    lost = threading.Event()
    lock = multi(front, front.client(), NAMES, lease=0.45, on_lost=lambda _: lost.set())
    assert lock.acquire()
    assert not lost.wait(1.1)  # more than two leases: held only if every key was renewed
    for name in NAMES:
        assert must(info(r, name))["token"] == lock.token
    lock.release()


def test_one_key_gone_is_the_set_lost(r: redis.Redis, front: Front) -> None:
    lost = threading.Event()
    seen: List[Any] = []

    def on_lost(held: Any) -> None:
        seen.append(held)
        lost.set()

    lock = multi(front, front.client(), NAMES, lease=2.4, on_lost=on_lost)
    assert lock.acquire()
    r.delete(NAMES[1])  # one key taken away behind the holder's back
    # Told by the first renewal (0.8 s), long before the set's lease clock would run out (2.4 s).
    assert lost.wait(1.6), "the loss of one key was not signalled by the renewal"
    assert len(seen) == 1 and lock.lease_left == 0.0 and not lock.owned()
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert all(info(r, n) is None for n in NAMES)  # the keys still held were released


def test_a_with_block_whose_set_was_lost_raises_on_exit(r: redis.Redis, server: Server) -> None:
    needs_acquireall(r)
    with pytest.raises(LockNotOwnedError):
        with redislock.MultiLock(server.client(), NAMES, lease=0.6) as held:
            assert list(held.fences) == NAMES
            r.delete(NAMES[2])
            assert held.lost.wait(2), "the loss of one key was not signalled"
    assert all(info(r, n) is None for n in NAMES)


def test_an_async_with_block_releases_every_key(r: redis.Redis, server: Server) -> None:
    needs_acquireall(r)
    import asyncio
    import redis.asyncio as aredis

    async def run() -> None:
        client = aredis.Redis(port=server.port)
        async with alock.MultiLock(client, NAMES, lease=10) as held:
            assert list(held.fences) == NAMES and held.token is not None
            assert all(info(r, n) is not None for n in NAMES)
        await client.aclose()

    asyncio.run(run())
    assert all(info(r, n) is None for n in NAMES)


def test_a_release_that_finds_a_key_gone_releases_the_rest(r: redis.Redis, front: Front) -> None:
    lock = multi(front, front.client(), NAMES, timeout=10)
    assert lock.acquire()
    r.delete(NAMES[0])
    with pytest.raises(LockNotOwnedError, match="2 of 3"):
        lock.release()
    assert all(info(r, n) is None for n in NAMES)


def test_ephemeral_ends_with_the_connection(r: redis.Redis, server: Server) -> None:
    needs_acquireall(r)
    client = redis.Redis(port=server.port, single_connection_client=True)
    lock = redislock.MultiLock(client, NAMES, ephemeral=True, lease=10)
    assert lock.acquire()
    clients = {must(info(r, n))["client"] for n in NAMES}
    assert len(clients) == 1 and 0 not in clients and client.client_id() not in clients
    r.client_kill_filter(_id=clients.pop())  # the connection of the lock's own
    assert lock.lost.wait(5)
    client.close()
    wait_for(lambda: all(info(r, n) is None for n in NAMES))


def test_shared_holds_of_several_keys(r: redis.Redis, front: Front) -> None:
    one = multi(front, front.client(), NAMES, lease=10, shared=True)
    two = multi(front, front.client(), NAMES, lease=10, shared=True)
    assert one.acquire(blocking=False) and two.acquire(blocking=False)
    assert redislock.Lock(r, NAMES[2], timeout=5).acquire(blocking=False) is False
    one.release()
    two.release()


@pytest.mark.parametrize("kind", FRONTS)
def test_a_partition_is_signalled_by_the_lease_clock_before_another_grant(server: Server, r: redis.Redis, kind: str) -> None:
    needs_acquireall(r)
    proxy = Proxy(server.port)
    front = Front(kind, proxy.port)
    try:
        lost_at: List[float] = []
        lost = threading.Event()

        def on_lost(_: Any) -> None:
            lost_at.append(time.monotonic())
            lost.set()

        lock = multi(front, front.client(), NAMES, lease=LEASE, on_lost=on_lost)
        assert lock.acquire(blocking=False)
        hold = lock._hold
        proxy.blackhole()
        cut = time.monotonic()
        granted: List[float] = []
        other = redislock.MultiLock(r, NAMES, timeout=10)

        def take() -> None:
            if other.acquire(blocking_timeout=LEASE + 5):
                granted.append(time.monotonic())

        t = threading.Thread(target=take)
        t.start()
        assert lost.wait(LEASE + 5), "the partition was not signalled"
        assert not lock.owned()
        t.join(10)
        # The set's lease clock ended before anyone else had the keys (recorded on one clock),
        # within a lease of the cut.
        assert granted and hold.lost and hold.lease_end < granted[0]
        assert hold.lease_end - cut < LEASE
        other.release()
        proxy.heal()
    finally:
        front.close()
        proxy.close()
