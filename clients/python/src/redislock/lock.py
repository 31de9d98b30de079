"""The lock, for redis-py's synchronous clients (``redis.Redis``, ``redis.RedisCluster``): the
core's flows carried out with blocking calls, and one renewal thread for every hold."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Optional, Type, TypeVar, Union, cast

import redis as redis_py

from . import _core
from ._base import Held, LockBase, logger
from ._common import EncodableT, LockInfo, Number, UnsupportedError, parse_info, unsupported
from ._lease import Hold
from ._flow import Flow, Request, Send, drive
from ._link import link_for, send, shaper
from ._owned import Owned, carrier, owned_for
from ._renewer import _LeaseEvent, _Renewer, closed, renewer

__all__ = ["Lock", "FenceGate", "supports", "UnsupportedError", "parse_info", "_Renewer"]

T = TypeVar("T")


class _Local(threading.local):
    """Per-thread state of a lock; the class attributes are every thread's defaults."""

    token: Optional[bytes] = None
    fence: Optional[int] = None
    hold: Optional[Hold] = None
    #: The connection an ``ephemeral`` acquire is asking on, until the grant takes it.
    pending: Optional[Owned] = None


class Lock(LockBase[Union[redis_py.Redis, redis_py.RedisCluster]]):
    """A lock served by the redislock module, with redis-py ``Lock``'s interface.

    ``Lock(redis, name, timeout=None, sleep=0.1, blocking=True, blocking_timeout=None,
    thread_local=True, raise_on_release_error=True)`` takes redis-py's arguments, so
    ``r.lock(name, ..., lock_class=redislock.Lock)`` works. ``redis`` is a ``redis.Redis`` or a
    ``redis.RedisCluster``. Waiting happens in the server; ``sleep`` is the pause between tries
    only while the key holds a plain string (a lock of redis-py's own, during a migration).

    - ``timeout``: the lock's time to live in seconds. ``None`` or 0 (the default) means held
      until released: the lock gets a lease of ``lease`` seconds that is renewed in the
      background.
    - ``auto_renew``: renew the lease every third of the TTL until release; always on without
      ``timeout``.
    - ``on_lost``: called with the lock, once, from the process's renewal thread, when the hold
      is lost: a renewal found it gone, or its lease ran out before a renewal was answered (or,
      without ``auto_renew``, ran out at all) — at the lease's conservative local end, before
      the server can grant the lock to anyone else. ``lost`` (a ``threading.Event``) is set at
      the same moment; ``release()`` works inside the callback. A with-block whose hold was lost
      raises ``LockNotOwnedError`` on exit.
    - ``shared``: a read hold of a read/write lock (LOCK.ACQUIRE … SHARED): any number of
      shared holders at once, or one exclusive holder, never both.
    - ``limit``: one of ``limit`` places of a semaphore (LOCK.ACQUIRE … LIMIT n); every lock on
      the key must give the same ``limit``.
    - ``ephemeral``: the hold ends when its connection closes (EPHEMERAL): a connection the lock
      opens for the hold (from the client's settings, never one of its pool), which carries its
      grant, renewals and release and is closed when the hold ends. A close of it (``CLIENT
      KILL``, a restart) is a loss, signalled as soon as its socket says so.
    - ``replicas``: a grant is reported only once that many replicas acknowledged it (``WAIT
      replicas timeout`` on the connection that received it, after a direct or a waited grant);
      fewer within ``replicas_timeout`` seconds (default 1): the grant is released and
      ``NotReplicatedError`` (a ``LockError``) raised. Each renewal waits likewise, and one not
      acknowledged in time does not count for the lease clock. Default 0: no ``WAIT`` at all.
    - ``aof_local``, ``aof_replicas``: the same with ``WAITAOF``: the grant is in the master's
      AOF on disk (``aof_local``, which needs ``appendonly yes``) and in that of
      ``aof_replicas`` replicas. Needs Redis 7.2+ or Valkey 8+: the first ``acquire()`` checks
      it and raises ``UnsupportedError`` (taking nothing) where the server has no ``WAITAOF``.

    On a single server, acquire, release, extend and the renewals go through connections of the
    lock's own (same settings as the client's, no retries), each bounded in time: a wait reads
    for as long as it waits, whatever the client's ``socket_timeout``; see docs/clients.md for
    what happens under each network fault. On a ``RedisCluster`` they go through the cluster
    client, which follows redirects and failovers. Each grant has its own token, fence and
    lease, whatever the kind. A request that does not fit the key raises ``LockKindError``; on
    a server without these options they raise ``UnsupportedError``.
    """

    lost: _LeaseEvent

    def _new_lost(self) -> Any:
        return _LeaseEvent(self)

    def _new_local(self) -> Any:
        return _Local() if self.thread_local else SimpleNamespace(token=None, fence=None, hold=None)

    # -- redis-py's interface -----------------------------------------------------------------

    def __enter__(self) -> "HeldLock":
        if self.acquire():
            return cast("HeldLock", self)
        raise self._not_acquired()

    def __exit__(self, exc_type: Optional[Type[BaseException]], *rest: object) -> None:
        self._drive(self._leave(exc_type))

    def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[EncodableT] = None,
    ) -> bool:
        """Take the lock: True once granted. Waits in the server (LOCK.ACQUIRE … BLOCK) unless
        ``blocking`` is false, at most ``blocking_timeout`` seconds (None: without limit).

        The wait is sent once; if its connection drops, it is sent again once, with the time
        left (at the back of the queue); on a Cluster, a wait that meets a slot migration or a
        failover is sent again to the node serving the key, with the time left. A wait never
        outlives ``blocking_timeout`` by more than the network's round trip: with no answer by
        then, ``redis.exceptions.TimeoutError``."""
        return self._asking(self._acquire(sleep, blocking, blocking_timeout, token))

    def locked(self) -> bool:
        """True if the lock is held by anyone (a plain string under the name counts, as it
        does for redis-py's Lock)."""
        return drive(_core.locked(self.name), self._carry)

    def owned(self) -> bool:
        """True if the lock is held with this lock's token. False once the hold's local lease
        clock has run out, without asking the server (in a forked child as well)."""
        return drive(_core.owned(self.name, self.local), self._carry)

    def release(self) -> None:
        """Give the lock back; ``LockNotOwnedError`` if it was no longer held. On a single
        server bounded in time: at most the lease time left (at least 1 s), and never more than
        the client's ``socket_timeout``; then ``redis.exceptions.TimeoutError``, and the token is
        kept, so that a later ``release()`` can try again."""
        self._drive(self._release())

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to the remaining time (or, with ``replace_ttl``, set
        the remaining time to it). A result of zero or less ends the hold, as the key's expiry
        does for redis-py's Lock. With ``auto_renew``, the next renewal sets it back to the
        lock's timeout."""
        return self._drive(self._extend(additional_time, replace_ttl))

    def reacquire(self) -> bool:
        """Reset the remaining time to the lock's timeout."""
        return self._drive(_core.reacquire(self._spec, self.local))

    # -- more than redis-py -------------------------------------------------------------------

    def info(self) -> Optional[LockInfo]:
        """LOCK.INFO: mode, ttl (ms), waiters, holders (and token, fence of an exclusive lock;
        limit of a semaphore); None when nobody holds the lock."""
        return drive(_core.info(self.name), self._carry)

    def call(self, *command: EncodableT) -> Any:
        """Run ``command`` atomically if this lock's token still holds it (LOCK.CALL): its reply,
        or its error, as redis-py gives them for the command sent directly.
        ``LockNotOwnedError`` only if the hold is gone. Sent once, never retried: a command
        whose answer was lost may have run."""
        return drive(_core.call(self.name, self.local, command, shaper(self.redis)), self._carry)

    # -- I/O ----------------------------------------------------------------------------------

    def _carry(self, request: Request) -> Any:
        if isinstance(request, Send):
            return send(self.redis, request)
        time.sleep(request.seconds)  # polling a key of another type
        return None

    def _carry_hold(self, hold: Hold, request: Request) -> Any:
        """A request of ``hold`` (a renewal): on its own connection if it is bound to one."""
        return carrier(self._carry, hold.conn)(request)

    def _asking(self, flow: Flow[T]) -> T:
        """An acquire: with ``ephemeral``, asked on a connection of the lock's own, which the
        hold then lives on (closed here if nothing was granted)."""
        if not self.ephemeral:
            return drive(flow, self._carry)
        owned = owned_for(self.redis, self.name, max(self._ttl_ms / 1000, 1.0))
        self.local.pending = owned
        try:
            return drive(flow, carrier(self._carry, owned))
        finally:
            self.local.pending = None
            if owned is not None and not owned.pinned:
                owned.close()

    def _drive(self, flow: Flow[T]) -> T:
        """Any other operation: the current hold's requests on its own connection, which is
        closed once the hold ended (released, lost)."""
        hold = self._held()
        owned = None if hold is None else hold.conn
        try:
            return drive(flow, carrier(self._carry, owned))
        finally:
            if owned is not None and hold is not None and hold.ended:
                owned.close()

    def _bind(self, hold: Hold, previous: Optional[Hold]) -> None:
        owned = getattr(self.local, "pending", None)
        if previous is not None and previous.conn is not None and previous.conn is not owned:
            previous.conn.close()  # a hold replaced by a new grant: nothing renews it now
        if owned is not None:
            hold.conn = owned
            owned.watch(lambda: closed(hold))

    def _schedule(self, hold: Hold) -> None:
        if not self.auto_renew and self.on_lost is None:
            return  # ``lost`` reads the lease clock itself: nothing to run
        keeper = renewer()
        hold.watched = True
        link = link_for(self.redis)
        if self.auto_renew and link is not None:
            keeper.submit(link.spare)
        keeper.add(hold)

    def _unschedule(self, hold: Hold) -> None:
        renewer().remove(hold)

    def _call_on_lost(self, hold: Hold) -> None:
        callback = self.on_lost
        if callback is None:
            return
        # The renewal thread's own view of the hold, so that on_lost may call release().
        local = self.local
        if local.token is None:
            local.token, local.fence, local.hold = hold.token, hold.fence, hold
        try:
            callback(self)
        except Exception:  # a callback's bug must not kill the renewal thread silently
            logger.exception("on_lost callback of lock %r failed", self.name)
        finally:
            if self.thread_local and local.hold is hold:
                local.token = local.fence = local.hold = None


if TYPE_CHECKING:

    class HeldLock(Held, Lock):
        """A ``Lock`` inside its with-block, for type checkers (see ``Held``)."""

else:
    HeldLock = Lock


class FenceGate:
    """A gate key that runs commands only for fences at least as new as any it has accepted
    (LOCK.FENCE): for resources on another shard, or written without holding the lock."""

    def __init__(self, redis: Union[redis_py.Redis, redis_py.RedisCluster], gate: Union[str, bytes]) -> None:
        self.redis = redis
        self.gate = gate

    def call(self, fence: int, *command: EncodableT) -> Any:
        """Run ``command`` if ``fence`` ≥ the gate's highest: its reply, or its error, as
        redis-py gives them for the command sent directly; ``StaleFenceError`` otherwise."""
        return drive(_core.fence_call(self.gate, fence, command, shaper(self.redis)), self._carry)

    def _carry(self, request: Request) -> Any:
        assert isinstance(request, Send)
        client: Any = self.redis
        return client.execute_command(*request.args)


def supports(redis: Any, command: str) -> bool:
    """True if the server knows ``command`` (a LOCK.* command of a newer redislock, say).

    It sends the command with no arguments: a server that knows it answers with its arity
    error, one that does not with an unknown-command error; nothing is changed either way."""
    from redis.exceptions import ResponseError

    try:
        redis.execute_command(command)
    except ResponseError as err:
        return not unsupported(err)
    return True

