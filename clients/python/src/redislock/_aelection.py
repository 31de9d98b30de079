"""Leader election for ``redis.asyncio`` clients: ``redislock.asyncio.Election``, the same
interface as ``redislock.Election``, awaited. The decisions are ``_election``'s; this carries
them out with ``await``, on the asyncio lock's machinery (its connections, its event loop's
renewal task, its lease clock)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, AsyncIterator, Awaitable, Callable, List, Optional, Union, overload

import redis.asyncio
from redis.exceptions import ConnectionError, LockError, TimeoutError

from ._alock import Lock
from ._base import logger
from ._common import Number
from ._durable import DEFAULT_TIMEOUT as DEFAULT_REPLICAS_TIMEOUT
from ._election import DEFAULT_LEASE, DataT, ElectionBase, Leader, Observation, data_arg, leader, observe_next
from ._flow import adrive
from ._run import FOLLOW_BLOCK, RETRY_FIRST, Run, next_pause


__all__ = ["Election", "Leader"]


class Election(ElectionBase["Lock"]):
    """``redislock.Election`` for ``redis.asyncio.Redis`` / ``RedisCluster``: ``await
    election.campaign()``, ``await election.resign()``, ``await election.proclaim(data)``,
    ``await election.leader()``, ``async for leader in election.observe()``. ``lost`` is an ``asyncio.Event``; ``on_lost`` may be a
    plain function or a coroutine function. Cancelling ``campaign()`` ends the wait (its
    connection is closed, which takes the candidate out of the server's queue); cancelling the
    task that iterates ``observe()`` ends the observation. ``await election.run(fn)``: as
    ``redislock.Election.run``, ``fn`` a coroutine function called with an ``asyncio.Event``,
    run as a task that is cancelled (the event set first) the moment leadership is lost;
    ``stop()`` or cancelling the task of ``run`` ends the run."""

    _kind = "redislock.asyncio.Election"

    def __init__(
        self,
        redis: Union["redis.asyncio.Redis", "redis.asyncio.RedisCluster"],
        name: Union[str, bytes],
        *,
        lease: Number = DEFAULT_LEASE,
        data: DataT = None,
        on_lost: Optional[Callable[["Election"], Any]] = None,
        replicas: int = 0,
        replicas_timeout: Number = DEFAULT_REPLICAS_TIMEOUT,
    ) -> None:
        value = data_arg(data)
        lock = Lock(
            redis,
            name,
            lease=lease,
            thread_local=False,
            ephemeral=True,
            on_lost=self._signal_lost,
            replicas=replicas,
            replicas_timeout=replicas_timeout,
        )
        super().__init__(lock, name, lease, value, on_lost)
        self.redis = redis
        self._campaign_task: Optional["asyncio.Task[Optional[int]]"] = None

    @property
    def lost(self) -> asyncio.Event:
        event: asyncio.Event = self._lock.lost
        return event

    @overload
    async def campaign(self, timeout: None = None) -> int: ...
    @overload
    async def campaign(self, timeout: Number) -> Optional[int]: ...

    async def campaign(self, timeout: Optional[Number] = None) -> Optional[int]:
        """As ``redislock.Election.campaign``."""
        lock: Lock = self._lock
        return await lock._asking(self._campaign(timeout))

    async def resign(self) -> bool:
        """As ``redislock.Election.resign``."""
        lock: Lock = self._lock
        return await lock._drive(self._resign())

    async def proclaim(self, data: Union[str, bytes, memoryview]) -> None:
        """As ``redislock.Election.proclaim``."""
        lock: Lock = self._lock
        await lock._drive(self._proclaim(data))

    async def leader(self) -> Optional[Leader]:
        """As ``redislock.Election.leader``."""
        return await adrive(leader(self.name), self._lock._carry)

    async def observe(self) -> AsyncIterator[Optional[Leader]]:
        """As ``redislock.Election.observe``, an async iterator."""
        observation = Observation(self.name)
        while True:
            yield await adrive(observe_next(observation), self._lock._carry)

    def stop(self) -> None:
        """Ends ``run()``: no more campaigns (a campaign waiting is cancelled), the work's
        event set and its task cancelled, the term resigned."""
        running: Optional[Run] = self._running
        if running is not None:
            running.stop()
        if self._campaign_task is not None:
            self._campaign_task.cancel()

    async def run(
        self,
        fn: Callable[[asyncio.Event], Awaitable[Any]],
        *,
        on_elected: Optional[Callable[[int], Any]] = None,
        on_new_leader: Optional[Callable[[Optional[Leader]], Any]] = None,
    ) -> None:
        """As ``redislock.Election.run``: ``fn(stop)`` runs as a task of its own, and the moment
        leadership is lost (or ``stop()`` is called) ``stop`` is set and that task cancelled;
        the term is resigned once it has ended. Callbacks may be coroutine functions."""
        running = Run(on_elected, on_new_leader)
        if self._running is not None:
            raise LockError(f"a run of the election {self.name!r} goes on already")
        self._running = running
        follower = asyncio.ensure_future(self._follow(running)) if on_new_leader is not None else None
        try:
            pause = RETRY_FIRST
            while running.campaigning():
                self._campaign_task = asyncio.ensure_future(self.campaign())
                try:
                    got = await self._campaign_task
                except asyncio.CancelledError:
                    if running.stopped:  # stop() cancelled it
                        break
                    raise
                except (ConnectionError, TimeoutError) as err:
                    # The server is away (restarting, failing over): campaign again once it
                    # answers. The pause is the task stop() cancels meanwhile.
                    logger.warning("Campaigning in election %r: %s; trying again", self.name, err)
                    self._campaign_task = asyncio.ensure_future(asyncio.sleep(pause))
                    try:
                        await self._campaign_task
                    except asyncio.CancelledError:
                        if running.stopped:
                            break
                        raise
                    pause = next_pause(pause)
                    continue
                finally:
                    self._campaign_task = None
                pause = RETRY_FIRST
                await self._work(running, fn, got)
        finally:
            running.end()
            self._running = None
            if follower is not None:
                follower.cancel()
                await asyncio.gather(follower, return_exceptions=True)

    async def _work(self, running: Run, fn: Callable[[asyncio.Event], Awaitable[Any]], got: Optional[int]) -> None:
        """One term of a run: ``fn`` as a task, cancelled when the term's handle fires."""
        assert got is not None  # a campaign without a timeout returns a term or raises
        stop = asyncio.Event()
        tasks: List["asyncio.Future[Any]"] = []

        def fire() -> None:
            stop.set()
            for task in tasks:
                task.cancel()

        term = running.elected(got, fire, lambda: self.is_leader and not self.lost.is_set())
        try:
            await _called(running.on_elected, got)
            if not running.working(term):
                return
            work = asyncio.ensure_future(fn(stop))
            tasks.append(work)
            if not running.working(term):  # fired meanwhile (by the callback)
                work.cancel()
            try:
                await asyncio.wait({work})
            except asyncio.CancelledError:  # the run's own task is cancelled: the run ends
                running.stop()
                await asyncio.gather(work, return_exceptions=True)
                raise
            if not work.cancelled() and work.exception() is not None:
                raise work.exception()  # type: ignore[misc]
        finally:
            running.finished(term)
            await self._resign_quietly()

    async def _resign_quietly(self) -> None:
        """As ``redislock.Election._resign_quietly``."""
        try:
            await self.resign()
        except Exception as err:
            logger.warning("Resigning in election %r: %s; closing the term's connection", self.name, err)
            lock: Lock = self._lock
            hold = lock._held()
            lock._forget()
            if hold is not None and hold.conn is not None:
                hold.conn.close()
            lock.local.token = lock.local.fence = lock.local.hold = None

    async def _follow(self, running: Run) -> None:
        """The run's observer: ``on_new_leader`` for each change, until the run ends."""
        observation = Observation(self.name, block=FOLLOW_BLOCK)
        while not running.ended:
            try:
                change = await adrive(observe_next(observation), self._lock._carry)
            except Exception as err:
                logger.warning("Observing election %r for run(): %s; no more on_new_leader", self.name, err)
                return
            if running.seen(change):
                try:
                    await _called(running.on_new_leader, change)
                except Exception:
                    logger.exception("on_new_leader callback of election %r failed", self.name)


async def _called(callback: Optional[Callable[[Any], Any]], value: Any) -> None:
    """``callback(value)``, awaited if it is a coroutine function."""
    if callback is None:
        return
    result = callback(value)
    if inspect.isawaitable(result):
        await result
