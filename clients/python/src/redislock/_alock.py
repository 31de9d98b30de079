"""``redislock.asyncio.Lock`` and ``FenceGate``: the lock for ``redis.asyncio`` clients."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Optional, Type, TypeVar, Union, cast

import redis.asyncio.lock

from . import _core
from ._arenewer import renewer
from ._aowned import AsyncOwned, acarrier, aowned_for
from ._base import Held, LockBase
from ._common import EncodableT, LockInfo, Number
from ._flow import Flow, Request, Send, adrive
from ._lease import Hold
from ._link import asend, shaper

__all__ = ["Lock", "HeldLock", "FenceGate"]

T = TypeVar("T")


class Lock(LockBase[Union[redis.asyncio.Redis, redis.asyncio.RedisCluster]], redis.asyncio.lock.Lock):
    """``redislock.Lock`` for ``redis.asyncio.Redis`` / ``RedisCluster``: ``await lock.acquire()``,
    ``async with r.lock(name, lock_class=redislock.asyncio.Lock)``, and so on (a subclass of
    ``redis.asyncio.lock.Lock``, so that ``lock_class`` type-checks). ``acquire`` takes
    redis.asyncio's arguments in its order (``blocking``, ``blocking_timeout``, ``token``), then
    ``sleep``."""

    _kind = "redislock.asyncio.Lock"
    lost: asyncio.Event

    def _new_lost(self) -> Any:
        return asyncio.Event()

    def _new_local(self) -> Any:
        # Tasks share one thread: the token lives on the lock, as in redis.asyncio's own Lock.
        return SimpleNamespace(token=None, fence=None, hold=None, pending=None)

    async def __aenter__(self) -> "HeldLock":
        if await self.acquire():
            return cast("HeldLock", self)
        raise self._not_acquired()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], *rest: object) -> None:
        await self._drive(self._leave(exc_type))

    async def acquire(
        self,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[EncodableT] = None,
        sleep: Optional[Number] = None,
    ) -> bool:
        """As ``redislock.Lock.acquire``. Cancelling it ends the wait: its connection is closed,
        which takes the waiter out of the server's queue."""
        return await self._asking(self._acquire(sleep, blocking, blocking_timeout, token))

    async def locked(self) -> bool:
        return await adrive(_core.locked(self.name), self._carry)

    async def owned(self) -> bool:
        return await adrive(_core.owned(self.name, self.local), self._carry)

    async def release(self) -> None:
        """As ``redislock.Lock.release``. The token is forgotten only once the server has
        answered: a release that is cancelled or times out can be tried again."""
        await self._drive(self._release())

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:  # type: ignore[override]
        return await self._drive(self._extend(additional_time, replace_ttl))

    async def reacquire(self) -> bool:  # type: ignore[override]
        return await self._drive(_core.reacquire(self._spec, self.local))

    async def info(self) -> Optional[LockInfo]:
        return await adrive(_core.info(self.name), self._carry)

    async def call(self, *command: EncodableT) -> Any:
        return await adrive(_core.call(self.name, self.local, command, shaper(self.redis)), self._carry)

    async def _carry(self, request: Request) -> Any:
        if isinstance(request, Send):
            return await asend(self.redis, request)
        await asyncio.sleep(request.seconds)  # polling a key of another type
        return None

    async def _carry_hold(self, hold: Hold, request: Request) -> Any:
        """A request of ``hold`` (a renewal): on its own connection if it is bound to one."""
        return await acarrier(self._carry, hold.conn)(request)

    async def _asking(self, flow: Flow[T]) -> T:
        """An acquire: with ``ephemeral``, asked on a connection of the lock's own, which the
        hold then lives on (closed here if nothing was granted, or the acquire was cancelled)."""
        if not self.ephemeral:
            return await adrive(flow, self._carry)
        owned = aowned_for(self.redis, self.name, max(self._ttl_ms / 1000, 1.0))
        self.local.pending = owned
        try:
            return await adrive(flow, acarrier(self._carry, owned))
        finally:
            self.local.pending = None
            if owned is not None and not owned.pinned:
                await owned.aclose()

    async def _drive(self, flow: Flow[T]) -> T:
        """Any other operation: the current hold's requests on its own connection, which is
        closed once the hold ended (released, lost)."""
        hold = self._held()
        owned: Optional[AsyncOwned] = None if hold is None else hold.conn
        try:
            return await adrive(flow, acarrier(self._carry, owned))
        finally:
            if owned is not None and hold is not None and hold.ended:
                await owned.aclose()

    def _bind(self, hold: Hold, previous: Optional[Hold]) -> None:
        owned: Optional[AsyncOwned] = getattr(self.local, "pending", None)
        if previous is not None and previous.conn is not None and previous.conn is not owned:
            previous.conn.close()  # a hold replaced by a new grant: nothing renews it now
        if owned is not None:
            hold.conn = owned
            keeper = renewer()
            owned.watch(lambda: keeper.closed(hold))

    def _schedule(self, hold: Hold) -> None:
        renewer().add(hold)

    def _unschedule(self, hold: Hold) -> None:
        renewer().remove(hold)


if TYPE_CHECKING:

    class HeldLock(Held, Lock):
        """A ``Lock`` inside its ``async with`` block, for type checkers (see ``Held``)."""

else:
    HeldLock = Lock


class FenceGate:
    """``redislock.FenceGate`` for ``redis.asyncio`` clients."""

    def __init__(self, redis: Union["redis.asyncio.Redis", "redis.asyncio.RedisCluster"], gate: Union[str, bytes]) -> None:
        self.redis = redis
        self.gate = gate

    async def call(self, fence: int, *command: EncodableT) -> Any:
        return await adrive(_core.fence_call(self.gate, fence, command, shaper(self.redis)), self._carry)

    async def _carry(self, request: Request) -> Any:
        assert isinstance(request, Send)
        return await self.redis.execute_command(*request.args)
