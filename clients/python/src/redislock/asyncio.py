"""The lock for ``redis.asyncio`` clients: the same interface as ``redislock.Lock``, awaited
(and ``Election``, as ``redislock.Election``).

``lost`` is an ``asyncio.Event``; ``on_lost`` may be a plain function or a coroutine function.
The lease clocks and renewals of every hold of an event loop run in one task of that loop.
"""

from __future__ import annotations

from redis.exceptions import LockError, LockNotOwnedError

from ._aelection import Election
from ._alock import FenceGate, HeldLock, Lock
from ._amulti import MultiLock
from ._common import LockKindError, StaleFenceError, UnsupportedError, parse_info
from ._durable import NotReplicatedError
from ._election import Leader
from ._multi import CrossSlotError

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
