"""Locks on several resources at once for ``redis.asyncio`` clients:
``redislock.asyncio.MultiLock``, the same interface as ``redislock.MultiLock``, awaited. The
decisions are ``_multi``'s; this carries them out with ``await``, on the asyncio lock's machinery
(its connections, its event loop's renewal task)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Type, Union, cast

import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.crc import key_slot

from ._common import Number
from ._flow import Request, Send, adrive
from ._link import asend
from ._mbase import MultiLockBase
from ._multi import CrossSlotError, MultiHold, Name, RenewAll, renew_all

__all__ = ["MultiLock", "CrossSlotError"]


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
        await adrive(self._leave(exc_type), self._carry)

    async def acquire(
        self, blocking: Optional[bool] = None, blocking_timeout: Optional[Number] = None, token: Optional[bytes] = None
    ) -> bool:
        """As ``redislock.MultiLock.acquire``."""
        return await adrive(self._acquire(blocking, blocking_timeout, token), self._carry)

    async def release(self) -> int:
        """As ``redislock.MultiLock.release``."""
        return await adrive(self._release(), self._carry)

    def owned(self) -> bool:
        """Held, by the local lease clock (no I/O)."""
        return self.lease_left > 0

    async def _carry(self, request: Request) -> Any:
        if isinstance(request, RenewAll):
            return await adrive(renew_all(request), self._carry)
        if isinstance(request, Send):
            return await asend(self.redis, request)
        await asyncio.sleep(request.seconds)
        return None

    def _schedule(self, hold: MultiHold) -> None:
        from .asyncio import renewer  # here: redislock.asyncio imports this module

        renewer().add(hold)

    def _unschedule(self, hold: MultiHold) -> None:
        from .asyncio import renewer

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
