"""Locks on several resources at once for redis-py's synchronous clients: ``redislock.MultiLock``.
The decisions are ``_multi``'s; this carries them out with blocking calls, on the lock's
machinery (its connections, the process's renewal thread)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Type, TypeVar, Union, cast

import redis as redis_py
from redis.crc import key_slot

from ._base import logger
from ._common import LockInfo, Number
from ._lease import Hold
from ._flow import Flow, Request, Send, drive
from ._link import link_for, send
from ._mbase import MultiLockBase
from ._multi import CrossSlotError, MultiHold, Name, RenewAll, renew_all
from ._owned import Owned, carrier, owned_for
from ._renewer import _LeaseEvent, closed, renewer

__all__ = ["MultiLock", "CrossSlotError"]

T = TypeVar("T")


class MultiLock(MultiLockBase[Union[redis_py.Redis, redis_py.RedisCluster]]):
    """A lock on several keys at once: every key granted in one atomic step, or none.

    ``MultiLock(redis, names, timeout=None, *, lease=30, auto_renew=None, blocking=True,
    blocking_timeout=None, on_lost=None, shared=False, ephemeral=False, replicas=0,
    replicas_timeout=1.0, raise_on_release_error=True)``; ``redis`` is a ``redis.Redis`` or a
    ``redis.RedisCluster``; ``names`` 1 to 64 distinct key names (on a Cluster, in one slot:
    ``{tag}:a``, ``{tag}:b``; ``CrossSlotError`` otherwise, before anything is sent).

    - ``acquire(blocking=None, blocking_timeout=None, token=None)`` waits in the server
      (``LOCK.ACQUIREALL … BLOCK``) until every key can be granted at once, first come first
      served on each key, never in part; True once granted. ``with MultiLock(...) as held:``
      acquires, and releases on exit.
    - ``fences``: each key's fencing token, by name; ``token``: the one owner token of every key.
    - Without ``timeout`` the lease (``lease`` seconds) is renewed in the background, one
      ``LOCK.EXTEND`` per key every third of the lease. The set has one lease clock: when it
      runs out before a renewal of every key was answered, or a renewal finds any key gone,
      ``lost`` is set and ``on_lost(lock)`` called (from the renewal thread) — before the
      server can grant any of the keys to anyone else. A with-block whose hold was lost raises
      ``LockNotOwnedError`` on exit.
    - ``release()`` gives every key back (``LOCK.RELEASEALL``); ``LockNotOwnedError`` when any
      key was no longer held (the others are released all the same).
    - ``shared``, ``ephemeral``, ``replicas``, ``replicas_timeout``: as for ``Lock`` (``WAIT``
      after the grant and after each key's renewal).

    Unlike ``Lock`` the hold is the object's, not a thread's."""

    lost: _LeaseEvent

    def _new_lost(self) -> Any:
        return _LeaseEvent(cast(Any, self))

    def _slot_of(self) -> Optional[Callable[[bytes], int]]:
        return key_slot if isinstance(self.redis, redis_py.RedisCluster) else None

    def __enter__(self) -> "HeldMultiLock":
        if self.acquire():
            return cast("HeldMultiLock", self)
        raise self._not_acquired()

    def __exit__(self, exc_type: Optional[Type[BaseException]], *rest: object) -> None:
        self._drive(self._leave(exc_type))

    def acquire(
        self, blocking: Optional[bool] = None, blocking_timeout: Optional[Number] = None, token: Optional[bytes] = None
    ) -> bool:
        """Take every key: True once granted, False if not granted within ``blocking_timeout``
        seconds (None: waits without limit), or at once with ``blocking=False``."""
        return self._asking(self._acquire(blocking, blocking_timeout, token))

    def release(self) -> int:
        """Give every key back: the number released (all of them, else ``LockNotOwnedError``).
        Without an answer (``TimeoutError``) the token is kept: ``release()`` can be called
        again."""
        return self._drive(self._release())

    def owned(self) -> bool:
        """Every key still has this hold (its token among the holders, with the grant's fence),
        as the server says (``LOCK.INFO`` of each key); False without asking once the lease
        clock ran out."""
        return self._drive(self._owned())

    def locked(self) -> bool:
        """Any of the keys is held by anyone."""
        return self._drive(self._locked())

    def info(self) -> Dict[Name, Optional[LockInfo]]:
        """``LOCK.INFO`` of each key, by name as given (None for a key that holds no lock)."""
        return self._drive(self._info())

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Every key to one new time to live: the least time any key has left plus
        ``additional_time`` seconds (with ``replace_ttl``: ``additional_time``). ``LockError``
        when not held or without ``timeout``; ``LockNotOwnedError`` when a key is gone."""
        return self._drive(self._extend(additional_time, replace_ttl))

    def reacquire(self) -> bool:
        """Every key back to ``timeout``; errors as ``extend``."""
        return self._drive(self._reacquire())

    # -- I/O ----------------------------------------------------------------------------------

    def _carry(self, request: Request) -> Any:
        if isinstance(request, RenewAll):
            return drive(renew_all(request), carrier(self._carry, request.hold.conn))
        if isinstance(request, Send):
            return send(self.redis, request)
        time.sleep(request.seconds)  # polling a key of another type
        return None

    def _carry_hold(self, hold: Hold, request: Request) -> Any:
        return carrier(self._carry, hold.conn)(request)

    def _asking(self, flow: Flow[T]) -> T:
        """An acquire: with ``ephemeral``, asked on a connection of the lock's own, which the
        hold then lives on (closed here if nothing was granted)."""
        if not self.ephemeral:
            return drive(flow, self._carry)
        owned = owned_for(self.redis, self.names[0], max(self._ttl_ms / 1000, 1.0))
        self._pending: Optional[Owned] = owned
        try:
            return drive(flow, carrier(self._carry, owned))
        finally:
            self._pending = None
            if owned is not None and not owned.pinned:
                owned.close()

    def _drive(self, flow: Flow[T]) -> T:
        hold = self._held()
        owned = None if hold is None else hold.conn
        try:
            return drive(flow, carrier(self._carry, owned))
        finally:
            if owned is not None and hold is not None and hold.ended:
                owned.close()

    def _bind(self, hold: MultiHold, previous: Optional[MultiHold]) -> None:
        owned: Optional[Owned] = getattr(self, "_pending", None)
        if previous is not None and previous.conn is not None and previous.conn is not owned:
            previous.conn.close()
        if owned is not None:
            hold.conn = owned
            owned.watch(lambda: closed(hold))

    def _schedule(self, hold: MultiHold) -> None:
        if not self.auto_renew and self.on_lost is None:
            return  # ``lost`` reads the lease clock itself
        keeper = renewer()
        hold.watched = True
        link = link_for(self.redis)
        if self.auto_renew and link is not None:
            keeper.submit(link.spare)
        keeper.add(hold)

    def _unschedule(self, hold: MultiHold) -> None:
        renewer().remove(hold)

    def _call_on_lost(self, hold: Hold) -> None:
        callback = self.on_lost
        if callback is None:
            return
        try:
            callback(self)
        except Exception:
            logger.exception("on_lost callback of multi-lock %s failed", self.name)


if TYPE_CHECKING:

    class HeldMultiLock(MultiLock):
        """A ``MultiLock`` inside its with-block, for type checkers: held, so ``fences`` and
        ``token`` are set."""

        @property
        def fences(self) -> Dict[Name, int]: ...

        @property
        def token(self) -> bytes: ...

else:
    HeldMultiLock = MultiLock
