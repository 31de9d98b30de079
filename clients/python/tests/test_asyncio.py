"""redislock.asyncio.Lock against a real server, with redis.asyncio."""

from __future__ import annotations

from typing import Any
from helpers import must
from servers import Server

import asyncio
import threading

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import LockError, LockNotOwnedError

import redislock.asyncio as alock


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def client(server: Server, **kwargs: Any) -> Any:
    return aioredis.Redis(host="127.0.0.1", port=server.port, **kwargs)


async def waiters(r: redis.Redis, name: Any) -> Any:
    client: Any = r
    info = alock.parse_info(await client.execute_command("LOCK.INFO", name))
    return info["waiters"] if info else 0


def test_drop_in_and_fence(server: Server, r: redis.Redis) -> None:
    async def main() -> None:
        a = client(server)
        try:
            async with a.lock("lock:a", timeout=10, lock_class=alock.Lock) as lock:
                assert isinstance(lock.fence, int) and lock.fence > 0
                assert await lock.owned() and await lock.locked()
                assert await lock.extend(5)
                assert 14000 < await a.pttl("lock:a") <= 15000
                assert await lock.reacquire()
            assert not await lock.locked()
            with pytest.raises(LockError):
                await lock.release()
        finally:
            await a.aclose()

    run(main())


def test_wait_in_the_server_and_handoff(server: Server, r: redis.Redis) -> None:
    async def main() -> None:
        a, b = client(server), client(server)
        try:
            holder = alock.Lock(a, "lock:b", timeout=10)
            assert await holder.acquire()
            assert await alock.Lock(a, "lock:b", timeout=10).acquire(blocking=False) is False
            assert await alock.Lock(a, "lock:b", timeout=10).acquire(blocking_timeout=0.2) is False
            waiter = alock.Lock(b, "lock:b", timeout=10)
            task = asyncio.ensure_future(waiter.acquire(blocking_timeout=10))
            while await waiters(a, "lock:b") != 1:
                await asyncio.sleep(0.005)  # polling server state: no event to await
            await holder.release()
            assert await task is True
            assert waiter.fence > holder.local.fence
            await waiter.release()
        finally:
            await a.aclose()
            await b.aclose()

    run(main())


def test_lease_renewal_and_loss(server: Server, r: redis.Redis) -> None:
    async def main() -> None:
        a = client(server)
        lost = []

        async def on_lost(lock: Any) -> None:
            lost.append(lock)

        try:
            lock = alock.Lock(a, "lock:c", lease=0.3, on_lost=on_lost)
            assert await lock.acquire()
            fence = lock.fence
            start = int((await a.info("commandstats"))["cmdstat_lock.extend"]["calls"]) if "cmdstat_lock.extend" in await a.info("commandstats") else 0
            while True:
                stats = await a.info("commandstats")
                if "cmdstat_lock.extend" in stats and int(stats["cmdstat_lock.extend"]["calls"]) >= start + 4:
                    break
                await asyncio.sleep(0.01)  # polling server state
            assert await lock.owned() and lock.fence == fence and not lock.lost.is_set()
            await a.delete("lock:c")
            await asyncio.wait_for(lock.lost.wait(), 5)
            assert lost == [lock]
            with pytest.raises(LockNotOwnedError):
                await lock.release()
            # Released normally: the hold leaves the renewal schedule.
            lock2 = alock.Lock(a, "lock:c", lease=0.3)
            assert await lock2.acquire()
            hold = lock2.local.hold
            await lock2.release()
            assert hold.ended and not hold.lost
        finally:
            await a.aclose()

    run(main())


def test_context_manager_keeps_the_block_exception(server: Server, r: redis.Redis) -> None:
    async def main() -> None:
        a = client(server)
        try:
            with pytest.raises(KeyError):
                async with alock.Lock(a, "lock:d", timeout=10):
                    await a.delete("lock:d")
                    raise KeyError("from the block")
            with pytest.raises(LockNotOwnedError):
                async with alock.Lock(a, "lock:d", timeout=10):
                    await a.delete("lock:d")
        finally:
            await a.aclose()

    run(main())


def test_shared_holds_and_semaphores(server: Server, r: redis.Redis) -> None:
    async def main() -> None:
        a, b = client(server), client(server)
        try:
            readers = [alock.Lock(a, "lock:rw", timeout=10, shared=True) for _ in range(2)]
            for reader in readers:
                assert await reader.acquire(blocking=False)
            info = await readers[0].info()
            assert info is not None
            assert info["mode"] == "shared"
            assert info.tokens == [must(reader.token) for reader in readers]
            assert all([await reader.owned() for reader in readers])
            # A writer waits for every reader, on a connection of its own.
            writer = alock.Lock(b, "lock:rw", timeout=10)
            task = asyncio.ensure_future(writer.acquire(blocking_timeout=10))
            while await waiters(a, "lock:rw") != 1:
                await asyncio.sleep(0.005)  # polling server state: no event to await
            for reader in readers:
                await reader.release()
            assert await task is True
            assert writer.fence > readers[1].local.fence
            await writer.release()

            places = [alock.Lock(a, "lock:sem", timeout=10, limit=2) for _ in range(3)]
            assert await places[0].acquire() and await places[1].acquire()
            assert await places[2].acquire(blocking=False) is False
            with pytest.raises(alock.LockKindError) as caught:
                await alock.Lock(a, "lock:sem", timeout=10, limit=5).acquire()
            assert caught.value.limit == 2
            await places[0].release()
            assert await places[2].acquire(blocking=False)
            for place in places[1:]:
                await place.release()
        finally:
            await a.aclose()
            await b.aclose()

    run(main())


def test_an_async_with_block_whose_lease_ran_out_raises_on_exit(server: Server, r: redis.Redis) -> None:
    async def main() -> None:
        a = client(server)
        try:
            with pytest.raises(LockNotOwnedError):
                async with alock.Lock(a, "lock:block", timeout=0.3) as lock:
                    await asyncio.wait_for(lock.lost.wait(), 2)
        finally:
            await a.aclose()

    run(main())
    assert not r.exists("lock:block")


def test_one_task_keeps_every_hold_of_a_loop(server: Server, r: redis.Redis) -> None:
    async def main() -> None:
        a = client(server)
        threads = threading.active_count()
        try:
            locks = [alock.Lock(a, f"lock:task:{i}", lease=60) for i in range(300)]
            for lock in locks:
                assert await lock.acquire(blocking=False)
            # Besides this one: the schedule's task alone (renewals are 20 s away, far more than
            # taking 300 locks lasts on a loaded machine).
            assert len(asyncio.all_tasks()) - 1 == 1
            assert threading.active_count() == threads
            for lock in locks:
                await lock.release()
        finally:
            await a.aclose()

    run(main())


def test_acquire_takes_redis_asyncio_arguments_in_their_order(server: Server, r: redis.Redis) -> None:
    """redis.asyncio's Lock.acquire(blocking, blocking_timeout, token): acquire(False) does not
    wait."""

    async def main() -> None:
        a = client(server)
        try:
            holder = alock.Lock(a, "lock:order", timeout=10)
            assert await holder.acquire(False, None, "holder-token")
            assert holder.token == b"holder-token"
            other = alock.Lock(a, "lock:order", timeout=10)
            assert await asyncio.wait_for(other.acquire(False), 2) is False
            assert await asyncio.wait_for(other.acquire(True, 0.2), 2) is False
            await holder.release()
        finally:
            await a.aclose()

    run(main())
