"""The lease clocks and renewals of every asynchronous hold (``redislock.asyncio.Lock``,
``MultiLock``) of an event loop, kept by one task of that loop."""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from typing import Any, Awaitable, Callable, Optional, Protocol, Set

from ._base import logger
from ._flow import Send
from ._lease import Hold, Schedule

__all__ = ["renewer"]


class _Owner(Protocol):
    """What the renewer asks of a hold's owner (a lock)."""

    name: Any
    on_lost: Optional[Callable[[Any], Any]]

    async def _carry_hold(self, hold: Hold, request: Send) -> Any: ...

    def _note_loss(self, hold: Hold) -> bool: ...


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
        owner: _Owner = hold.owner
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
        owner: _Owner = hold.owner
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


async def _awaited(owner: _Owner, result: Awaitable[Any]) -> None:
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
