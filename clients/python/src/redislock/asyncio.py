"""The lock for ``redis.asyncio`` clients: the same interface as ``redislock.Lock``, awaited
(and ``Election``, as ``redislock.Election``).

``lost`` is an ``asyncio.Event``; ``on_lost`` may be a plain function or a coroutine function.
The lease clocks and renewals of every hold of an event loop run in one task of that loop.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Awaitable, Optional, Set, Type, TypeVar, Union, cast

import redis.asyncio.lock
from redis.exceptions import LockError, LockNotOwnedError

from . import _core
from ._base import Held, LockBase, logger
from ._common import (
    EncodableT,
    LockInfo,
    LockKindError,
    Number,
    StaleFenceError,
    UnsupportedError,
    parse_info,
)
from ._aelection import Election
from ._aowned import AsyncOwned, acarrier, aowned_for
from ._amulti import MultiLock
from ._lease import Hold, Schedule
from ._durable import NotReplicatedError
from ._election import Leader
from ._multi import CrossSlotError
from ._flow import Flow, Request, Send, adrive
from ._link import asend, shaper

__all__ = [
    "Lock",
    "FenceGate",
    "Election",
    "Leader",
    "MultiLock",
    "CrossSlotError",
    "LockError",
    "LockNotOwnedError",
    "UnsupportedError",
    "StaleFenceError",
    "LockKindError",
    "NotReplicatedError",
    "parse_info",
]

T = TypeVar("T")


class _LoopRenewer:
    """The schedule of every hold of one event loop, kept by one task; each renewal is sent by
    a short task of its own, so that one that hangs holds no other up. The task ends when
    nothing is scheduled, and starts again with the next hold."""

    def __init__(self) -> None:
        self.schedule = Schedule()
        self.wake = asyncio.Event()
        self.task: Optional["asyncio.Task[None]"] = None
        self.running: Set["asyncio.Task[None]"] = set()

    def add(self, hold: Hold) -> None:
        self.schedule.add(hold)
        self.wake.set()
        if self.task is None:
            self.task = asyncio.ensure_future(self._keep())

    def remove(self, hold: Hold) -> None:
        self.schedule.remove(hold)

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def _keep(self) -> None:
        try:
            while True:
                now = time.monotonic()
                renew, lost = self.schedule.due(now)
                for hold, request in renew:
                    self._spawn(self._renew(hold, request, now))
                for hold in lost:
                    self._lost(hold)
                wake = self.schedule.next_wake()
                if wake is None:
                    return
                self.wake.clear()
                loop = asyncio.get_running_loop()
                alarm = loop.call_later(max(0.0, wake - time.monotonic()), self.wake.set)
                try:
                    await self.wake.wait()  # the next moment due, or a hold added
                finally:
                    alarm.cancel()
        finally:
            self.task = None

    async def _renew(self, hold: Hold, request: Send, sent: float) -> None:
        owner: Lock = hold.owner
        reply: Any = None
        error: Optional[BaseException] = None
        try:
            reply = await owner._carry_hold(hold, request)
        except Exception as err:
            error = err
        if not hold.renewed(sent, reply, error):
            self.add(hold)
        elif hold.mark_lost(time.monotonic()):
            self._lost(hold)

    def closed(self, hold: Hold) -> None:
        """The connection ``hold`` is bound to closed: lost at once, signalled once."""
        if hold.connection_closed(time.monotonic()):
            self._lost(hold)

    def _lost(self, hold: Hold) -> None:
        """Signals a loss: ``lost`` set, then ``on_lost`` called at once (a coroutine it returns
        runs as a task of its own)."""
        owner: Lock = hold.owner
        if hold.conn is not None:  # a lost hold's own connection has nothing more to carry
            hold.conn.close()
        if not owner._note_loss(hold) or owner.on_lost is None:
            return
        try:
            result = owner.on_lost(owner)
        except Exception:
            logger.exception("on_lost callback of lock %r failed", owner.name)
            return
        if inspect.isawaitable(result):
            self._spawn(_awaited(owner, result))


async def _awaited(owner: "Lock", result: Awaitable[Any]) -> None:
    try:
        await result
    except Exception:
        logger.exception("on_lost callback of lock %r failed", owner.name)


_renewers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopRenewer]" = weakref.WeakKeyDictionary()


def renewer() -> _LoopRenewer:
    loop = asyncio.get_running_loop()
    keeper = _renewers.get(loop)
    if keeper is None:
        keeper = _renewers[loop] = _LoopRenewer()
    return keeper


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
