"""Leader election for ``redis.asyncio`` clients: ``redislock.asyncio.Election``, the same
interface as ``redislock.Election``, awaited. The decisions are ``_election``'s; this carries
them out with ``await``, on the asyncio lock's machinery (its connections, its event loop's
renewal task, its lease clock)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional, Union, overload

import redis.asyncio

from ._common import Number
from ._durable import DEFAULT_TIMEOUT as DEFAULT_REPLICAS_TIMEOUT
from ._election import DEFAULT_LEASE, DataT, ElectionBase, Leader, Observation, data_arg, leader, observe_next
from ._flow import adrive

if TYPE_CHECKING:
    from .asyncio import Lock

__all__ = ["Election", "Leader"]


class Election(ElectionBase["Lock"]):
    """``redislock.Election`` for ``redis.asyncio.Redis`` / ``RedisCluster``: ``await
    election.campaign()``, ``await election.resign()``, ``await election.leader()``, ``async
    for leader in election.observe()``. ``lost`` is an ``asyncio.Event``; ``on_lost`` may be a
    plain function or a coroutine function. Cancelling ``campaign()`` ends the wait (its
    connection is closed, which takes the candidate out of the server's queue); cancelling the
    task that iterates ``observe()`` ends the observation."""

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
        from .asyncio import Lock  # here: redislock.asyncio imports this module

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

    async def leader(self) -> Optional[Leader]:
        """As ``redislock.Election.leader``."""
        return await adrive(leader(self.name), self._lock._carry)

    async def observe(self) -> AsyncIterator[Leader]:
        """As ``redislock.Election.observe``, an async iterator."""
        observation = Observation(self.name)
        while True:
            yield await adrive(observe_next(observation), self._lock._carry)
