"""Locks on several resources at once for ``redis.asyncio`` clients:
``redislock.asyncio.MultiLock``, the same interface as ``redislock.MultiLock``, awaited. The
decisions are ``_multi``'s; this carries them out with ``await``, on the asyncio lock's machinery
(its connections, its event loop's renewal task)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Type, TypeVar, Union, cast

import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.crc import key_slot

from ._arenewer import renewer
from ._aowned import AsyncOwned, acarrier, aowned_for
from ._common import LockInfo, Number
from ._flow import Flow, Request, Send, adrive
from ._link import asend
from ._mbase import MultiLockBase
from ._multi import CrossSlotError, MultiHold, Name, RenewAll, renew_all

__all__ = ["MultiLock", "CrossSlotError"]

T = TypeVar("T")


class MultiLock(MultiLockBase[Union["redis.asyncio.Redis", "redis.asyncio.RedisCluster"]]):
    """``redislock.MultiLock`` for ``redis.asyncio.Redis`` / ``RedisCluster``: ``await
    lock.acquire()``, ``async with MultiLock(r, names) as held``, ``await lock.release()``.
    ``lost`` is an ``asyncio.Event``; ``on_lost`` may be a plain function or a coroutine
    function. Cancelling ``acquire()`` ends the wait (its connection is closed, which takes the
    request out of every key's queue)."""

    _kind = "redislock.asyncio.MultiLock"
    lost: asyncio.Event

    def _new_lost(self) -> Any:
        return asyncio.Event()

    def _slot_of(self) -> Optional[Callable[[bytes], int]]:
        return key_slot if isinstance(self.redis, AsyncRedisCluster) else None

    async def __aenter__(self) -> "HeldMultiLock":
        if await self.acquire():
            return cast("HeldMultiLock", self)
        raise self._not_acquired()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], *rest: object) -> None:
        await self._drive(self._leave(exc_type))

    async def acquire(
        self, blocking: Optional[bool] = None, blocking_timeout: Optional[Number] = None, token: Optional[bytes] = None
    ) -> bool:
        """As ``redislock.MultiLock.acquire``."""
        return await self._asking(self._acquire(blocking, blocking_timeout, token))

    async def release(self) -> int:
        """As ``redislock.MultiLock.release``."""
        return await self._drive(self._release())

    async def owned(self) -> bool:
        """As ``redislock.MultiLock.owned``: asks the server."""
        return await self._drive(self._owned())

    async def locked(self) -> bool:
        """As ``redislock.MultiLock.locked``."""
        return await self._drive(self._locked())

    async def info(self) -> Dict[Name, Optional[LockInfo]]:
        """As ``redislock.MultiLock.info``."""
        return await self._drive(self._info())

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """As ``redislock.MultiLock.extend``."""
        return await self._drive(self._extend(additional_time, replace_ttl))

    async def reacquire(self) -> bool:
        """As ``redislock.MultiLock.reacquire``."""
        return await self._drive(self._reacquire())

    async def _carry(self, request: Request) -> Any:
        if isinstance(request, RenewAll):
            return await adrive(renew_all(request), acarrier(self._carry, request.hold.conn))
        if isinstance(request, Send):
            return await asend(self.redis, request)
        await asyncio.sleep(request.seconds)
        return None

    async def _carry_hold(self, hold: MultiHold, request: Request) -> Any:
        return await acarrier(self._carry, hold.conn)(request)

    async def _asking(self, flow: Flow[T]) -> T:
        """As ``redislock.asyncio.Lock._asking``."""
        if not self.ephemeral:
            return await adrive(flow, self._carry)
        owned = aowned_for(self.redis, self.names[0], max(self._ttl_ms / 1000, 1.0))
        self._pending: Optional[AsyncOwned] = owned
        try:
            return await adrive(flow, acarrier(self._carry, owned))
        finally:
            self._pending = None
            if owned is not None and not owned.pinned:
                await owned.aclose()

    async def _drive(self, flow: Flow[T]) -> T:
        hold = self._held()
        owned: Optional[AsyncOwned] = None if hold is None else hold.conn
        try:
            return await adrive(flow, acarrier(self._carry, owned))
        finally:
            if owned is not None and hold is not None and hold.ended:
                await owned.aclose()

    def _bind(self, hold: MultiHold, previous: Optional[MultiHold]) -> None:
        owned: Optional[AsyncOwned] = getattr(self, "_pending", None)
        if previous is not None and previous.conn is not None and previous.conn is not owned:
            previous.conn.close()
        if owned is not None:
            hold.conn = owned
            keeper = renewer()
            owned.watch(lambda: keeper.closed(hold))

    def _schedule(self, hold: MultiHold) -> None:
        renewer().add(hold)

    def _unschedule(self, hold: MultiHold) -> None:
        renewer().remove(hold)


if TYPE_CHECKING:

    class HeldMultiLock(MultiLock):
        """A ``MultiLock`` inside its ``async with`` block, for type checkers."""

        @property
        def fences(self) -> Dict[Name, int]: ...

        @property
        def token(self) -> bytes: ...

else:
    HeldMultiLock = MultiLock
