"""Locks for the redislock Redis module, on redis-py.

``redislock.Lock`` is a drop-in ``lock_class`` for redis-py's ``r.lock()``: the same arguments
and methods, and the same exceptions (``redis.exceptions.LockError``, ``LockNotOwnedError``), but
waiting happens in the server, each grant carries a fencing token (``lock.fence``), a lock
without ``timeout`` is held until released (a lease renewed in the background), and ``lock.lost``
/ ``on_lost`` say when a renewal finds the lock gone. ``shared=True`` and ``limit=n`` take a
read hold of a read/write lock or a place of a semaphore; ``replicas=n`` reports a grant only
once ``n`` replicas have it (``NotReplicatedError`` otherwise). ``redislock.asyncio`` has the same for
``redis.asyncio``; ``redislock.Redlock`` runs one lock over several independent servers.
``redislock.Election`` elects one leader among candidates, in terms that are fencing tokens,
and lets anyone observe who leads. ``redislock.MultiLock`` takes several keys at once, all or
nothing, with a fence per key.
"""

from redis.exceptions import LockError, LockNotOwnedError

from ._common import HolderInfo, LockInfo, LockKindError, StaleFenceError, UnsupportedError
from ._durable import NotReplicatedError
from ._election import Leader
from ._run import CampaignCancelled
from .election import Election
from .lock import FenceGate, Lock, supports
from .multilock import CrossSlotError, MultiLock
from .redlock import Redlock, RedlockError

__all__ = [
    "Lock",
    "FenceGate",
    "Election",
    "Leader",
    "CampaignCancelled",
    "MultiLock",
    "CrossSlotError",
    "Redlock",
    "RedlockError",
    "LockError",
    "LockNotOwnedError",
    "UnsupportedError",
    "StaleFenceError",
    "LockKindError",
    "NotReplicatedError",
    "LockInfo",
    "HolderInfo",
    "supports",
]

__version__ = "0.1.0"
